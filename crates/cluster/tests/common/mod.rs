//! Shared by the PostgreSQL tests: a real server and a migrated connection pool.

#![allow(dead_code)]

use sluice_cluster::{Db, DbSettings, MetadataUrl};
pub use sluice_testkit::PostgresServer;

/// A pool on `url` with the default settings.
pub async fn connect(url: &str) -> Db {
    let url = MetadataUrl::parse(url).expect("test URL");
    Db::connect(&url, DbSettings::default())
        .await
        .expect("connect to the test PostgreSQL")
}

/// A pool on the server's database, migrated to the latest schema.
pub async fn migrated(pg: &PostgresServer) -> Db {
    let db = connect(&pg.url()).await;
    sluice_cluster::migrate::migrate(&db)
        .await
        .expect("migrate the test database");
    db
}

/// Runs `statements` (one or several, no parameters); panics with the SQL on failure.
pub async fn sql(db: &Db, statements: &str) {
    db.client()
        .await
        .unwrap()
        .batch_execute(statements)
        .await
        .unwrap_or_else(|e| panic!("{statements}: {e}"));
}

/// The first column of the one row `query` returns, as a number.
pub async fn count(db: &Db, query: &str) -> i64 {
    db.client()
        .await
        .unwrap()
        .query_one(query, &[])
        .await
        .unwrap_or_else(|e| panic!("{query}: {e}"))
        .get(0)
}
