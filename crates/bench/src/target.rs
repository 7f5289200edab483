//! Where the benchmark's clients connect, and how: the bootstrap servers and the librdkafka
//! properties every client of a campaign gets (the admin client, producers and consumers).
//!
//! The properties are the connection's, not the workload's: security above all
//! (`security.protocol`, `sasl.*`, `ssl.ca.location`), so that one workload file runs against a
//! PLAINTEXT listener and a SASL_SSL one with nothing but the command line changed. They come
//! from `--client-config FILE` (Java-style `KEY=VALUE` lines, so passwords stay off the command
//! line) and `-X KEY=VALUE` flags, later ones winning, and are applied after every other setting,
//! the workload's `[producer_config]` and `[consumer_config]` included.
//!
//! Secrets never reach a results file: [`redacted`] replaces the value of every
//! secret-looking property ([`is_secret`]) before settings are recorded.

use std::collections::BTreeMap;

/// The cluster under test as the clients see it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Target {
    /// `HOST:PORT[,HOST:PORT...]`, librdkafka's `bootstrap.servers`.
    pub bootstrap: String,
    /// librdkafka properties for every client, in the order given (a later key wins).
    pub properties: Vec<(String, String)>,
}

/// What a recorded secret reads as.
pub const HIDDEN: &str = "***";

impl Target {
    /// A target reached with librdkafka's defaults (PLAINTEXT).
    pub fn plaintext(bootstrap: &str) -> Target {
        Target {
            bootstrap: bootstrap.into(),
            properties: Vec::new(),
        }
    }

    /// `settings` with `bootstrap.servers` and then each of this target's properties set,
    /// each replacing an earlier value of the same key.
    pub fn apply(&self, settings: &mut Vec<(String, String)>) {
        set(settings, "bootstrap.servers", &self.bootstrap);
        for (key, value) in &self.properties {
            set(settings, key, value);
        }
    }

    /// librdkafka's `security.protocol` as these properties set it, upper case
    /// (`PLAINTEXT` when they do not).
    pub fn security_protocol(&self) -> String {
        self.properties
            .iter()
            .rev()
            .find(|(k, _)| k == "security.protocol")
            .map_or_else(|| "PLAINTEXT".to_owned(), |(_, v)| v.to_ascii_uppercase())
    }
}

/// Sets `key` in `settings`, replacing its earlier value.
pub fn set(settings: &mut Vec<(String, String)>, key: &str, value: &str) {
    settings.retain(|(k, _)| k != key);
    settings.push((key.into(), value.into()));
}

/// Properties the command line must not set: they would point the load somewhere else, or are
/// set per client by the benchmark itself.
const OWN_KEYS: &[(&str, &str)] = &[
    ("bootstrap.servers", "give the brokers with --bootstrap"),
    ("metadata.broker.list", "give the brokers with --bootstrap"),
    ("group.id", "the benchmark names its own consumer groups"),
    ("client.id", "the benchmark names each of its clients"),
];

/// One `KEY=VALUE` (of `-X`/`--client-property`). The value may be empty or contain `=`.
pub fn parse_property(text: &str) -> Result<(String, String), String> {
    let Some((key, value)) = text.split_once('=') else {
        return Err(format!(
            "client property {text:?}: write KEY=VALUE, e.g. security.protocol=SASL_SSL"
        ));
    };
    let key = key.trim();
    if key.is_empty() || key.contains(char::is_whitespace) {
        return Err(format!(
            "client property {text:?}: the key must be one word, e.g. sasl.mechanisms"
        ));
    }
    if let Some((_, why)) = OWN_KEYS.iter().find(|(k, _)| *k == key) {
        return Err(format!("client property {key} cannot be set: {why}"));
    }
    Ok((key.to_owned(), value.trim().to_owned()))
}

/// A client properties file (`--client-config`): one `KEY=VALUE` per line, as Java clients and
/// kcat read them; blank lines and lines starting with `#` or `!` are skipped. Errors name the
/// line.
pub fn parse_properties_file(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let property = parse_property(line).map_err(|e| format!("line {}: {e}", index + 1))?;
        out.push(property);
    }
    Ok(out)
}

/// Whether a librdkafka property holds a secret: a password, a private key or key text, a
/// token or client secret, or a JAAS-style config line (which may carry a password).
pub fn is_secret(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["password", "secret", "token", "jaas", "oauthbearer.config"]
        .iter()
        .any(|s| key.contains(s))
        || key.ends_with("key.pem")
}

/// `settings` fit for a results file: every secret's value replaced by [`HIDDEN`].
pub fn redacted(settings: &[(String, String)]) -> BTreeMap<String, String> {
    settings
        .iter()
        .map(|(k, v)| {
            let value = if is_secret(k) { HIDDEN } else { v.as_str() };
            (k.clone(), value.to_owned())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_property_is_key_equals_value() {
        assert_eq!(
            parse_property("security.protocol=SASL_SSL"),
            Ok(("security.protocol".into(), "SASL_SSL".into()))
        );
        // The value keeps its own '=' and may be empty.
        assert_eq!(
            parse_property("sasl.password=a=b"),
            Ok(("sasl.password".into(), "a=b".into()))
        );
        assert_eq!(
            parse_property(" ssl.ca.location = /tmp/ca.crt "),
            Ok(("ssl.ca.location".into(), "/tmp/ca.crt".into()))
        );
        assert_eq!(
            parse_property("debug="),
            Ok(("debug".into(), String::new()))
        );
        for (bad, needle) in [
            ("security.protocol", "KEY=VALUE"),
            ("=x", "one word"),
            ("a b=c", "one word"),
            ("bootstrap.servers=h:1", "--bootstrap"),
            ("group.id=g", "consumer groups"),
        ] {
            let message = parse_property(bad).expect_err(bad);
            assert!(message.contains(needle), "{bad:?} gave {message:?}");
        }
    }

    #[test]
    fn a_properties_file_skips_comments_and_names_bad_lines() {
        let text = "# SASL_SSL to the bench listener\n\
                    security.protocol=SASL_SSL\n\
                    \n\
                    ! also a comment\n\
                    sasl.mechanisms=SCRAM-SHA-512\n\
                    sasl.username=bench\n\
                    sasl.password=s3cr3t\n";
        let properties = parse_properties_file(text).unwrap();
        assert_eq!(properties.len(), 4);
        assert_eq!(
            properties[0],
            ("security.protocol".into(), "SASL_SSL".into())
        );
        assert_eq!(properties[3], ("sasl.password".into(), "s3cr3t".into()));
        let message = parse_properties_file("a=1\nnot a property\n").unwrap_err();
        assert!(message.starts_with("line 2:"), "{message}");
    }

    #[test]
    fn later_properties_win_and_the_bootstrap_is_the_targets() {
        let target = Target {
            bootstrap: "127.0.0.1:9094".into(),
            properties: vec![
                ("security.protocol".into(), "ssl".into()),
                ("linger.ms".into(), "7".into()),
                ("security.protocol".into(), "sasl_ssl".into()),
            ],
        };
        let mut settings = vec![
            ("bootstrap.servers".to_string(), "x:1".to_string()),
            ("linger.ms".to_string(), "1".to_string()),
            ("acks".to_string(), "all".to_string()),
        ];
        target.apply(&mut settings);
        let map: BTreeMap<_, _> = settings.into_iter().collect();
        assert_eq!(map["bootstrap.servers"], "127.0.0.1:9094");
        assert_eq!(map["linger.ms"], "7");
        assert_eq!(map["security.protocol"], "sasl_ssl");
        assert_eq!(map["acks"], "all");
        assert_eq!(target.security_protocol(), "SASL_SSL");
        assert_eq!(Target::plaintext("h:1").security_protocol(), "PLAINTEXT");
    }

    #[test]
    fn secrets_are_hidden_in_what_is_recorded() {
        let settings: Vec<(String, String)> = [
            ("sasl.username", "bench"),
            ("sasl.password", "s3cr3t"),
            ("ssl.key.password", "k"),
            ("ssl.keystore.password", "k"),
            ("ssl.key.pem", "-----BEGIN PRIVATE KEY-----"),
            ("sasl.oauthbearer.client.secret", "c"),
            ("sasl.oauthbearer.config", "principal=x secret=y"),
            ("ssl.ca.location", "/tmp/ca.crt"),
            ("security.protocol", "SASL_SSL"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let shown = redacted(&settings);
        for hidden in [
            "sasl.password",
            "ssl.key.password",
            "ssl.keystore.password",
            "ssl.key.pem",
            "sasl.oauthbearer.client.secret",
            "sasl.oauthbearer.config",
        ] {
            assert_eq!(shown[hidden], HIDDEN, "{hidden}");
        }
        assert_eq!(shown["sasl.username"], "bench");
        assert_eq!(shown["ssl.ca.location"], "/tmp/ca.crt");
        assert_eq!(shown["security.protocol"], "SASL_SSL");
    }
}
