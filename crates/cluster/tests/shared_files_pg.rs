//! `sluice.shared_files` against a real PostgreSQL: the compare-and-set that keeps two brokers
//! changing the same file at once from losing either change.

mod common;

use common::{PostgresServer, migrated};
use sluice_cluster::shared_files::{load, store, versions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_succeeds_only_on_the_version_it_read() {
    let pg = PostgresServer::start();
    let db = migrated(&pg).await;
    assert_eq!(load(&db, "security/acls.json").await.unwrap(), None);
    // The first store is version 1; a second "first" store loses.
    assert!(store(&db, "security/acls.json", 0, b"one").await.unwrap());
    assert!(!store(&db, "security/acls.json", 0, b"other").await.unwrap());
    assert_eq!(
        load(&db, "security/acls.json").await.unwrap(),
        Some((1, b"one".to_vec()))
    );
    // Two brokers that both read version 1: one wins, the other must reload and redo.
    assert!(store(&db, "security/acls.json", 1, b"two").await.unwrap());
    assert!(!store(&db, "security/acls.json", 1, b"stale").await.unwrap());
    assert!(store(&db, "security/users.json", 0, b"{}").await.unwrap());
    let mut all = versions(&db).await.unwrap();
    all.sort();
    assert_eq!(
        all,
        [
            ("security/acls.json".to_owned(), 2),
            ("security/users.json".to_owned(), 1)
        ]
    );
    assert_eq!(
        load(&db, "security/acls.json").await.unwrap(),
        Some((2, b"two".to_vec()))
    );
}
