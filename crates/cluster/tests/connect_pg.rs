//! `Db::connect` against a real PostgreSQL (and a closed loopback port): every wrong
//! `--metadata` fails at once with one line that says what to fix and never shows the password.

mod common;

use std::net::TcpListener;
use std::time::{Duration, Instant};

use common::PostgresServer;
use sluice_cluster::{Db, DbError, DbSettings, MetadataUrl};

/// A refused or failed connect on loopback answers in milliseconds; this bound is far below
/// the 5 s connect timeout, so a test passing here shows the error did not come from waiting
/// it out, yet leaves room for a busy 2-core machine.
const FAST: Duration = Duration::from_secs(2);

/// Connects to `url` and returns the error's line and how long it took.
async fn refused(url: &str) -> (DbError, String, Duration) {
    let parsed = MetadataUrl::parse(url).expect("a well-formed URL");
    let started = Instant::now();
    let e = Db::connect(&parsed, DbSettings::default())
        .await
        .expect_err("connect must fail");
    let took = started.elapsed();
    let line = e.to_string();
    (e, line, took)
}

fn assert_one_line_without(line: &str, secrets: &[&str]) {
    assert!(!line.contains('\n'), "more than one line: {line:?}");
    for s in secrets {
        assert!(!line.contains(s), "shows a password: {line}");
    }
}

#[tokio::test]
async fn a_wrong_password_user_or_database_is_named_at_once() {
    let pg = PostgresServer::start();
    let port = pg.port();

    let wrong = "not-the-password-4711";
    let (e, line, took) = refused(&format!(
        "postgres://sluice:{wrong}@127.0.0.1:{port}/sluice"
    ))
    .await;
    eprintln!("wrong password ({took:?}): {line}");
    assert!(matches!(e, DbError::Auth { .. }), "{e:?}");
    assert!(
        line.contains("user `sluice`") && line.contains("password in --metadata"),
        "{line}"
    );
    assert!(line.contains(&format!("127.0.0.1:{port}")), "{line}");
    assert_one_line_without(&line, &[wrong, pg.password()]);
    assert!(took < FAST, "took {took:?}");

    let (e, line, took) = refused(&format!(
        "postgres://nobody:{}@127.0.0.1:{port}/sluice",
        pg.password()
    ))
    .await;
    eprintln!("unknown user ({took:?}): {line}");
    assert!(matches!(e, DbError::Auth { .. }), "{e:?}");
    assert!(line.contains("user `nobody`"), "{line}");
    assert_one_line_without(&line, &[pg.password()]);
    assert!(took < FAST, "took {took:?}");

    // No password at all, while the server asks for one (PGPASSWORD is not set in tests).
    if std::env::var_os("PGPASSWORD").is_none() {
        let (e, line, took) = refused(&format!("postgres://sluice@127.0.0.1:{port}/sluice")).await;
        eprintln!("no password ({took:?}): {line}");
        assert!(matches!(e, DbError::Auth { .. }), "{e:?}");
        assert!(line.contains("has none"), "{line}");
        assert_one_line_without(&line, &[pg.password()]);
        assert!(took < FAST, "took {took:?}");
    }

    let (e, line, took) = refused(&pg.url_for("no_such_db")).await;
    eprintln!("no database ({took:?}): {line}");
    assert!(matches!(e, DbError::NoDatabase { .. }), "{e:?}");
    assert!(line.contains("CREATE DATABASE no_such_db"), "{line}");
    assert_one_line_without(&line, &[pg.password()]);
    assert!(took < FAST, "took {took:?}");

    // And the right URL works.
    let db = common::connect(&pg.url()).await;
    let client = db.client().await.unwrap();
    let row = client.query_one("SELECT current_user", &[]).await.unwrap();
    assert_eq!(row.get::<_, String>(0), "sluice");

    // A failed statement names PostgreSQL's message and SQLSTATE, not just "db error".
    let e = client
        .query("SELECT * FROM no_such_table", &[])
        .await
        .expect_err("no such table");
    let line = DbError::from(e).to_string();
    assert!(
        line.contains("relation \"no_such_table\" does not exist (SQLSTATE 42P01)"),
        "{line}"
    );
}

#[tokio::test]
async fn a_closed_port_is_named_at_once() {
    // A loopback port nobody listens on: bound, then released.
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let password = "secret-never-shown-0815";
    let (e, line, took) = refused(&format!(
        "postgres://sluice:{password}@127.0.0.1:{port}/sluice"
    ))
    .await;
    eprintln!("closed port ({took:?}): {line}");
    assert!(matches!(e, DbError::Unreachable { .. }), "{e:?}");
    assert!(line.contains(&format!("127.0.0.1:{port}")), "{line}");
    assert!(line.contains("refused"), "{line}");
    assert!(line.contains("host and port in --metadata"), "{line}");
    assert_one_line_without(&line, &[password]);
    assert!(took < FAST, "took {took:?}");
}
