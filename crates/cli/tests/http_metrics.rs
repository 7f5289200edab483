//! Black-box test of `/metrics` on a real `sluice serve`: Kafka requests made by the CLI show
//! up in the Prometheus text, by API, with bytes and records.

mod common;

use common::{Server, sample};

#[test]
fn kafka_requests_show_up_in_metrics() {
    let server = Server::start_fresh();
    server.ok(&["topic", "create", "clicks", "--partitions", "2"], "");
    server.ok(&["produce", "clicks", "--partition", "1"], "a\nb\nc\n");
    let consumed = server.ok(&["consume", "clicks", "--partition", "1"], "");
    assert_eq!(consumed.stdout.lines().count(), 3, "{}", consumed.stdout);

    let text = reqwest::blocking::get(format!("{}/metrics", server.http_url()))
        .unwrap()
        .text()
        .unwrap();
    assert!(sample(&text, r#"sluice_kafka_requests_total{api="CreateTopics"}"#) >= 1.0);
    assert!(sample(&text, r#"sluice_kafka_requests_total{api="Produce"}"#) >= 1.0);
    assert!(sample(&text, r#"sluice_kafka_requests_total{api="Fetch"}"#) >= 1.0);
    assert!(
        sample(
            &text,
            r#"sluice_kafka_request_duration_seconds_count{api="Produce"}"#
        ) >= 1.0
    );
    assert!(sample(&text, r#"sluice_bytes_in_total{listener="kafka"}"#) > 0.0);
    assert!(sample(&text, r#"sluice_bytes_out_total{listener="kafka"}"#) > 0.0);
    assert_eq!(sample(&text, "sluice_records_in_total"), 3.0);
    assert!(sample(&text, "sluice_records_out_total") >= 3.0);
    assert_eq!(
        sample(
            &text,
            r#"sluice_partition_high_watermark{topic="clicks",partition="1"}"#
        ),
        3.0
    );
    assert!(sample(&text, "sluice_fsyncs_total") >= 1.0);
    let (exit, _) = server.stop();
    assert!(exit.success());
}
