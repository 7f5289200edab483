//! The one place that maps Sluice errors to Kafka error codes.
//!
//! Handlers and domain modules return error enums that keep their source ([`LogError`],
//! [`TopicError`], [`ProduceError`], [`ProducerError`], [`AdminError`], [`ReadError`]); the functions here turn
//! them into the code a response carries, and the error's `Display` is its error message.

use kafka_protocol::ResponseError;
use sluice_log::{BatchError, LogError};
use sluice_protocol::kafka_protocol;

use crate::handlers::produce::ProduceError;
use crate::handlers::{AdminError, ReadError};
use crate::producers::ProducerError;
use crate::topics::TopicError;

/// Kafka's "no error".
pub const NONE: i16 = 0;
/// An ApiVersions request of a version this broker does not know (answered as v0).
pub const UNSUPPORTED_VERSION: i16 = ResponseError::UnsupportedVersion.code();
/// A wait inside the broker (stored data loading) did not end in time; retriable.
pub const REQUEST_TIMED_OUT: i16 = ResponseError::RequestTimedOut.code();
/// FindCoordinator for a transactional id: Sluice has no transactions, and the client must
/// give up at once, with the message saying so.
///
/// CLUSTER_AUTHORIZATION_FAILED is the one code both client families treat as final and
/// show with the broker's message:
/// - librdkafka (confluent-kafka, kcat, ...) raises a fatal error for a FindCoordinator of
///   the transaction coordinator only on TRANSACTIONAL_ID_AUTHORIZATION_FAILED and
///   CLUSTER_AUTHORIZATION_FAILED, and appends the response's error message
///   (`rd_kafka_txn_handle_FindCoordinator`, src/rdkafka_txnmgr.c). Every other code makes
///   it ask again every 500 ms until `init_transactions` times out with `_TIMED_OUT` and no
///   reason: INVALID_REQUEST, which Sluice answered before, did that.
/// - The Java producer (kafka-clients 4.3, `TransactionManager.FindCoordinatorHandler`)
///   fails at once on any code that is not retriable, and shows the message except for
///   TRANSACTIONAL_ID_AUTHORIZATION_FAILED, for which it throws a bare "Transactional Id
///   authorization failed." that reads like a missing ACL.
///
/// Not advertising InitProducerId would also stop transactional producers, but librdkafka
/// needs it for idempotent producers too.
pub const TRANSACTIONS_UNSUPPORTED: i16 = ResponseError::ClusterAuthorizationFailed.code();

/// The Kafka error code for a refused produce to one partition.
pub(crate) fn produce_error_code(e: &ProduceError) -> i16 {
    match e {
        ProduceError::Acks(_) => ResponseError::InvalidRequiredAcks.code(),
        ProduceError::UnknownTopic(_) | ProduceError::UnknownPartition { .. } => {
            ResponseError::UnknownTopicOrPartition.code()
        }
        ProduceError::TooLarge { .. } => ResponseError::MessageTooLarge.code(),
        ProduceError::IdempotentOverHttp
        | ProduceError::UnexpectedDuplicate
        | ProduceError::Transactional
        | ProduceError::MixedProducers
        | ProduceError::KeylessInCompacted { .. }
        | ProduceError::UnreadableForCompaction { .. } => ResponseError::InvalidRecord.code(),
        ProduceError::NotConsecutive { .. } => ResponseError::OutOfOrderSequenceNumber.code(),
        ProduceError::Producer(e) => producer_error_code(e),
        ProduceError::Batch(e) => batch_error_code(e),
        ProduceError::Log(e) => log_error_code(e),
    }
}

/// The Kafka error code for an idempotent producer's refusal (Produce, InitProducerId).
pub fn producer_error_code(e: &ProducerError) -> i16 {
    match e {
        ProducerError::UnknownProducer { .. } => ResponseError::UnknownProducerId.code(),
        ProducerError::Fenced { .. } => ResponseError::InvalidProducerEpoch.code(),
        ProducerError::NewEpochNotAtZero { .. } | ProducerError::OutOfOrder { .. } => {
            ResponseError::OutOfOrderSequenceNumber.code()
        }
        // What Kafka answers a transactional id it may not use; clients report it clearly.
        ProducerError::Transactional => ResponseError::TransactionalIdAuthorizationFailed.code(),
        ProducerError::IdAllocation(_) => ResponseError::KafkaStorageError.code(),
    }
}

/// The Kafka error code for a refused admin request (topics, partitions, configs).
pub(crate) fn admin_error_code(e: &AdminError) -> i16 {
    match e {
        AdminError::UnknownTopic(_) => ResponseError::UnknownTopicOrPartition.code(),
        AdminError::UnknownTopicId(_) => ResponseError::UnknownTopicId.code(),
        AdminError::ReplicationFactor(_) => ResponseError::InvalidReplicationFactor.code(),
        AdminError::ReplicaAssignment => ResponseError::InvalidReplicaAssignment.code(),
        AdminError::Config(_) | AdminError::NotAList { .. } => ResponseError::InvalidConfig.code(),
        AdminError::DescribeResourceType(_) | AdminError::AlterNonTopic => {
            ResponseError::InvalidRequest.code()
        }
        AdminError::Topic(e) => topic_error_code(e),
        AdminError::NotDurable(_) => ResponseError::KafkaStorageError.code(),
    }
}

/// The Kafka error code for a read refused before storage was asked (Fetch, ListOffsets).
pub(crate) fn read_error_code(e: &ReadError) -> i16 {
    match e {
        ReadError::UnknownTopicOrPartition => ResponseError::UnknownTopicOrPartition.code(),
        ReadError::IsolationLevel(_) | ReadError::Timestamp(_) => {
            ResponseError::InvalidRequest.code()
        }
    }
}

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
        LogError::Refused(r) => refusal_code(r),
    }
}

/// The Kafka error code for a batch the shared metadata store refused (cluster mode).
fn refusal_code(r: &sluice_log::Refusal) -> i16 {
    use sluice_log::Refusal;
    match r {
        Refusal::OutOfOrderSequence { .. } | Refusal::NewEpochNotAtZero { .. } => {
            ResponseError::OutOfOrderSequenceNumber.code()
        }
        Refusal::UnknownProducer { .. } => ResponseError::UnknownProducerId.code(),
        Refusal::ProducerFenced { .. } => ResponseError::InvalidProducerEpoch.code(),
        Refusal::UnknownPartition => ResponseError::UnknownTopicOrPartition.code(),
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

/// The Kafka error code for a partition-storage error (see `storage::StorageError`).
pub fn storage_error_code(e: &crate::storage::StorageError) -> i16 {
    log_error_code(e)
}
