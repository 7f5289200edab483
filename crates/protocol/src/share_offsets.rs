//! What Sluice adds to a DescribeShareGroupOffsets answer: per partition the exact lag, the
//! records in flight and how many of them are locked by a consumer, as tagged fields.
//!
//! Version 0, the only one `kafka-protocol` knows, carries just the start offset. Tagged fields
//! are the protocol's own way to extend a flexible message: a client that does not know a tag
//! skips it (Kafka's clients keep it as an unknown tagged field), so the same answer serves
//! Kafka's tooling and `sluice group describe`. The tags are far above the small numbers Kafka
//! gives its own tagged fields.

use bytes::{Buf, Bytes};
use kafka_protocol::messages::describe_share_group_offsets_response::DescribeShareGroupOffsetsResponsePartition as Partition;

/// Records not yet acknowledged or archived at or above the start offset (an int64).
pub const LAG_TAG: i32 = 21_324;
/// Records in the in-flight window still to be processed: available or acquired (an int32).
pub const IN_FLIGHT_TAG: i32 = 21_325;
/// Of those, the records a consumer holds under an acquisition lock (an int32).
pub const ACQUIRED_TAG: i32 = 21_326;

/// A share-partition's state beyond its start offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareOffsetDetail {
    pub lag: i64,
    pub in_flight: u32,
    pub acquired: u32,
}

/// Adds `detail` to a partition of the answer.
pub fn set_detail(partition: &mut Partition, detail: ShareOffsetDetail) {
    let tags = &mut partition.unknown_tagged_fields;
    tags.insert(LAG_TAG, Bytes::copy_from_slice(&detail.lag.to_be_bytes()));
    tags.insert(
        IN_FLIGHT_TAG,
        Bytes::copy_from_slice(&detail.in_flight.to_be_bytes()),
    );
    tags.insert(
        ACQUIRED_TAG,
        Bytes::copy_from_slice(&detail.acquired.to_be_bytes()),
    );
}

/// The detail a Sluice broker added to a partition, if it did (and every tag is well formed).
pub fn detail(partition: &Partition) -> Option<ShareOffsetDetail> {
    let tags = &partition.unknown_tagged_fields;
    let lag = tags
        .get(&LAG_TAG)
        .filter(|b| b.len() == 8)?
        .clone()
        .get_i64();
    let in_flight = tags
        .get(&IN_FLIGHT_TAG)
        .filter(|b| b.len() == 4)?
        .clone()
        .get_u32();
    let acquired = tags
        .get(&ACQUIRED_TAG)
        .filter(|b| b.len() == 4)?
        .clone()
        .get_u32();
    Some(ShareOffsetDetail {
        lag,
        in_flight,
        acquired,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::DescribeShareGroupOffsetsResponse;
    use kafka_protocol::messages::describe_share_group_offsets_response::{
        DescribeShareGroupOffsetsResponseGroup, DescribeShareGroupOffsetsResponseTopic,
    };
    use kafka_protocol::protocol::{Decodable, Encodable};

    #[test]
    fn the_detail_survives_the_wire_and_is_absent_from_a_plain_answer() {
        let mut p = Partition::default()
            .with_partition_index(3)
            .with_start_offset(40);
        assert_eq!(detail(&p), None);
        let want = ShareOffsetDetail {
            lag: 1 << 40,
            in_flight: 700,
            acquired: 512,
        };
        set_detail(&mut p, want);
        let response = DescribeShareGroupOffsetsResponse::default().with_groups(vec![
            DescribeShareGroupOffsetsResponseGroup::default().with_topics(vec![
                DescribeShareGroupOffsetsResponseTopic::default().with_partitions(vec![p]),
            ]),
        ]);
        let mut buf = bytes::BytesMut::new();
        response.encode(&mut buf, 0).unwrap();
        let back = DescribeShareGroupOffsetsResponse::decode(&mut buf.freeze(), 0).unwrap();
        let p = &back.groups[0].topics[0].partitions[0];
        assert_eq!((p.partition_index, p.start_offset), (3, 40));
        assert_eq!(detail(p), Some(want));
    }

    #[test]
    fn a_malformed_tag_is_no_detail() {
        let mut p = Partition::default();
        set_detail(
            &mut p,
            ShareOffsetDetail {
                lag: 1,
                in_flight: 1,
                acquired: 0,
            },
        );
        p.unknown_tagged_fields
            .insert(IN_FLIGHT_TAG, Bytes::from_static(&[1, 2]));
        assert_eq!(detail(&p), None);
    }
}
