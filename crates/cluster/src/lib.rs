//! # sluice-cluster: many stateless brokers over one bucket and one PostgreSQL database
//!
//! In cluster mode (`sluice serve --storage s3://BUCKET/PREFIX --metadata postgres://...`)
//! every broker is equal and keeps nothing that matters: record data lives in flush objects
//! in the bucket (as in single-broker object mode, `sluice-objstore`), and everything that
//! says what the objects mean lives in PostgreSQL. This crate is that PostgreSQL side.
//!
//! What lives where:
//!
//! | state | where | module |
//! |---|---|---|
//! | schema version, migrations | `sluice.schema_migrations` | [`migrate`] |
//! | cluster identity, the bucket it belongs to | `sluice.cluster` | [`registry`] |
//! | live brokers (id, address, rack, lease) | `sluice.brokers` | [`registry`] |
//! | topics, partitions, configs, producer ids | `sluice.topics`, `sluice.partitions` | [`catalog`] |
//! | which bytes of which object hold which offsets | `sluice.objects`, `sluice.batches` | [`commit`], [`index`] |
//! | idempotent-producer sequence state | `sluice.producers` | [`commit`] |
//! | group coordinators, committed offsets, group state | `sluice.group_*` | [`groups`], [`group_owner`] |
//! | topic catalog version | `sluice.catalog_version` | [`catalog`] |
//! | who runs retention and cleanup; objects no row refers to | `sluice.cleaner_lease`, `sluice.objects.unreferenced_at` | [`retention`] |
//!
//! Above them: [`store`] is cluster mode's partition storage (the flusher's commit step, the
//! index rows and objects behind every read), and [`meta`] the broker's view of the cluster
//! (`sluice_broker::cluster::ClusterMeta`). `sluice serve` joins them in
//! `crates/cli/src/cluster_mode.rs`; [`docs/cluster.md`](../../../docs/cluster.md) is the
//! operator's guide.
//!
//! ## The commit protocol
//!
//! A broker collects produce batches of any partitions into one object, as in single-broker
//! object mode, giving them *provisional* offsets of its own. It PUTs the object under its
//! own key (create-if-absent), then one PostgreSQL transaction ([`commit::commit_object`]):
//! checks that the broker's registry lease is still its own (a broker that lost it is
//! fenced), checks each idempotent batch's sequence against `sluice.producers` (a producer
//! may have moved from another broker), assigns each accepted batch the partition's next
//! offsets (`sluice.partitions.next_offset`), records where each batch lives
//! (`sluice.batches`); right after it commits, a small transaction of its own sends one
//! `NOTIFY` so long-polling fetches on every broker wake (inside the commit it would make
//! every commit in the cluster wait for the others' disk flushes one at a time). Only then
//! are the produce requests answered. Readers serve a batch's bytes from the object
//! with its base offset rewritten to the committed one (the batch CRC does not cover it).
//!
//! A commit is idempotent by object key: a commit retried after a lost answer returns the
//! first one's outcome instead of committing twice.
//!
//! ## Connections
//!
//! [`db::Db`] is a small pool of connections with bounded connect and statement times; every
//! table lives in the schema `sluice`, so the database may be shared with other software.
//! [`url::MetadataUrl`] parses `--metadata` and prints it without the password.

pub mod catalog;
pub mod commit;
pub mod db;
pub mod group_owner;
pub mod groups;
pub mod index;
pub mod meta;
pub mod migrate;
pub mod registry;
pub mod retention;
pub mod shared_files;
pub mod store;
pub mod url;

pub use db::{Db, DbError, DbSettings};
pub use url::MetadataUrl;
