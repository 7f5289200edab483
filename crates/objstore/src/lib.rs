//! # sluice-objstore: object-store partition storage
//!
//! The second storage backend (design: `docs/object-storage.md`). So far it holds the
//! flush-object format; the flusher, the local index and the caches are built on it next.
//!
//! In object-storage mode (`--storage s3://BUCKET/PREFIX`) the broker collects the produce
//! batches of every partition for up to a linger interval and writes them as ONE object per
//! flush; only after that PUT succeeds are they acknowledged. The format and the names are pure
//! and I/O-free; the flusher (which owns the clock, the bucket and the retries) sits above them.
//!
//! Where it sits: produce → broker validates batches → flusher hands each partition's batches
//! to an [`ObjectWriter`] (which assigns or checks offsets and checks every batch) plus the
//! metadata records that must survive → `finish` → conditional PUT of the bytes under
//! [`object_name`] → acknowledge. Fetch → [`parse_footer`] (one suffix-range GET) →
//! [`parse_index`] (one ranged GET) → [`locate`] → one ranged GET of the run →
//! [`verify_run`] → [`batches_from`] → the bytes go to the consumer unchanged.
//!
//! Modules: [`format`](mod@format) specifies the byte layout (read its doc before changing
//! anything) and holds its types, [`writer`] builds objects, [`reader`] decodes and checks
//! them, [`name`] the object names, [`error`] the one error enum.
//!
//! [`bucket`] opens the bucket: `--storage s3://BUCKET/PREFIX` plus the standard AWS variables
//! become an S3 client, and a bounded start check proves it usable (its own error enum,
//! [`BucketError`], whose lines are printed to the operator as they are).

pub mod backend;
pub mod bucket;
pub mod cache;
pub mod error;
pub mod flush;
pub mod format;
pub mod index;
pub mod lease;
pub mod maintenance;
pub mod meta;
pub mod metrics;
pub mod name;
pub mod partition;
pub mod reader;
pub mod rebuild;
pub mod writer;

pub use backend::{BackendError, ObjectBackend, ObjectSettings, OpenReport};
pub use bucket::{Bucket, BucketConfig, BucketError, StorageUrl};
pub use error::{BatchProblem, MalformedWhat, ObjectError, Result, Section};
pub use flush::{
    AbandonedObject, CommitFailure, CommittedObject, FlushError, FlushSettings, FlushSink,
    FlushStats, FlushTarget, Flusher, ObjectCommitter, Receipt, Ticket,
};
pub use format::{
    EMPTY_OBJECT_BYTES, FOOTER_BYTES, FORMAT_VERSION, Footer, HEADER_BYTES, INDEX_ENTRY_BYTES,
    MAGIC, ObjectHeader, RunEntry, TopicId, patch_base_offsets,
};
pub use lease::{Epoch, Lease, LeaseError, LeaseKeeper, LeaseSettings, LeaseStatus, WriterId};
pub use name::{ObjectName, checkpoint_name, object_name, parse_name};
pub use reader::{
    Index, Meta, MetaIter, MetaRecord, ObjectReader, batches_from, locate, parse_footer,
    parse_header, parse_index, parse_meta, verify_run,
};
pub use writer::ObjectWriter;
