//! The crate's one error enum. Every variant says what is wrong and where: a byte offset in the
//! object (or in the bytes handed to the writer) and the section it lies in. The broker maps
//! these to its own errors; nothing here knows about Kafka error codes.

use core::fmt;

/// The parts of a flush object (see the layout in [`crate::format`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Header,
    Data,
    Meta,
    Index,
    Footer,
}

impl fmt::Display for Section {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Section::Header => "header",
            Section::Data => "data section",
            Section::Meta => "meta section",
            Section::Index => "index",
            Section::Footer => "footer",
        })
    }
}

/// What is wrong with one RecordBatch (in a run being written, or in a run read back).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchProblem {
    #[error("truncated: {available} bytes present, {needed} needed")]
    Truncated { available: u64, needed: u64 },
    #[error("batch length field {declared} is impossible (below the 49 bytes of header it counts)")]
    BadLength { declared: i32 },
    #[error("magic is {magic}, only record batch format v2 (magic 2) is stored")]
    BadMagic { magic: i8 },
    #[error("CRC-32C mismatch: header says {stored:#010x}, bytes give {computed:#010x}")]
    BadCrc { stored: u32, computed: u32 },
    #[error("last offset delta {delta} is negative")]
    BadLastOffsetDelta { delta: i32 },
    #[error("record count {count} is negative")]
    BadRecordCount { count: i32 },
    #[error(
        "record count {count} exceeds the {} offsets its last offset delta {delta} spans",
        i64::from(*.delta) + 1
    )]
    MoreRecordsThanOffsets { count: i32, delta: i32 },
    #[error("base offset {base_offset} is negative or its last offset overflows")]
    BadBaseOffset { base_offset: i64 },
    #[error(
        "base offset {base_offset} does not follow the previous batch's last offset {previous_last}"
    )]
    OffsetNotIncreasing {
        base_offset: i64,
        previous_last: i64,
    },
}

/// Errors from writing or reading a flush object, or from parsing an object name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ObjectError {
    /// Fewer bytes than the structure needs (a truncated object, or a range GET that returned
    /// less than the footer or index promised).
    #[error("{section} at byte {at} is truncated: {needed} bytes needed, {available} present")]
    Truncated {
        section: Section,
        at: u64,
        needed: u64,
        available: u64,
    },
    #[error(
        "{section} at byte {at} has magic {found:02x?}, expected {expected:02x?} (not a flush object)"
    )]
    BadMagic {
        section: Section,
        at: u64,
        found: [u8; 8],
        expected: [u8; 8],
    },
    #[error(
        "{section} at byte {at} has format version {found}; this build reads version {supported}"
    )]
    UnsupportedVersion {
        section: Section,
        at: u64,
        found: u16,
        supported: u16,
    },
    #[error(
        "{section} at byte {at}: CRC-32C mismatch: stored {stored:#010x}, bytes give {computed:#010x}"
    )]
    BadCrc {
        section: Section,
        at: u64,
        stored: u32,
        computed: u32,
    },
    /// A field holds a value the layout forbids (a section out of place, a count that does not
    /// fit the bytes present, a reserved field that is not zero, ...).
    #[error("{section} at byte {at}: {what}")]
    Malformed {
        section: Section,
        at: u64,
        what: MalformedWhat,
    },
    #[error("bad RecordBatch at byte {at} of the {section}: {problem}")]
    BadBatch {
        section: Section,
        at: u64,
        problem: BatchProblem,
    },
    /// The header and the footer of one object disagree (epoch, sequence or creation time).
    #[error("header and footer disagree on the {field}: header {header}, footer {footer}")]
    HeaderFooterMismatch {
        field: &'static str,
        header: u64,
        footer: u64,
    },
    /// Runs must be added in strictly ascending (topic id, partition) order, one per partition.
    #[error(
        "run for topic {topic} partition {partition} is out of order: runs go in strictly \
         ascending (topic id, partition) order, one per partition per object"
    )]
    RunOutOfOrder {
        topic: crate::TopicId,
        partition: i32,
    },
    #[error("partition {partition} is negative")]
    NegativePartition { partition: i32 },
    #[error("no run is open: call begin_run first")]
    NoOpenRun,
    #[error("a run is still open: call end_run before {op}")]
    RunStillOpen { op: &'static str },
    #[error("{what} exceeds the format's limit of {limit}")]
    TooLarge { what: &'static str, limit: u64 },
    #[error("object name {name:?} is not one of ours: {reason}")]
    ForeignName { name: String, reason: &'static str },
    /// A metadata record that does not decode (see [`crate::meta`]).
    #[error("{0}")]
    Meta(crate::meta::MetaError),
}

/// The specific rule a malformed field breaks (kept as data so tests and logs can match it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MalformedWhat {
    #[error("reserved field holds {value:#x}, must be zero")]
    ReservedNotZero { value: u64 },
    #[error("section bounds are inconsistent ({detail})")]
    Bounds { detail: &'static str },
    #[error("declared count {count} needs {needed} bytes, {available} present")]
    CountMismatch {
        count: u32,
        needed: u64,
        available: u64,
    },
    #[error("{trailing} bytes after the last declared record")]
    TrailingBytes { trailing: u64 },
    #[error("index entry {entry}: {detail}")]
    Entry { entry: u32, detail: &'static str },
    #[error("run of {batches} batches disagrees with its index entry ({detail})")]
    RunMismatch { batches: u32, detail: &'static str },
}

pub type Result<T, E = ObjectError> = core::result::Result<T, E>;
