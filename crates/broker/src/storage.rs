//! Partition storage: the trait and its types live in `sluice-storage` (so that every backend
//! can implement it without depending on the broker); the broker re-exports them here. The
//! read every listener uses, [`crate::Broker::read`], is the broker's.

pub use sluice_storage::*;

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use sluice_log::batch::BatchView;
    use sluice_log::batch::build::{Record, batch};

    use super::*;
    use crate::{Broker, BrokerConfig};
    use tokio::time::Instant;

    /// A broker in `dir` with one single-partition topic, and that partition.
    fn partition(dir: &std::path::Path) -> (Arc<Broker>, Arc<dyn PartitionStorage>) {
        let broker = Arc::new(Broker::open(BrokerConfig::new(dir)).unwrap());
        let topic = broker.create_topic("t", 1, Default::default()).unwrap();
        (broker, topic.partition(0).unwrap())
    }

    fn one_batch(value: &[u8]) -> Vec<u8> {
        let record = Record {
            timestamp_delta: 0,
            key: None,
            value: Some(value),
        };
        batch(1_700_000_000_000, &[record])
    }

    /// The last offset of every batch in `records`.
    fn last_offsets(records: &[u8]) -> Vec<i64> {
        let mut rest = records;
        let mut out = Vec::new();
        while !rest.is_empty() {
            let view = BatchView::parse(rest).unwrap();
            out.push(view.last_offset());
            rest = &rest[view.len()..];
        }
        out
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reads_whole_durable_batches_and_stop_at_the_high_watermark() {
        let dir = tempfile::tempdir().unwrap();
        let (_broker, p) = partition(dir.path());
        for v in [&b"a"[..], b"b", b"c"] {
            let d = p.append(&one_batch(v)).unwrap().durable().await.unwrap();
            assert_eq!(d.base_offset, d.last_offset);
        }
        assert_eq!(p.high_watermark(), 3);
        let all = p.read(0, 1 << 20).unwrap();
        assert_eq!(last_offsets(&all.records), vec![0, 1, 2]);
        // At least one whole batch, even over max_bytes.
        assert_eq!(last_offsets(&p.read(1, 1).unwrap().records), vec![1]);
        // Appended but not (yet) durable is never read, however the race with the sync goes.
        for _ in 0..20 {
            let appended = p.append(&one_batch(b"more")).unwrap();
            let read = p.read(0, 1 << 20).unwrap();
            assert!(read.high_watermark <= appended.last_offset + 1);
            let lasts = last_offsets(&read.records);
            assert!(lasts.iter().all(|&o| o < read.high_watermark), "{lasts:?}");
            appended.durable().await.unwrap();
        }
        assert!(matches!(
            p.read(1_000, 1),
            Err(StorageError::OffsetOutOfRange { .. })
        ));
        assert_eq!(p.offset_for(OffsetSpec::Latest).unwrap(), Some((23, -1)));
        assert_eq!(p.offset_for(OffsetSpec::Earliest).unwrap(), Some((0, -1)));
        let at = p
            .offset_for(OffsetSpec::Timestamp(1_700_000_000_000))
            .unwrap();
        assert_eq!(at.map(|(offset, _)| offset), Some(0));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wait_wakes_on_an_append_and_ends_at_its_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let (_broker, p) = partition(dir.path());
        // Nothing arrives: the deadline ends the wait.
        let started = Instant::now();
        wait_for_data([(&*p, 0)], started + Duration::from_millis(100)).await;
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(100) && waited < Duration::from_secs(5));

        // A record arrives: the wait ends long before its deadline.
        let writer = Arc::clone(&p);
        let append = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            writer.append(&one_batch(b"x")).unwrap().durable().await
        });
        let started = Instant::now();
        wait_for_data([(&*p, 0)], started + Duration::from_secs(30)).await;
        assert!(started.elapsed() < Duration::from_secs(10));
        assert_eq!(p.high_watermark(), 1);
        append.await.unwrap().unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_change_between_the_read_and_the_wait_is_not_missed() {
        let dir = tempfile::tempdir().unwrap();
        let (broker, p) = partition(dir.path());
        let seen = p.read(0, 1 << 20).unwrap().high_watermark;
        // The high watermark moves after the read, before the wait starts.
        p.append(&one_batch(b"x")).unwrap().durable().await.unwrap();
        let started = Instant::now();
        wait_for_data([(&*p, seen)], started + Duration::from_secs(30)).await;
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the wait missed it"
        );

        // The broker's read waits at the high watermark, and returns what arrives.
        let writer = Arc::clone(&p);
        let append = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            writer.append(&one_batch(b"y")).unwrap().durable().await
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        let read = broker.read(&*p, 1, 1 << 20, Some(deadline)).await.unwrap();
        assert_eq!(last_offsets(&read.records), vec![1]);
        append.await.unwrap().unwrap();

        // Nothing more arrives: an empty read at the deadline.
        let started = Instant::now();
        let deadline = started + Duration::from_millis(100);
        let read = broker.read(&*p, 2, 1 << 20, Some(deadline)).await.unwrap();
        assert!(read.records.is_empty() && started.elapsed() >= Duration::from_millis(100));
        assert_eq!(read.high_watermark, 2);
        // Without a deadline it does not wait.
        assert!(
            broker
                .read(&*p, 2, 1, None)
                .await
                .unwrap()
                .records
                .is_empty()
        );
    }
}
