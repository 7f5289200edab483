//! Kafka-style listener lists: `--listeners "SSL://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092"`
//! and `--advertised-listeners` in the same form.
//!
//! A listener is a security protocol (Kafka's names) and an address. The index of a listener in
//! the list is its identity for the rest of the broker: connections pass it with every request
//! ([`sluice_broker::Caller::listener`]) so that Metadata, FindCoordinator and DescribeCluster
//! answer with the advertised address of the listener the request came in on.

use std::fmt;

/// Kafka's `security.protocol` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    pub const ALL: [SecurityProtocol; 4] = [
        SecurityProtocol::Plaintext,
        SecurityProtocol::Ssl,
        SecurityProtocol::SaslPlaintext,
        SecurityProtocol::SaslSsl,
    ];

    /// Kafka's name for it.
    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    /// Whether connections on it speak TLS first.
    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    /// Whether connections on it authenticate with SASL.
    pub fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }

    fn parse(name: &str) -> Option<SecurityProtocol> {
        SecurityProtocol::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(name))
    }
}

impl fmt::Display for SecurityProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One entry of a listener list: `PROTOCOL://HOST:PORT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerSpec {
    pub protocol: SecurityProtocol,
    /// As given (a name, an IPv4 address, or an IPv6 address in brackets); empty means all
    /// interfaces, as in Kafka's `PLAINTEXT://:9092`.
    pub host: String,
    pub port: u16,
}

impl ListenerSpec {
    /// The address to bind (an empty host binds every interface).
    pub fn bind_addr(&self) -> String {
        let host = if self.host.is_empty() {
            "0.0.0.0"
        } else {
            &self.host
        };
        format!("{host}:{}", self.port)
    }

    /// The host without IPv6 brackets, as clients are told it.
    pub fn bare_host(&self) -> &str {
        self.host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(&self.host)
    }
}

impl fmt::Display for ListenerSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}:{}", self.protocol, self.host, self.port)
    }
}

/// Why a listener list was refused; the message names the setting and the entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ListenerError(pub String);

/// Parses a comma-separated list of `PROTOCOL://HOST:PORT`. `setting` names the flag in
/// messages (`listeners` or `advertised_listeners`). Each protocol may appear once (Kafka names
/// listeners by protocol here, so two of one protocol could not be told apart), and for
/// `listeners` each port once (two listeners cannot bind one port; port 0 excepted).
pub fn parse_listeners(text: &str, setting: &str) -> Result<Vec<ListenerSpec>, ListenerError> {
    let fail = |msg: String| Err(ListenerError(format!("invalid {setting}: {msg}")));
    let mut out: Vec<ListenerSpec> = Vec::new();
    for entry in text.split(',').map(str::trim) {
        if entry.is_empty() {
            continue;
        }
        let Some((protocol, address)) = entry.split_once("://") else {
            return fail(format!(
                "'{entry}' is not PROTOCOL://HOST:PORT (for example PLAINTEXT://127.0.0.1:9092)"
            ));
        };
        let Some(protocol) = SecurityProtocol::parse(protocol) else {
            return fail(format!(
                "unknown security protocol '{protocol}' in '{entry}'; use one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"
            ));
        };
        // The port follows the last colon; an IPv6 host is in brackets, so its colons come
        // before it.
        let Some((host, port)) = address.rsplit_once(':') else {
            return fail(format!(
                "'{entry}' has no port (write HOST:PORT; 0 picks a free port)"
            ));
        };
        if host.contains(':') && !(host.starts_with('[') && host.ends_with(']')) {
            return fail(format!(
                "'{entry}': write an IPv6 host in brackets, as [::1]:9092"
            ));
        }
        let port: u16 = match port.parse() {
            Ok(p) => p,
            Err(_) => {
                return fail(format!(
                    "'{entry}' has no valid port ('{port}'; write HOST:PORT with a port from 0 to 65535)"
                ));
            }
        };
        if let Some(same) = out.iter().find(|l| l.protocol == protocol) {
            return fail(format!(
                "{protocol} is listed twice ('{same}' and '{entry}'); give each protocol one listener"
            ));
        }
        if setting == "listeners"
            && port != 0
            && let Some(same) = out.iter().find(|l| l.port == port)
        {
            return fail(format!(
                "port {port} is used by both '{same}' and '{entry}'; give each listener its own port"
            ));
        }
        out.push(ListenerSpec {
            protocol,
            host: host.to_owned(),
            port,
        });
    }
    if out.is_empty() {
        return fail("no listener given (write PROTOCOL://HOST:PORT[,...])".to_owned());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        parse_listeners(text, "listeners").unwrap_err().0
    }

    #[test]
    fn parses_kafka_style_lists() {
        let l = parse_listeners(
            " SSL://127.0.0.1:9093 , plaintext://localhost:0,SASL_SSL://[::1]:9094,SASL_PLAINTEXT://:9095",
            "listeners",
        )
        .unwrap();
        assert_eq!(l.len(), 4);
        assert_eq!(l[0].protocol, SecurityProtocol::Ssl);
        assert_eq!(l[0].bind_addr(), "127.0.0.1:9093");
        assert_eq!(l[1].protocol, SecurityProtocol::Plaintext);
        assert_eq!((l[1].host.as_str(), l[1].port), ("localhost", 0));
        assert_eq!(l[2].bare_host(), "::1");
        assert_eq!(l[2].bind_addr(), "[::1]:9094");
        assert_eq!(l[3].bind_addr(), "0.0.0.0:9095");
        assert_eq!(l[0].to_string(), "SSL://127.0.0.1:9093");
    }

    #[test]
    fn bad_lists_get_clear_messages() {
        assert_eq!(
            err("TLS://127.0.0.1:9093"),
            "invalid listeners: unknown security protocol 'TLS' in 'TLS://127.0.0.1:9093'; use one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"
        );
        assert_eq!(
            err("PLAINTEXT://127.0.0.1"),
            "invalid listeners: 'PLAINTEXT://127.0.0.1' has no port (write HOST:PORT; 0 picks a free port)"
        );
        assert_eq!(
            err("PLAINTEXT://127.0.0.1:90000"),
            "invalid listeners: 'PLAINTEXT://127.0.0.1:90000' has no valid port ('90000'; write HOST:PORT with a port from 0 to 65535)"
        );
        assert_eq!(
            err("SSL://127.0.0.1:9092,PLAINTEXT://127.0.0.1:9092"),
            "invalid listeners: port 9092 is used by both 'SSL://127.0.0.1:9092' and 'PLAINTEXT://127.0.0.1:9092'; give each listener its own port"
        );
        assert_eq!(
            err("SSL://a:1,SSL://b:2"),
            "invalid listeners: SSL is listed twice ('SSL://a:1' and 'SSL://b:2'); give each protocol one listener"
        );
        assert!(err("127.0.0.1:9092").contains("is not PROTOCOL://HOST:PORT"));
        assert!(err("PLAINTEXT://::1:9092").contains("IPv6 host in brackets"));
        assert!(err(" , ").contains("no listener given"));
        // Port 0 may repeat: each picks its own free port.
        assert!(parse_listeners("SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0", "listeners").is_ok());
        // Advertised addresses may share a port (different hosts behind a proxy).
        assert!(parse_listeners("SSL://a:9092,PLAINTEXT://b:9092", "advertised_listeners").is_ok());
    }
}
