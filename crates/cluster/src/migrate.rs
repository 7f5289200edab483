//! Versioned schema migrations, safe when several brokers start at once.
//!
//! [`MIGRATIONS`] lists every schema change in order; each is one SQL file in
//! `crates/cluster/migrations/`. [`migrate`] applies the missing ones in one transaction that
//! first takes a transaction-scoped advisory lock ([`LOCK_KEY`]): brokers starting together
//! queue on it, the first applies the changes, the others then find nothing to do. Each applied
//! migration is recorded in `sluice.schema_migrations` with a hash of its text.
//!
//! A database whose schema is newer than this broker knows (a newer broker migrated it), or
//! whose applied migration differs from this broker's, is refused with one line: starting on
//! it could misread every table.

use crate::db::{DbError, SCHEMA};

/// One schema change.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    pub version: i32,
    pub name: &'static str,
    pub sql: &'static str,
}

/// Every migration, oldest first; versions are 1, 2, 3, ... with no gaps.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "registry",
        sql: include_str!("../migrations/0001_registry.sql"),
    },
    Migration {
        version: 2,
        name: "catalog",
        sql: include_str!("../migrations/0002_catalog.sql"),
    },
    Migration {
        version: 3,
        name: "index",
        sql: include_str!("../migrations/0003_index.sql"),
    },
    Migration {
        version: 4,
        name: "groups",
        sql: include_str!("../migrations/0004_groups.sql"),
    },
    Migration {
        version: 5,
        name: "retention",
        sql: include_str!("../migrations/0005_retention.sql"),
    },
    Migration {
        version: 6,
        name: "shared_files",
        sql: include_str!("../migrations/0006_shared_files.sql"),
    },
];

/// The advisory lock migrations hold ("sluice" in ASCII).
pub const LOCK_KEY: i64 = 0x736c_7569_6365;

/// The schema version this broker writes and reads.
pub fn latest_version() -> i32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// What [`migrate`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migrated {
    /// The schema version before.
    pub from: i32,
    /// The schema version now ([`latest_version`]).
    pub to: i32,
}

/// Why the schema could not be brought up to date; one line each.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error(
        "metadata database {url} has schema version {found}, newer than this broker's {known}: \
         a newer Sluice manages it; upgrade this broker"
    )]
    Newer { url: String, found: i32, known: i32 },
    #[error(
        "metadata database {url}: applied migration {version} ({name}) differs from this \
         broker's; this database was set up by an incompatible Sluice build"
    )]
    Differs {
        url: String,
        version: i32,
        name: String,
    },
    #[error("metadata database {url}: migration {version} ({name}) failed: {source}")]
    Failed {
        url: String,
        version: i32,
        name: &'static str,
        #[source]
        source: tokio_postgres::Error,
    },
    #[error(transparent)]
    Db(#[from] DbError),
}

/// A stable hash of a migration's text (FNV-1a, 64 bits), stored with it.
pub fn checksum(sql: &str) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in sql.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h as i64
}

/// Brings the schema of `db` to [`latest_version`], or refuses it.
pub async fn migrate(db: &crate::Db) -> Result<Migrated, MigrateError> {
    migrate_to(db, MIGRATIONS).await
}

/// [`migrate`] with another list (tests).
pub async fn migrate_to(
    db: &crate::Db,
    migrations: &[Migration],
) -> Result<Migrated, MigrateError> {
    let url = db.url().to_string();
    let mut client = db.client().await?;
    let tx = client.transaction().await.map_err(DbError::from)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK_KEY])
        .await
        .map_err(DbError::from)?;
    tx.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS {SCHEMA};
         CREATE TABLE IF NOT EXISTS {SCHEMA}.schema_migrations (
             version integer PRIMARY KEY,
             name text NOT NULL,
             checksum bigint NOT NULL,
             applied_at timestamptz NOT NULL DEFAULT now()
         );"
    ))
    .await
    .map_err(DbError::from)?;
    let applied = tx
        .query(
            &format!(
                "SELECT version, name, checksum FROM {SCHEMA}.schema_migrations ORDER BY version"
            ),
            &[],
        )
        .await
        .map_err(DbError::from)?;
    let known = migrations.last().map_or(0, |m| m.version);
    let mut from = 0;
    for row in &applied {
        let version: i32 = row.get(0);
        let name: String = row.get(1);
        let sum: i64 = row.get(2);
        from = from.max(version);
        if version > known {
            return Err(MigrateError::Newer {
                url,
                found: version,
                known,
            });
        }
        let ours = migrations.iter().find(|m| m.version == version);
        if ours.is_none_or(|m| checksum(m.sql) != sum || m.name != name) {
            return Err(MigrateError::Differs { url, version, name });
        }
    }
    for m in migrations.iter().filter(|m| m.version > from) {
        tx.batch_execute(m.sql)
            .await
            .map_err(|source| MigrateError::Failed {
                url: url.clone(),
                version: m.version,
                name: m.name,
                source,
            })?;
        tx.execute(
            &format!("INSERT INTO {SCHEMA}.schema_migrations (version, name, checksum) VALUES ($1, $2, $3)"),
            &[&m.version, &m.name, &checksum(m.sql)],
        )
        .await
        .map_err(DbError::from)?;
    }
    tx.commit().await.map_err(DbError::from)?;
    Ok(Migrated { from, to: known })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_consecutive_from_one() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version, i as i32 + 1, "{}", m.name);
        }
    }
}
