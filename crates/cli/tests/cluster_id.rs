//! The cluster id of a local-mode broker: made on the first start, kept in the data
//! directory (`cluster-id`), the same after a restart, different for another data directory,
//! and a damaged file stops the start with one line instead of becoming a new id.

mod common;

use common::{Server, cluster_id, finish};

#[test]
fn a_data_directory_keeps_its_cluster_id_across_restarts() {
    let server = Server::start_fresh();
    let id = cluster_id(server.port);
    sluice_broker::config::check_cluster_id(&id).unwrap();
    assert_ne!(id, "sluice");
    assert_eq!(server.log_lines_with("new cluster id").len(), 1);
    assert_eq!(
        server
            .log_lines_with(&format!("cluster_id={id}"))
            .iter()
            .filter(|l| l.contains("opened data directory"))
            .count(),
        1,
        "the start log names the cluster id"
    );
    let (status, dir) = server.stop();
    assert!(status.success(), "{status}");
    let stored = std::fs::read_to_string(dir.path().join("cluster-id")).unwrap();
    assert_eq!(stored, format!("{id}\n"));

    let server = Server::start(dir);
    assert_eq!(
        cluster_id(server.port),
        id,
        "the id changed across a restart"
    );
    assert!(server.log_lines_with("new cluster id").is_empty());

    let other = Server::start_fresh();
    assert_ne!(cluster_id(other.port), id, "two data directories, one id");
    drop(other);
    let (_, dir) = server.stop();

    // A damaged id file: one clear line, and the file left as it was.
    std::fs::write(dir.path().join("cluster-id"), "garbage\n").unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "serve",
            "--kafka-addr",
            "127.0.0.1:0",
            "--http-addr",
            "off",
            "--data-dir",
        ])
        .arg(dir.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (status, _, stderr) = finish(&mut child, b"", common::START_FAILURE_TIMEOUT);
    assert!(!status.success(), "serve started: {stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "one error line expected:\n{stderr}");
    let line = errors[0];
    assert!(
        line.contains("cluster-id") && line.contains("not a cluster id"),
        "{line}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("cluster-id")).unwrap(),
        "garbage\n"
    );
}
