//! `--metadata postgres://USER:PASSWORD@HOST:PORT/DATABASE`: parsing, and a form safe to log.

use std::fmt;

/// A parsed `--metadata` URL. Its [`Display`](fmt::Display) never shows the password:
/// `postgres://HOST:PORT/DATABASE`.
#[derive(Clone)]
pub struct MetadataUrl {
    config: tokio_postgres::Config,
    host: String,
    port: u16,
    database: String,
}

/// Why a `--metadata` value was refused; one line that says what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid --metadata {shown}: {why} (expected postgres://USER:PASSWORD@HOST:PORT/DATABASE)")]
pub struct UrlError {
    /// The value with any password replaced by `***`.
    pub shown: String,
    pub why: String,
}

impl MetadataUrl {
    /// Parses `postgres://` or `postgresql://` URLs with a host, an optional port (5432), a
    /// user and a database. The password may also come from `PGPASSWORD`.
    pub fn parse(value: &str) -> Result<MetadataUrl, UrlError> {
        let shown = redact(value);
        let fail = |why: &str| UrlError {
            shown: shown.clone(),
            why: why.to_string(),
        };
        let value = value.trim();
        if !(value.starts_with("postgres://") || value.starts_with("postgresql://")) {
            return Err(fail("the scheme must be postgres://"));
        }
        let mut config: tokio_postgres::Config = value
            .parse()
            .map_err(|e: tokio_postgres::Error| fail(&e.to_string()))?;
        let host = match config.get_hosts() {
            [tokio_postgres::config::Host::Tcp(h)] if !h.is_empty() => h.clone(),
            [] => return Err(fail("it names no host")),
            [_] => return Err(fail("the host must be a TCP host name or address")),
            _ => return Err(fail("name exactly one host")),
        };
        let port = match config.get_ports() {
            [] => 5432,
            [p] => *p,
            _ => return Err(fail("name at most one port")),
        };
        if config.get_user().is_none_or(str::is_empty) {
            return Err(fail("it names no user"));
        }
        let database = match config.get_dbname() {
            Some(db) if !db.is_empty() => db.to_string(),
            _ => return Err(fail("it names no database (add /DATABASE)")),
        };
        if config.get_password().is_none()
            && let Some(pw) = std::env::var_os("PGPASSWORD").filter(|p| !p.is_empty())
        {
            config.password(pw.to_string_lossy().as_bytes());
        }
        Ok(MetadataUrl {
            config,
            host,
            port,
            database,
        })
    }

    /// The connection settings (password included).
    pub fn config(&self) -> &tokio_postgres::Config {
        &self.config
    }

    pub fn host(&self) -> &str {
        &self.host
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn database(&self) -> &str {
        &self.database
    }

    pub fn user(&self) -> &str {
        self.config.get_user().unwrap_or_default()
    }
}

impl fmt::Display for MetadataUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "postgres://{}:{}/{}",
            self.host, self.port, self.database
        )
    }
}

impl fmt::Debug for MetadataUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MetadataUrl({self})")
    }
}

/// `value` with the password of a `scheme://user:password@...` URL replaced by `***`.
pub fn redact(value: &str) -> String {
    let Some(scheme_end) = value.find("://") else {
        return value.to_string();
    };
    let rest = &value[scheme_end + 3..];
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let Some(at) = authority.rfind('@') else {
        return value.to_string();
    };
    let userinfo = &authority[..at];
    match userinfo.find(':') {
        Some(colon) => format!(
            "{}{}:***{}",
            &value[..scheme_end + 3],
            &userinfo[..colon],
            &value[scheme_end + 3 + at..]
        ),
        None => value.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_never_shows_the_password() {
        let url = MetadataUrl::parse("postgres://app:s3cret@db.example:6543/events").unwrap();
        assert_eq!(url.to_string(), "postgres://db.example:6543/events");
        assert_eq!(
            format!("{url:?}"),
            "MetadataUrl(postgres://db.example:6543/events)"
        );
        assert_eq!(url.user(), "app");
        assert_eq!(url.port(), 6543);
        let url = MetadataUrl::parse("postgresql://app@127.0.0.1/events").unwrap();
        assert_eq!(url.to_string(), "postgres://127.0.0.1:5432/events");
    }

    #[test]
    fn refuses_what_it_cannot_use_without_showing_the_password() {
        for (value, why) in [
            ("mysql://a:b@h/db", "scheme"),
            ("postgres://a:pw@h:1/", "no database"),
            ("postgres://a:pw@h:notaport/db", "invalid"),
            ("postgres://:pw@h/db", "no user"),
            ("postgres://a:pw@h1,h2/db", "one host"),
        ] {
            let e = MetadataUrl::parse(value).unwrap_err();
            let line = e.to_string();
            assert!(line.contains(why), "{value}: {line}");
            assert!(!line.contains("pw@"), "{line}");
        }
    }

    #[test]
    fn redacts_only_the_password() {
        assert_eq!(redact("postgres://u:p@h:1/d"), "postgres://u:***@h:1/d");
        assert_eq!(redact("postgres://u@h/d"), "postgres://u@h/d");
        assert_eq!(
            redact("postgres://u:p:q@h/d?x=@"),
            "postgres://u:***@h/d?x=@"
        );
        assert_eq!(redact("not a url"), "not a url");
    }
}
