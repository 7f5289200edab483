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
