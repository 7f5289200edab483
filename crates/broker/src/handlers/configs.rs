//! DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics (and a read-only view of
//! the broker's own settings), and DescribeConfigs and IncrementalAlterConfigs for groups
//! (resource type 32: share groups' `share.*` configs, kept by the group coordinator with the
//! group's state).
//!
//! An alter is checked the same way in every mode. Single broker: the topic's file and
//! partitions change, answered once durable. Cluster mode: the new overrides go to the
//! metadata store (all of the request's at once), the catalog is reloaded and applied (which
//! reconfigures the partitions here), then the answer; DescribeConfigs on any broker shows
//! them once its copy of the catalog has them.

use sluice_protocol::kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use sluice_protocol::kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, ResponseKind,
    alter_configs_response, incremental_alter_configs_response,
};
use sluice_protocol::kafka_protocol::protocol::StrBytes;

use std::sync::Arc;

use futures::FutureExt;

use super::{AdminError, Answer, Outcomes, after_sync, str_bytes};
use crate::catalog::{self, ChangeError};
use crate::{Broker, TopicConfig, errors};

/// Config resource types.
const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
const RESOURCE_GROUP: i8 = 32;
/// Config sources (DescribeConfigs v1+).
const SOURCE_TOPIC: i8 = 1;
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;
const SOURCE_GROUP: i8 = 8;
/// Config types (v3+).
const TYPE_STRING: i8 = 2;
const TYPE_INT: i8 = 3;
const TYPE_LONG: i8 = 5;
const TYPE_DOUBLE: i8 = 6;
const TYPE_LIST: i8 = 7;

fn config_type(name: &str) -> i8 {
    match name {
        "cleanup.policy" => TYPE_LIST,
        "max.message.bytes" | "segment.bytes" => TYPE_INT,
        "retention.ms"
        | "retention.bytes"
        | "segment.ms"
        | "delete.retention.ms"
        | "min.compaction.lag.ms"
        | "max.compaction.lag.ms" => TYPE_LONG,
        "min.cleanable.dirty.ratio" => TYPE_DOUBLE,
        "consumer.session.timeout.ms"
        | "consumer.heartbeat.interval.ms"
        | "share.session.timeout.ms"
        | "share.heartbeat.interval.ms"
        | "share.record.lock.duration.ms"
        | "share.delivery.count.limit"
        | "share.partition.max.record.locks" => TYPE_INT,
        _ => TYPE_STRING,
    }
}

/// The broker-wide setting a topic config defaults to, named as Kafka's broker config (the
/// synonym DescribeConfigs lists after the topic's own value).
fn broker_synonym(topic_config: &str) -> Option<&'static str> {
    Some(match topic_config {
        "cleanup.policy" => "log.cleanup.policy",
        "delete.retention.ms" => "log.cleaner.delete.retention.ms",
        "max.compaction.lag.ms" => "log.cleaner.max.compaction.lag.ms",
        "min.cleanable.dirty.ratio" => "log.cleaner.min.cleanable.ratio",
        "min.compaction.lag.ms" => "log.cleaner.min.compaction.lag.ms",
        "message.timestamp.type" => "log.message.timestamp.type",
        "max.message.bytes" => "message.max.bytes",
        "retention.bytes" => "log.retention.bytes",
        "retention.ms" => "log.retention.ms",
        "segment.bytes" => "log.segment.bytes",
        "segment.ms" => "log.roll.ms",
        _ => return None,
    })
}

fn synonym(name: &str, value: &str, source: i8) -> DescribeConfigsSynonym {
    DescribeConfigsSynonym::default()
        .with_name(str_bytes(name))
        .with_value(Some(str_bytes(value)))
        .with_source(source)
}

/// DescribeConfigs. With `include_synonyms` (v1+, as `kafka-configs --describe` asks), each
/// config lists where its value may come from, in order of precedence, as Kafka does: a topic
/// config its own override (if set), then the broker-wide default under the broker config's
/// name; a group config its own value; a broker setting itself.
pub fn describe(
    broker: &Broker,
    req: DescribeConfigsRequest,
    version: i16,
) -> DescribeConfigsResponse {
    let synonyms = version >= 1 && req.include_synonyms;
    let topic_defaults = TopicConfig::default().describe(broker.config());
    let default_of = |name: &str| {
        topic_defaults
            .iter()
            .find(|(n, _, _)| *n == name)
            .map(|(_, v, _)| v.clone())
    };
    let results = req
        .resources
        .into_iter()
        .map(|r| {
            let result = DescribeConfigsResult::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name.clone());
            let wanted = |name: &str| {
                r.configuration_keys
                    .as_ref()
                    .is_none_or(|keys| keys.iter().any(|k| &**k == name))
            };
            let entry = |name: &str, value: String, source: i8| {
                let mut e = DescribeConfigsResourceResult::default()
                    .with_name(str_bytes(name))
                    .with_value(Some(str_bytes(value)))
                    .with_config_source(source);
                if version >= 3 {
                    e = e.with_config_type(config_type(name));
                }
                e
            };
            let refuse = |e: AdminError| {
                result
                    .clone()
                    .with_error_code(errors::admin_error_code(&e))
                    .with_error_message(Some(str_bytes(e.to_string())))
            };
            match r.resource_type {
                RESOURCE_TOPIC => match broker.topics().get(&r.resource_name) {
                    Some(topic) => result.with_configs(
                        topic
                            .config()
                            .describe(broker.config())
                            .into_iter()
                            .filter(|(name, _, _)| wanted(name))
                            .map(|(name, value, is_default)| {
                                let mut list = Vec::new();
                                if synonyms {
                                    if !is_default {
                                        list.push(synonym(name, &value, SOURCE_TOPIC));
                                    }
                                    if let (Some(broker_name), Some(default)) =
                                        (broker_synonym(name), default_of(name))
                                    {
                                        list.push(synonym(broker_name, &default, SOURCE_DEFAULT));
                                    }
                                }
                                let source = if is_default {
                                    SOURCE_DEFAULT
                                } else {
                                    SOURCE_TOPIC
                                };
                                entry(name, value, source).with_synonyms(list)
                            })
                            .collect(),
                    ),
                    None => refuse(AdminError::UnknownTopic(r.resource_name.to_string())),
                },
                RESOURCE_BROKER => {
                    let c = broker.config();
                    let settings = [
                        (
                            "auto.create.topics.enable",
                            c.auto_create_topics.to_string(),
                        ),
                        ("num.partitions", c.default_partitions.to_string()),
                        (
                            "log.retention.ms",
                            c.log.retention_ms.unwrap_or(-1).to_string(),
                        ),
                        (
                            "log.retention.bytes",
                            c.log.retention_bytes.map_or(-1, |v| v as i64).to_string(),
                        ),
                        ("log.segment.bytes", c.log.segment_bytes.to_string()),
                        ("message.max.bytes", c.max_message_bytes.to_string()),
                    ];
                    result.with_configs(
                        settings
                            .into_iter()
                            .filter(|(name, _)| wanted(name))
                            .map(|(name, value)| {
                                let list = if synonyms {
                                    vec![synonym(name, &value, SOURCE_STATIC_BROKER)]
                                } else {
                                    Vec::new()
                                };
                                entry(name, value.clone(), SOURCE_STATIC_BROKER)
                                    .with_read_only(true)
                                    .with_synonyms(list)
                            })
                            .collect(),
                    )
                }
                RESOURCE_GROUP => result.with_configs(
                    broker
                        .groups()
                        .group_configs(&r.resource_name)
                        .into_iter()
                        .filter(|c| wanted(c.name))
                        .map(|c| {
                            let source = if c.is_set {
                                SOURCE_GROUP
                            } else {
                                SOURCE_DEFAULT
                            };
                            let list = if synonyms {
                                vec![synonym(c.name, &c.value, source)]
                            } else {
                                Vec::new()
                            };
                            entry(c.name, c.value, source).with_synonyms(list)
                        })
                        .collect(),
                ),
                other => refuse(AdminError::DescribeResourceType(other)),
            }
        })
        .collect();
    DescribeConfigsResponse::default().with_results(results)
}

/// Applies `changes` to a topic's configs: `(name, Some(value))` sets, `(name, None)` removes.
/// With `replace`, configs not mentioned go back to their defaults (legacy AlterConfigs).
/// Cluster mode: checks only, and returns the topic's new overrides for the store.
fn alter_topic(
    broker: &Broker,
    resource_type: i8,
    name: &StrBytes,
    changes: Vec<(String, Option<String>)>,
    replace: bool,
    validate_only: bool,
) -> Result<Option<TopicConfig>, AdminError> {
    if resource_type != RESOURCE_TOPIC {
        return Err(AdminError::AlterNonTopic);
    }
    let topic = broker
        .topics()
        .get(name)
        .ok_or_else(|| AdminError::UnknownTopic(name.to_string()))?;
    let mut configs = if replace {
        TopicConfig::default()
    } else {
        topic.config()
    };
    for (key, value) in &changes {
        configs.set(key, value.as_deref())?;
    }
    let local = broker.topics().storage_label().is_none();
    configs.check_storage(local)?;
    if validate_only {
        return Ok(None);
    }
    if broker.cluster().is_some() {
        return Ok(Some(configs));
    }
    broker
        .topics()
        .set_config(&topic, configs, broker.config())?;
    Ok(None)
}

/// Answers an alter: at once after the local changes (once durable), or in cluster mode once
/// every topic's new overrides (`planned`, by result) are in the store and applied here.
fn answer<R>(
    broker: &Arc<Broker>,
    mut response: R,
    planned: Vec<Option<(String, TopicConfig)>>,
    kind: fn(R) -> ResponseKind,
) -> Answer
where
    R: Outcomes + Send + 'static,
{
    let (Some(meta), Some(sync)) = (broker.cluster(), broker.catalog_sync()) else {
        return after_sync(broker, response, kind);
    };
    if planned.iter().all(Option::is_none) {
        return futures::future::ready(Some(kind(response))).boxed();
    }
    let calls = planned.iter().map(|p| {
        let (name, configs) = p.as_ref()?;
        Some(meta.set_configs(name.clone(), configs.to_catalog()))
    });
    let calls = futures::future::join_all(calls.map(futures::future::OptionFuture::from));
    let sync = Arc::clone(sync);
    async move {
        let outcomes = calls.await;
        let mut applied = match outcomes.iter().any(|o| matches!(o, Some(Ok(())))) {
            true => catalog::refreshed(sync.refresh().await),
            false => Ok(Default::default()),
        };
        let results = response.outcomes().into_iter().zip(planned).zip(outcomes);
        for (((code, message), planned), outcome) in results {
            let (Some((name, _)), Some(outcome)) = (planned, outcome) else {
                continue;
            };
            let done = outcome.map_err(ChangeError::from).and_then(|()| {
                let applied = applied.as_mut().map_err(|e| e.clone())?;
                match applied.failed.iter().position(|(n, _)| *n == name) {
                    Some(i) => Err(applied.failed.swap_remove(i).1.into()),
                    None => Ok(()),
                }
            });
            if let Err(e) = done {
                tracing::info!(topic = %name, error = %e, "alter configs refused");
                (*code, *message) = (e.code(), Some(str_bytes(e.to_string())));
            }
        }
        Some(kind(response))
    }
    .boxed()
}

/// Cluster mode: reloads the catalog before `alter` plans, so the overrides it starts from
/// (IncrementalAlterConfigs keeps those it does not name) are the store's, not an older copy.
/// The store replaces a topic's overrides as a whole: two alters of one topic through two
/// brokers at the same moment can still lose one (the last wins), as with any
/// read-modify-write without a version check.
fn fresh<Req: Send + 'static>(
    broker: &Arc<Broker>,
    req: Req,
    alter: fn(&Arc<Broker>, Req) -> Answer,
) -> Answer {
    let Some(sync) = broker.catalog_sync() else {
        return alter(broker, req);
    };
    let (broker, sync) = (Arc::clone(broker), Arc::clone(sync));
    async move {
        if let Err(e) = sync.refresh().await {
            // The change itself then reaches the store, which answers for itself.
            tracing::warn!(error = %e, "reloading the cluster catalog before an alter");
        }
        alter(&broker, req).await
    }
    .boxed()
}

pub fn incremental_alter(broker: &Arc<Broker>, mut req: IncrementalAlterConfigsRequest) -> Answer {
    if req
        .resources
        .iter()
        .all(|r| r.resource_type != RESOURCE_GROUP)
    {
        return fresh(broker, req, incremental_alter_now);
    }
    // Group configs go to the group coordinator; the rest as any alter, then the answers are
    // put back in the request's order.
    let resources = std::mem::take(&mut req.resources);
    let order: Vec<bool> = resources
        .iter()
        .map(|r| r.resource_type == RESOURCE_GROUP)
        .collect();
    let (groups, others): (Vec<_>, Vec<_>) = resources
        .into_iter()
        .partition(|r| r.resource_type == RESOURCE_GROUP);
    let validate_only = req.validate_only;
    let rest = (!others.is_empty()).then(|| {
        req.resources = others;
        fresh(broker, req, incremental_alter_now)
    });
    let broker = Arc::clone(broker);
    async move {
        let mut group_answers = Vec::with_capacity(groups.len());
        for r in groups {
            let changes: Result<Vec<_>, AdminError> = r
                .configs
                .iter()
                .map(|c| match c.config_operation {
                    0 => Ok((c.name.to_string(), c.value.as_ref().map(|v| v.to_string()))),
                    1 => Ok((c.name.to_string(), None)),
                    op => Err(AdminError::NotAList {
                        op,
                        name: c.name.to_string(),
                    }),
                })
                .collect();
            let response =
                incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                    .with_resource_type(r.resource_type)
                    .with_resource_name(r.resource_name.clone());
            let outcome = match changes {
                Err(e) => Err((errors::admin_error_code(&e), e.to_string())),
                Ok(changes) => broker
                    .groups()
                    .alter_group_configs(&r.resource_name, changes, false, validate_only)
                    .await
                    .map_err(|e| (e.code(), e.to_string())),
            };
            group_answers.push(match outcome {
                Ok(()) => {
                    if !validate_only {
                        tracing::info!(group = %&*r.resource_name, "group configs altered");
                    }
                    response
                }
                Err((code, message)) => response
                    .with_error_code(code)
                    .with_error_message(Some(str_bytes(message))),
            });
        }
        let mut other_answers = match rest {
            Some(rest) => match rest.await {
                Some(ResponseKind::IncrementalAlterConfigs(r)) => r.responses,
                _ => Vec::new(),
            },
            None => Vec::new(),
        }
        .into_iter();
        let mut group_answers = group_answers.into_iter();
        let responses = order
            .into_iter()
            .filter_map(|is_group| {
                if is_group {
                    group_answers.next()
                } else {
                    other_answers.next()
                }
            })
            .collect();
        Some(ResponseKind::IncrementalAlterConfigs(
            IncrementalAlterConfigsResponse::default().with_responses(responses),
        ))
    }
    .boxed()
}

pub fn alter(broker: &Arc<Broker>, req: AlterConfigsRequest) -> Answer {
    fresh(broker, req, alter_now)
}

fn incremental_alter_now(broker: &Arc<Broker>, req: IncrementalAlterConfigsRequest) -> Answer {
    let mut planned = Vec::with_capacity(req.resources.len());
    let responses = req
        .resources
        .into_iter()
        .map(|r| {
            let changes: Result<Vec<_>, AdminError> = r
                .configs
                .iter()
                .map(|c| match c.config_operation {
                    0 => Ok((c.name.to_string(), c.value.as_ref().map(|v| v.to_string()))),
                    1 => Ok((c.name.to_string(), None)),
                    op => Err(AdminError::NotAList {
                        op,
                        name: c.name.to_string(),
                    }),
                })
                .collect();
            let outcome = changes.and_then(|changes| {
                alter_topic(
                    broker,
                    r.resource_type,
                    &r.resource_name,
                    changes,
                    false,
                    req.validate_only,
                )
            });
            let response =
                incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                    .with_resource_type(r.resource_type)
                    .with_resource_name(r.resource_name);
            planned.push(plan(&response.resource_name, &outcome));
            match outcome {
                Ok(_) => response,
                Err(e) => response
                    .with_error_code(errors::admin_error_code(&e))
                    .with_error_message(Some(str_bytes(e.to_string()))),
            }
        })
        .collect();
    let response = IncrementalAlterConfigsResponse::default().with_responses(responses);
    answer(
        broker,
        response,
        planned,
        ResponseKind::IncrementalAlterConfigs,
    )
}

/// The change for the store, if any, of one resource's outcome.
fn plan(
    name: &StrBytes,
    outcome: &Result<Option<TopicConfig>, AdminError>,
) -> Option<(String, TopicConfig)> {
    let configs = outcome.as_ref().ok()?.as_ref()?;
    Some((name.to_string(), configs.clone()))
}

fn alter_now(broker: &Arc<Broker>, req: AlterConfigsRequest) -> Answer {
    let mut planned = Vec::with_capacity(req.resources.len());
    let responses = req
        .resources
        .into_iter()
        .map(|r| {
            let changes = r
                .configs
                .iter()
                .map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string())))
                .collect();
            let outcome = alter_topic(
                broker,
                r.resource_type,
                &r.resource_name,
                changes,
                true,
                req.validate_only,
            );
            let response = alter_configs_response::AlterConfigsResourceResponse::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name);
            planned.push(plan(&response.resource_name, &outcome));
            match outcome {
                Ok(_) => response,
                Err(e) => response
                    .with_error_code(errors::admin_error_code(&e))
                    .with_error_message(Some(str_bytes(e.to_string()))),
            }
        })
        .collect();
    let response = AlterConfigsResponse::default().with_responses(responses);
    answer(broker, response, planned, ResponseKind::AlterConfigs)
}
