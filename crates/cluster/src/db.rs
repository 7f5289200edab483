//! [`Db`]: the broker's pool of connections to the metadata database, with bounded connect
//! and statement times, and errors that say what to fix.
//!
//! Every connection sets `search_path` to the schema [`SCHEMA`], so Sluice's tables never mix
//! with other software's in a shared database, and `statement_timeout`, so a statement stuck
//! behind a lock fails instead of holding a produce forever.

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::NoTls;
use tokio_postgres::error::SqlState;

use crate::url::MetadataUrl;

/// The PostgreSQL schema every Sluice table lives in.
pub const SCHEMA: &str = "sluice";

/// Connection bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DbSettings {
    /// One TCP connect plus authentication. 5 s covers a lost SYN and a slow SCRAM exchange
    /// and still fails a black-holed host fast at start.
    pub connect_timeout: Duration,
    /// Longest one statement may run (PostgreSQL's `statement_timeout`). Commits take
    /// milliseconds; 10 s is far past any healthy one and well inside a client's request
    /// timeout (30 s by default), so a stuck one fails with a retriable error instead.
    pub statement_timeout: Duration,
    /// Longest a caller waits for a free connection of the pool.
    pub checkout_timeout: Duration,
    /// Connections kept open at most. Commits, index reads, the registry heartbeat and group
    /// writes share them; 16 per broker keeps 100 brokers within a PostgreSQL that allows
    /// 2,000 connections (or one pooler in front).
    pub pool_size: usize,
}

impl Default for DbSettings {
    fn default() -> Self {
        DbSettings {
            connect_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(10),
            checkout_timeout: Duration::from_secs(10),
            pool_size: 16,
        }
    }
}

/// Why the metadata database could not be used; one line each, printed as is.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// `detail` says what happened (refused, no answer within `timeout`, ...).
    #[error(
        "cannot reach PostgreSQL at {url}: {detail}; check the host and port in --metadata and \
         that the server runs"
    )]
    Unreachable {
        url: String,
        timeout: Duration,
        detail: String,
    },
    #[error(
        "PostgreSQL at {url} refused user `{user}`: {detail}; check the user and password in \
         --metadata"
    )]
    Auth {
        url: String,
        user: String,
        detail: String,
    },
    #[error(
        "database `{database}` does not exist at {url}: create it (CREATE DATABASE {database}) or name another in --metadata"
    )]
    NoDatabase { url: String, database: String },
    #[error("metadata database {url}: {detail}")]
    Other { url: String, detail: String },
    /// A statement failed on a working connection (lost connection, timeout, conflict);
    /// callers treat it as retriable unless they know better.
    #[error("metadata database: {}", describe_query_error(.0))]
    Query(#[from] tokio_postgres::Error),
    #[error("metadata database: no connection within {0:?} (all in use or PostgreSQL unreachable)")]
    Checkout(Duration),
}

impl DbError {
    /// The SQLSTATE of a failed statement, if PostgreSQL sent one.
    pub fn sql_state(&self) -> Option<&SqlState> {
        match self {
            DbError::Query(e) => e.code(),
            _ => None,
        }
    }
}

/// A pool of connections to the metadata database. Cheap to clone.
#[derive(Clone)]
pub struct Db {
    pool: Pool,
    url: MetadataUrl,
    settings: DbSettings,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db")
            .field("url", &self.url)
            .field("settings", &self.settings)
            .finish()
    }
}

/// A connection checked out of the pool; back into it on drop.
pub type Client = deadpool_postgres::Object;

impl Db {
    /// Opens the pool and one connection, so a wrong host, user, password or database is
    /// found now, with a clear line, and not at the first produce.
    pub async fn connect(url: &MetadataUrl, settings: DbSettings) -> Result<Db, DbError> {
        let db = Db::build(url, settings)?;
        let first = tokio::time::timeout(settings.connect_timeout, db.pool.get()).await;
        match first {
            Ok(Ok(_client)) => Ok(db),
            Ok(Err(e)) => Err(db.classify(e)),
            Err(_) => Err(DbError::Unreachable {
                url: url.to_string(),
                timeout: settings.connect_timeout,
                detail: format!("no answer within {:?}", settings.connect_timeout),
            }),
        }
    }

    /// Another pool of at most `pool_size` connections to the same database, with the same
    /// bounds, opened lazily (no connection until first use). For work that must never wait
    /// behind the main pool's traffic: the registry heartbeat keeps its own connection, so a
    /// broker busy with commits cannot starve its own lease.
    pub fn separate_pool(&self, pool_size: usize) -> Result<Db, DbError> {
        Db::build(
            &self.url,
            DbSettings {
                pool_size,
                ..self.settings
            },
        )
    }

    fn build(url: &MetadataUrl, settings: DbSettings) -> Result<Db, DbError> {
        let mut config = url.config().clone();
        config.connect_timeout(settings.connect_timeout);
        config.application_name("sluice");
        config.options(format!(
            "-c search_path={SCHEMA} -c statement_timeout={} -c client_min_messages=warning",
            settings.statement_timeout.as_millis()
        ));
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(settings.pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(settings.checkout_timeout))
            .create_timeout(Some(settings.connect_timeout))
            .build()
            .map_err(|e| DbError::Other {
                url: url.to_string(),
                detail: e.to_string(),
            })?;
        Ok(Db {
            pool,
            url: url.clone(),
            settings,
        })
    }

    /// A connection from the pool (a new one if none is idle and the pool is not full).
    pub async fn client(&self) -> Result<Client, DbError> {
        self.pool.get().await.map_err(|e| self.classify(e))
    }

    /// The database's URL (safe to log).
    pub fn url(&self) -> &MetadataUrl {
        &self.url
    }

    pub fn settings(&self) -> DbSettings {
        self.settings
    }

    fn classify(&self, e: deadpool_postgres::PoolError) -> DbError {
        use deadpool_postgres::PoolError;
        let url = self.url.to_string();
        match e {
            PoolError::Backend(e) => classify_connect(&self.url, self.settings, e),
            PoolError::Timeout(_) => DbError::Checkout(self.settings.checkout_timeout),
            other => DbError::Other {
                url,
                detail: other.to_string(),
            },
        }
    }
}

/// A failed statement in one line. tokio-postgres shows a server's error as just "db error"
/// and keeps the message in its source; this names PostgreSQL's message and SQLSTATE.
fn describe_query_error(e: &tokio_postgres::Error) -> String {
    if let Some(db_error) = e.as_db_error() {
        return format!(
            "{} (SQLSTATE {})",
            db_error.message(),
            db_error.code().code()
        );
    }
    let mut line = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        line = format!("{line}: {s}");
        source = s.source();
    }
    line
}

/// Turns a failed connect into the line an operator needs.
fn classify_connect(url: &MetadataUrl, settings: DbSettings, e: tokio_postgres::Error) -> DbError {
    let shown = url.to_string();
    if let Some(db_error) = e.as_db_error() {
        let code = db_error.code();
        if *code == SqlState::INVALID_PASSWORD
            || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
        {
            return DbError::Auth {
                url: shown,
                user: url.user().to_string(),
                detail: db_error.message().to_string(),
            };
        }
        if *code == SqlState::INVALID_CATALOG_NAME {
            return DbError::NoDatabase {
                url: shown,
                database: url.database().to_string(),
            };
        }
        return DbError::Other {
            url: shown,
            detail: format!("{} ({})", db_error.message(), code.code()),
        };
    }
    // No answer from the server itself: connect refused, timed out, or the connection broke.
    let mut detail = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        detail = format!("{detail}: {s}");
        source = s.source();
    }
    if detail.contains("password missing") {
        return DbError::Auth {
            url: shown,
            user: url.user().to_string(),
            detail: "the server asks for a password and --metadata has none (nor PGPASSWORD)"
                .into(),
        };
    }
    if e.to_string().starts_with("timeout") || detail.contains("timed out") {
        detail = format!("no answer within {:?} ({detail})", settings.connect_timeout);
    }
    DbError::Unreachable {
        url: shown,
        timeout: settings.connect_timeout,
        detail,
    }
}
