//! The one place that maps Sluice errors to Kafka error codes.

use kafka_protocol::ResponseError;
use sluice_log::{BatchError, LogError};
use sluice_protocol::kafka_protocol;

use crate::topics::TopicError;

/// Kafka's "no error".
pub const NONE: i16 = 0;

/// The Kafka error code for a log error.
pub fn log_error_code(e: &LogError) -> i16 {
    match e {
        LogError::InvalidBatch { source, .. } => batch_error_code(source),
        LogError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange.code(),
        LogError::Corrupt { .. } | LogError::CorruptIndex { .. } => {
            ResponseError::KafkaStorageError.code()
        }
        // A full disk: the append failed alone and the partition is healthy. Kafka clients
        // treat KAFKA_STORAGE_ERROR as retriable (they refresh metadata and send again), which
        // is what a full disk wants: the retry succeeds once space is freed.
        LogError::NoSpace { .. } => ResponseError::KafkaStorageError.code(),
        LogError::Io { .. } | LogError::Failed { .. } => ResponseError::KafkaStorageError.code(),
        LogError::Closed { .. } => ResponseError::UnknownTopicOrPartition.code(),
        LogError::Config(_) => ResponseError::InvalidConfig.code(),
    }
}

/// The Kafka error code for a refused batch.
pub fn batch_error_code(e: &BatchError) -> i16 {
    match e {
        BatchError::BadCrc { .. } | BatchError::Truncated { .. } | BatchError::BadLength { .. } => {
            ResponseError::CorruptMessage.code()
        }
        BatchError::TooLarge { .. } => ResponseError::MessageTooLarge.code(),
        BatchError::BadMagic { .. } => ResponseError::UnsupportedForMessageFormat.code(),
        BatchError::NoRecords { .. }
        | BatchError::OffsetDeltaMismatch { .. }
        | BatchError::Empty => ResponseError::InvalidRecord.code(),
    }
}

/// The Kafka error code for a topic-management error.
pub fn topic_error_code(e: &TopicError) -> i16 {
    match e {
        TopicError::InvalidName { .. } => ResponseError::InvalidTopicException.code(),
        TopicError::AlreadyExists(_) => ResponseError::TopicAlreadyExists.code(),
        TopicError::Unknown(_) => ResponseError::UnknownTopicOrPartition.code(),
        TopicError::InvalidPartitions { .. } | TopicError::PartitionsNotIncreasing { .. } => {
            ResponseError::InvalidPartitions.code()
        }
        TopicError::Config(_) => ResponseError::InvalidConfig.code(),
        TopicError::Log(e) => log_error_code(e),
        TopicError::Io { .. } | TopicError::Corrupt { .. } => {
            ResponseError::KafkaStorageError.code()
        }
    }
}
