//! DescribeClientQuotas and AlterClientQuotas over the broker's [`ClientQuotas`], so
//! `kafka-configs --entity-type users|clients` and AdminClient's `describeClientQuotas` /
//! `alterClientQuotas` manage Sluice's quotas. Who may call them is checked before
//! (`crate::authz`: DESCRIBE_CONFIGS or ALTER_CONFIGS on the cluster).
//!
//! A change rewrites `security/quotas.json` and fsyncs it on the blocking pool, then becomes
//! durable as the storage mode keeps metadata ([`Broker::change_security_file`]: the bucket in
//! object-storage mode, PostgreSQL for every broker in cluster mode). If it cannot be, each
//! entry that succeeded answers KAFKA_STORAGE_ERROR with the reason.

use std::sync::Arc;

use futures::FutureExt;
use sluice_protocol::kafka_protocol::ResponseError;
use sluice_protocol::kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, DescribeClientQuotasRequest,
    DescribeClientQuotasResponse, ResponseKind, alter_client_quotas_response,
    describe_client_quotas_response,
};
use sluice_protocol::kafka_protocol::protocol::StrBytes;
use sluice_security::{ClientQuotas, QuotaEntity, QuotaError, QuotaFilter, QuotaMatch, QuotaOp};

use super::{Answer, str_bytes};
use crate::Broker;
use crate::shared_files::Changed;

const INVALID_REQUEST: i16 = ResponseError::InvalidRequest.code();
const KAFKA_STORAGE_ERROR: i16 = ResponseError::KafkaStorageError.code();

/// DescribeClientQuotas match types.
const MATCH_EXACT: i8 = 0;
const MATCH_DEFAULT: i8 = 1;
const MATCH_ANY: i8 = 2;

/// Answers DescribeClientQuotas: the quotas whose entities match the filter.
pub fn describe(
    broker: &Broker,
    req: &DescribeClientQuotasRequest,
) -> DescribeClientQuotasResponse {
    match filter(req) {
        Ok(filter) => DescribeClientQuotasResponse::default().with_entries(Some(
            broker
                .quotas()
                .describe(&filter)
                .into_iter()
                .map(|(entity, values)| {
                    describe_client_quotas_response::EntryData::default()
                        .with_entity(
                            entity
                                .parts()
                                .into_iter()
                                .map(|(kind, name)| {
                                    describe_client_quotas_response::EntityData::default()
                                        .with_entity_type(str_bytes(kind))
                                        .with_entity_name(name.map(str_bytes))
                                })
                                .collect(),
                        )
                        .with_values(
                            values
                                .into_iter()
                                .map(|(kind, value)| {
                                    describe_client_quotas_response::ValueData::default()
                                        .with_key(str_bytes(kind.key()))
                                        .with_value(value)
                                })
                                .collect(),
                        )
                })
                .collect(),
        )),
        Err(e) => DescribeClientQuotasResponse::default()
            .with_error_code(e.code)
            .with_error_message(Some(str_bytes(e.message))),
    }
}

fn filter(req: &DescribeClientQuotasRequest) -> Result<QuotaFilter, QuotaError> {
    let mut components = Vec::with_capacity(req.components.len());
    for c in &req.components {
        let matching = match (c.match_type, &c._match) {
            (MATCH_EXACT, Some(name)) => QuotaMatch::Exact(name.to_string()),
            (MATCH_EXACT, None) => {
                return Err(QuotaError {
                    code: INVALID_REQUEST,
                    message: format!(
                        "an exact match on {} needs a name (match type 1 is the default)",
                        c.entity_type.as_str()
                    ),
                });
            }
            (MATCH_DEFAULT, _) => QuotaMatch::Default,
            (MATCH_ANY, _) => QuotaMatch::Any,
            (other, _) => {
                return Err(QuotaError {
                    code: INVALID_REQUEST,
                    message: format!("unknown match type {other} (0 exact, 1 default, 2 any)"),
                });
            }
        };
        components.push((c.entity_type.as_str(), matching));
    }
    QuotaFilter::new(components, req.strict)
}

/// Answers AlterClientQuotas: each entry is made or refused on its own.
pub fn alter(broker: &Arc<Broker>, req: AlterClientQuotasRequest) -> Answer {
    let quotas: Arc<ClientQuotas> = Arc::clone(broker.quotas());
    let path = quotas.path().to_owned();
    let req = Arc::new(req);
    let change_req = Arc::clone(&req);
    let change = Arc::new(move || {
        let entities: Vec<_> = change_req
            .entries
            .iter()
            .map(|e| {
                QuotaEntity::from_parts(
                    e.entity
                        .iter()
                        .map(|p| (p.entity_type.as_str(), p.entity_name.as_deref())),
                )
            })
            .collect();
        let entries = entities
            .iter()
            .cloned()
            .zip(&change_req.entries)
            .map(|(entity, e)| {
                let ops = e
                    .ops
                    .iter()
                    .map(|op| QuotaOp {
                        key: op.key.to_string(),
                        value: op.value,
                        remove: op.remove,
                    })
                    .collect();
                (entity, ops)
            })
            .collect();
        match quotas.alter(entries, change_req.validate_only) {
            Ok((outcomes, changed)) => {
                let made = entities.iter().zip(&change_req.entries).zip(&outcomes);
                for ((entity, entry), outcome) in made {
                    if let (Ok(entity), Ok(())) = (entity, outcome)
                        && !change_req.validate_only
                    {
                        let ops = entry
                            .ops
                            .iter()
                            .map(|op| {
                                if op.remove {
                                    format!("-{}", op.key.as_str())
                                } else {
                                    format!("{}={}", op.key.as_str(), op.value)
                                }
                            })
                            .collect::<Vec<_>>()
                            .join(",");
                        tracing::info!(entity = %entity.label(), ops = %ops, "client quota changed");
                    }
                }
                let results = outcomes
                    .into_iter()
                    .map(|o| o.err().map(|e| (e.code, e.message)))
                    .collect::<Vec<_>>();
                (results, changed)
            }
            Err(e) => {
                tracing::error!(error = %e, "client quota change not made");
                let failed = Some((
                    KAFKA_STORAGE_ERROR,
                    format!("the quota file could not be written: {e}"),
                ));
                (vec![failed; change_req.entries.len()], false)
            }
        }
    });
    let changing = broker.change_security_file(&path, change);
    async move {
        let results = match changing.await {
            Changed::Durable(results) => results,
            Changed::NotDurable(results, reason) => {
                tracing::error!(error = %reason, "client quota change not durable beyond this broker");
                results
                    .into_iter()
                    .map(|r| {
                        r.or_else(|| {
                            Some((
                                KAFKA_STORAGE_ERROR,
                                format!("the quota change is made on this broker but could not be made durable in storage: {reason}"),
                            ))
                        })
                    })
                    .collect()
            }
            Changed::NotMade(reason) => {
                tracing::error!(error = %reason, "client quota change not made");
                vec![Some((KAFKA_STORAGE_ERROR, reason)); req.entries.len()]
            }
        };
        Some(ResponseKind::AlterClientQuotas(answer(&req, |i| {
            results[i].clone().map(|(c, m)| (c, Some(str_bytes(m))))
        })))
    }
    .boxed()
}

/// The answer to `req`: each entry's entity, echoed, with the outcome `outcome(i)` gives for
/// entry `i` (`None`: made).
pub(crate) fn answer(
    req: &AlterClientQuotasRequest,
    outcome: impl Fn(usize) -> Option<(i16, Option<StrBytes>)>,
) -> AlterClientQuotasResponse {
    let entries = req
        .entries
        .iter()
        .enumerate()
        .map(|(i, entry)| {
            let (code, message) = outcome(i).unwrap_or((0, None));
            alter_client_quotas_response::EntryData::default()
                .with_error_code(code)
                .with_error_message(message)
                .with_entity(
                    entry
                        .entity
                        .iter()
                        .map(|p| {
                            alter_client_quotas_response::EntityData::default()
                                .with_entity_type(p.entity_type.clone())
                                .with_entity_name(p.entity_name.clone())
                        })
                        .collect(),
                )
        })
        .collect();
    AlterClientQuotasResponse::default().with_entries(entries)
}
