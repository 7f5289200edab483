//! Small files every broker must see alike, kept in `sluice.shared_files` (migration 6): the
//! SASL users and the ACLs. A broker keeps a copy in its data directory, polls
//! [`versions`] to learn of other brokers' changes, and writes its own with [`store`], a
//! compare-and-set on the version: a broker that changed a stale copy is told so and redoes its
//! change on the current one.

use crate::db::{Db, DbError};

/// The file `name` as stored: `(version, contents)`; `None` before anything stored it.
pub async fn load(db: &Db, name: &str) -> Result<Option<(i64, Vec<u8>)>, DbError> {
    let client = db.client().await?;
    let row = client
        .query_opt(
            "SELECT version, contents FROM shared_files WHERE name = $1",
            &[&name],
        )
        .await?;
    Ok(row.map(|r| (r.get(0), r.get(1))))
}

/// Stores `contents` as version `expected + 1` of `name` if its version is still `expected`
/// (0: nothing stored yet). `Ok(false)`: another broker stored another version first; load it,
/// redo the change on it, and try again.
pub async fn store(db: &Db, name: &str, expected: i64, contents: &[u8]) -> Result<bool, DbError> {
    let client = db.client().await?;
    let next = expected + 1;
    let changed = if expected == 0 {
        client
            .execute(
                "INSERT INTO shared_files (name, contents, version) VALUES ($1, $2, 1) \
                 ON CONFLICT (name) DO NOTHING",
                &[&name, &contents],
            )
            .await?
    } else {
        client
            .execute(
                "UPDATE shared_files SET contents = $3, version = $4, updated_at = now() \
                 WHERE name = $1 AND version = $2",
                &[&name, &expected, &contents, &next],
            )
            .await?
    };
    Ok(changed == 1)
}

/// The version of every stored file, for a poll that loads only what changed.
pub async fn versions(db: &Db) -> Result<Vec<(String, i64)>, DbError> {
    let client = db.client().await?;
    let rows = client
        .query("SELECT name, version FROM shared_files", &[])
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}
