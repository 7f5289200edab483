//! `sluice bench`: an open-loop load generator for any Kafka-protocol cluster (Sluice or Apache
//! Kafka), with `run`, `explore`, `drain`, `correctness` and `storm` (retry storm) modes, latency measured from each
//! record's intended send time, and JSON/CSV/HTML results.
//!
//! The load is driven by librdkafka (through the `rdkafka` crate), the same client and settings
//! for every broker under test; share consumers (KIP-932), which librdkafka lacks, by the
//! native client in [`share`].

pub mod admin;
pub mod broker;
pub mod campaign;
pub mod checker;
pub mod driver;
pub mod machine;
pub mod modes;
pub mod payload;
pub mod recovery;
pub mod report;
pub mod result;
pub mod share;
pub mod soak;
pub mod stats;
pub mod storm;
pub mod target;
pub mod workload;
