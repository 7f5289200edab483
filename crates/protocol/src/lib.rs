//! # sluice-protocol: the Kafka wire layer
//!
//! Turns bytes from a socket into typed requests and typed responses into bytes, with no I/O of
//! its own. Message codecs come from the `kafka-protocol` crate; this crate adds what a broker
//! needs around them:
//!
//! - [`frame`]: the cheap "is a whole frame here?" check on the 4-byte size prefix, which refuses
//!   oversize frames before anything is allocated;
//! - [`guard`]: checks every length a request declares against the bytes that remain, before
//!   the codec crate decodes (its decoders reserve declared array lengths up front);
//! - [`codec`]: request header + body decoding (record batches stay as `Bytes`, never copied or
//!   re-encoded) and response encoding with the right header version;
//! - [`share_v2`]: ShareFetch and ShareAcknowledge v2 (Kafka 4.2), which `kafka-protocol` does not
//!   know, as a thin layer over its v1, with the traits that read the fields v2 adds;
//! - [`share_offsets`]: the lag and records in flight a DescribeShareGroupOffsets answer
//!   carries as tagged fields;
//! - [`versions`]: the API versions Sluice implements, the single source for ApiVersions;
//! - [`partitioner`]: Kafka's default (murmur2) partitioner for keyed records;
//! - [`records`]: the records inside a RecordBatch v2, encoded and decoded (the CLI and the HTTP
//!   API use it; the broker itself never looks inside a batch).
//!
//! Where it sits: `server` reads frames with [`frame::check`], decodes them with
//! [`codec::decode_request`], hands the typed request to `broker`, and encodes the answer with
//! [`codec::encode_response`].

pub mod codec;
pub mod frame;
pub mod guard;
pub mod partitioner;
pub mod records;
pub mod share_offsets;
pub mod share_v2;
pub mod versions;

pub use kafka_protocol;
