//! Migrations against a real PostgreSQL: applied once, safe when brokers start together, and
//! a database of another schema refused with one line.

mod common;

use common::{PostgresServer, connect, migrated};
use sluice_cluster::migrate::{self, MigrateError, Migration};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brokers_starting_together_apply_each_migration_once() {
    let pg = PostgresServer::start();
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let url = pg.url();
        tasks.push(tokio::spawn(async move {
            let db = connect(&url).await;
            migrate::migrate(&db).await.map_err(|e| e.to_string())
        }));
    }
    let mut first = 0;
    for t in tasks {
        let done = t.await.unwrap().expect("every concurrent migrate succeeds");
        assert_eq!(done.to, migrate::latest_version());
        if done.from == 0 {
            first += 1;
        }
    }
    assert_eq!(first, 1, "exactly one broker applied the migrations");
    let rows = pg.psql("sluice", "SELECT count(*) FROM sluice.schema_migrations");
    assert_eq!(rows.trim(), migrate::latest_version().to_string());
    // Again: nothing to do.
    let db = migrated(&pg).await;
    let again = migrate::migrate(&db).await.unwrap();
    assert_eq!(again.from, again.to);
}

#[tokio::test]
async fn a_newer_or_different_schema_is_refused_with_one_line() {
    let pg = PostgresServer::start();
    let db = migrated(&pg).await;
    pg.psql(
        "sluice",
        "INSERT INTO sluice.schema_migrations (version, name, checksum) VALUES (999, 'future', 0)",
    );
    let e = migrate::migrate(&db).await.unwrap_err();
    assert!(matches!(e, MigrateError::Newer { found: 999, .. }), "{e}");
    let line = e.to_string();
    assert!(
        line.contains("schema version 999") && line.contains("upgrade"),
        "{line}"
    );
    assert!(!line.contains(pg.password()), "{line}");

    pg.create_database("other");
    let db = connect(&pg.url_for("other")).await;
    let changed = [Migration {
        version: 1,
        name: "registry",
        sql: "CREATE TABLE something_else (x int);",
    }];
    migrate::migrate_to(&db, &changed).await.unwrap();
    let e = migrate::migrate(&db).await.unwrap_err();
    assert!(matches!(e, MigrateError::Differs { version: 1, .. }), "{e}");
}
