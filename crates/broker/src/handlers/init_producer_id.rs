//! InitProducerId for idempotent producers (transactions are not supported).

use sluice_protocol::kafka_protocol::messages::{
    InitProducerIdRequest, InitProducerIdResponse, ProducerId,
};

use crate::producers::ProducerError;
use crate::{Broker, errors};

pub fn handle(broker: &Broker, req: InitProducerIdRequest) -> InitProducerIdResponse {
    let response = InitProducerIdResponse::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    // Idempotent producers send a null transactional id; treat an empty one the same.
    if req
        .transactional_id
        .as_ref()
        .is_some_and(|id| !id.0.is_empty())
    {
        let e = ProducerError::Transactional;
        tracing::info!(error = %e, "InitProducerId refused");
        return response.with_error_code(errors::producer_error_code(&e));
    }
    // A producer that already has an id asks for an epoch bump (KIP-360): same id, epoch + 1.
    if req.producer_id.0 >= 0 && req.producer_epoch >= 0 && req.producer_epoch < i16::MAX {
        return response
            .with_producer_id(req.producer_id)
            .with_producer_epoch(req.producer_epoch + 1);
    }
    match broker.producer_ids().allocate() {
        Ok(id) => response
            .with_producer_id(ProducerId(id))
            .with_producer_epoch(0),
        Err(e) => {
            tracing::error!(error = %e, "allocating a producer id");
            response.with_error_code(errors::producer_error_code(&e))
        }
    }
}
