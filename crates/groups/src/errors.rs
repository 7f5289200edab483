//! The one place in the group coordinator that maps its errors to Kafka error codes.

use sluice_protocol::kafka_protocol::ResponseError;

use crate::StoreError;

/// Kafka's "no error".
pub const NONE: i16 = 0;

/// The Kafka error code for a group-store write that failed (an OffsetCommit, a group's state).
///
/// What Kafka's group coordinator answers when its own log append fails with a storage error:
/// NOT_COORDINATOR. Clients treat it as retriable: they look the coordinator up again and
/// resend, which succeeds once space is freed (a full disk, [`StoreError::NoSpace`]) or once
/// the broker has restarted (a failed store, [`StoreError::Failed`]).
pub fn store_error_code(e: &StoreError) -> i16 {
    match e {
        StoreError::NoSpace(_) | StoreError::Failed(_) | StoreError::Io { .. } => {
            ResponseError::NotCoordinator.code()
        }
    }
}
