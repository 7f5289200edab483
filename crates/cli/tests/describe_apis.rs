//! DescribeTopicPartitions (KIP-966) and DescribeLogDirs against a real `sluice serve`: topics
//! in name order, paging by `response_partition_limit` and the cursor, unknown topics answered
//! with their own error; the data directory with its partitions' sizes and the filesystem's
//! total and usable bytes.

mod common;

use common::{Server, kafka_call};
use sluice_protocol::kafka_protocol::messages::{
    ApiKey, DescribeLogDirsRequest, DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse, RequestKind, ResponseKind, TopicName,
    describe_log_dirs_request, describe_topic_partitions_request,
};
use sluice_protocol::kafka_protocol::protocol::StrBytes;

fn port(server: &Server) -> u16 {
    server
        .bootstrap()
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

fn name(n: &str) -> TopicName {
    TopicName(StrBytes::from_string(n.to_owned()))
}

fn describe(
    server: &Server,
    topics: &[&str],
    limit: i32,
    cursor: Option<(&str, i32)>,
) -> DescribeTopicPartitionsResponse {
    let req = DescribeTopicPartitionsRequest::default()
        .with_topics(
            topics
                .iter()
                .map(|t| {
                    describe_topic_partitions_request::TopicRequest::default().with_name(name(t))
                })
                .collect(),
        )
        .with_response_partition_limit(limit)
        .with_cursor(cursor.map(|(t, p)| {
            describe_topic_partitions_request::Cursor::default()
                .with_topic_name(name(t))
                .with_partition_index(p)
        }));
    match kafka_call(
        port(server),
        ApiKey::DescribeTopicPartitions,
        0,
        RequestKind::DescribeTopicPartitions(req),
    ) {
        ResponseKind::DescribeTopicPartitions(r) => r,
        other => panic!("unexpected {other:?}"),
    }
}

/// (topic, partition) pairs of an answer, in order.
fn listed(r: &DescribeTopicPartitionsResponse) -> Vec<(String, i32)> {
    r.topics
        .iter()
        .flat_map(|t| {
            let n = t.name.as_ref().unwrap().0.to_string();
            t.partitions
                .iter()
                .map(move |p| (n.clone(), p.partition_index))
        })
        .collect()
}

fn cursor(r: &DescribeTopicPartitionsResponse) -> Option<(String, i32)> {
    r.next_cursor
        .as_ref()
        .map(|c| (c.topic_name.0.to_string(), c.partition_index))
}

#[test]
fn describe_topic_partitions_pages_in_name_order() {
    let server = Server::start_fresh();
    server.ok(&["topic", "create", "b-topic", "--partitions", "3"], "");
    server.ok(&["topic", "create", "a-topic", "--partitions", "2"], "");
    server.ok(&["topic", "create", "c-topic", "--partitions", "1"], "");

    // All topics, in name order, each partition led by this broker.
    let all = describe(&server, &[], 2000, None);
    let want: Vec<(String, i32)> = [("a-topic", 0), ("a-topic", 1), ("b-topic", 0)]
        .iter()
        .chain(&[("b-topic", 1), ("b-topic", 2), ("c-topic", 0)])
        .map(|(t, p)| (t.to_string(), *p))
        .collect();
    assert_eq!(listed(&all), want);
    assert_eq!(cursor(&all), None);
    for t in &all.topics {
        assert_eq!(t.error_code, 0);
        assert!(!t.topic_id.is_nil());
        for p in &t.partitions {
            assert_eq!(p.replica_nodes, [p.leader_id]);
            assert_eq!(p.isr_nodes, [p.leader_id]);
        }
    }

    // Pages of 4: the cursor names the first partition not listed, and the next page starts
    // there.
    let first = describe(&server, &[], 4, None);
    assert_eq!(listed(&first), want[..4]);
    assert_eq!(cursor(&first), Some(("b-topic".to_owned(), 2)));
    let second = describe(&server, &[], 4, Some(("b-topic", 2)));
    assert_eq!(listed(&second), want[4..]);
    assert_eq!(cursor(&second), None);
    // A page that ends exactly at a topic's end points at the next topic.
    let page = describe(&server, &[], 2, None);
    assert_eq!(listed(&page), want[..2]);
    assert_eq!(cursor(&page), Some(("b-topic".to_owned(), 0)));

    // Named topics: only those, an unknown one answered with its own error.
    let named = describe(&server, &["c-topic", "missing", "a-topic"], 2000, None);
    let summary: Vec<(String, i16, usize)> = named
        .topics
        .iter()
        .map(|t| {
            (
                t.name.as_ref().unwrap().0.to_string(),
                t.error_code,
                t.partitions.len(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("a-topic".to_owned(), 0, 2),
            ("c-topic".to_owned(), 0, 1),
            ("missing".to_owned(), 3, 0)
        ]
    );
}

#[test]
fn describe_log_dirs_reports_the_data_directory_and_partition_sizes() {
    let server = Server::start_fresh();
    server.ok(&["topic", "create", "sized", "--partitions", "2"], "");
    server.ok(&["produce", "sized", "--partition", "1"], "hello\nworld\n");
    let call = |topics| {
        let req = DescribeLogDirsRequest::default().with_topics(topics);
        match kafka_call(
            port(&server),
            ApiKey::DescribeLogDirs,
            4,
            RequestKind::DescribeLogDirs(req),
        ) {
            ResponseKind::DescribeLogDirs(r) => r,
            other => panic!("unexpected {other:?}"),
        }
    };
    let all = call(None);
    assert_eq!(all.error_code, 0);
    assert_eq!(all.results.len(), 1);
    let dir = &all.results[0];
    assert_eq!(dir.error_code, 0);
    assert!(dir.total_bytes > 0 && dir.usable_bytes > 0, "{dir:?}");
    assert!(dir.usable_bytes <= dir.total_bytes, "{dir:?}");
    let topic = dir
        .topics
        .iter()
        .find(|t| t.name.0.as_str() == "sized")
        .unwrap();
    let sizes: Vec<(i32, i64)> = topic
        .partitions
        .iter()
        .map(|p| (p.partition_index, p.partition_size))
        .collect();
    assert_eq!(sizes.len(), 2);
    assert_eq!(sizes[0], (0, 0));
    assert!(sizes[1].1 > 0, "{sizes:?}");

    // Named partitions only; unknown ones are left out.
    let some = call(Some(vec![
        describe_log_dirs_request::DescribableLogDirTopic::default()
            .with_topic(name("sized"))
            .with_partitions(vec![1, 9]),
        describe_log_dirs_request::DescribableLogDirTopic::default()
            .with_topic(name("missing"))
            .with_partitions(vec![0]),
    ]));
    let topics = &some.results[0].topics;
    assert_eq!(topics.len(), 1);
    assert_eq!(topics[0].partitions.len(), 1);
    assert_eq!(topics[0].partitions[0].partition_index, 1);
}
