//! InitProducerId for idempotent producers. Transactions are not supported: a transactional
//! id is refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED, which every client treats as
//! final (most never get here: FindCoordinator refuses their transaction coordinator lookup
//! first, see `errors::TRANSACTIONS_UNSUPPORTED`).
//!
//! New ids come from this broker's reserved blocks, or in cluster mode from the blocks the
//! metadata store hands out, so no two brokers ever give the same id.

use futures::FutureExt;
use futures::future::OptionFuture;
use sluice_protocol::kafka_protocol::messages::{
    InitProducerIdRequest, InitProducerIdResponse, ProducerId, ResponseKind,
};

use std::sync::Arc;

use super::{Answer, cluster_error_code};
use crate::cluster::ClusterError;
use crate::producers::ProducerError;
use crate::{Broker, errors};
use sluice_protocol::kafka_protocol::ResponseError;

/// Answers once a newly reserved block of ids is durable (at once in local mode, where the
/// reservation is fsynced before `allocate` returns).
pub fn handle(broker: &Arc<Broker>, req: InitProducerIdRequest) -> Answer {
    let response = InitProducerIdResponse::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    // Idempotent producers send a null transactional id; treat an empty one the same.
    let transactional = req.transactional_id.as_ref();
    let mut allocated = if transactional.is_some_and(|id| !id.0.is_empty()) {
        Err(ProducerError::Transactional)
    } else if req.producer_id.0 >= 0 && req.producer_epoch >= 0 && req.producer_epoch < i16::MAX {
        // A producer that already has an id asks for an epoch bump (KIP-360): same id, epoch + 1.
        Ok((req.producer_id.0, req.producer_epoch + 1, false))
    } else if broker.producer_ids().is_cluster() {
        return from_cluster(broker, response);
    } else {
        let allocated = broker.producer_ids().allocate();
        allocated.map(|(id, reserved)| (id, 0, reserved))
    };
    let sync = matches!(allocated, Ok((.., true))).then(|| broker.sync_metadata());
    let broker = Arc::clone(broker);
    async move {
        if let Some(Err(e)) = OptionFuture::from(sync).await {
            broker.producer_ids().forget_reservation();
            allocated = Err(ProducerError::IdAllocation(std::io::Error::other(e)));
        }
        Some(ResponseKind::InitProducerId(match allocated {
            Ok((id, epoch, _)) => response
                .with_producer_id(ProducerId(id))
                .with_producer_epoch(epoch),
            Err(e) => {
                tracing::warn!(error = %e, "InitProducerId refused");
                response.with_error_code(errors::producer_error_code(&e))
            }
        }))
    }
    .boxed()
}

/// Cluster mode: a new id from the store's blocks. A store that does not answer gets
/// COORDINATOR_LOAD_IN_PROGRESS, what Kafka answers while it waits for a block of ids: every
/// client retries it.
fn from_cluster(broker: &Arc<Broker>, response: InitProducerIdResponse) -> Answer {
    let broker = Arc::clone(broker);
    async move {
        let allocated = broker.producer_ids().allocate_in_cluster().await;
        Some(ResponseKind::InitProducerId(match allocated {
            Ok(id) => response
                .with_producer_id(ProducerId(id))
                .with_producer_epoch(0),
            Err(e) => {
                tracing::warn!(error = %e, "InitProducerId refused");
                let code = match e {
                    ClusterError::Unavailable(_) => ResponseError::CoordinatorLoadInProgress.code(),
                    other => cluster_error_code(&other),
                };
                response.with_error_code(code)
            }
        }))
    }
    .boxed()
}
