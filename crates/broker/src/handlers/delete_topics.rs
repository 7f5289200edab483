//! DeleteTopics (by name, or by id from v6).

use sluice_protocol::kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use sluice_protocol::kafka_protocol::messages::{
    DeleteTopicsRequest, DeleteTopicsResponse, ResponseKind,
};

use super::{AdminError, Answer, after_sync, str_bytes, topic_name};
use crate::{Broker, errors};

pub fn handle(broker: &Broker, req: DeleteTopicsRequest, version: i16) -> Answer {
    // v0-5 list names; v6+ list (name or id) states.
    let targets: Vec<(Option<String>, uuid::Uuid)> = if version >= 6 {
        req.topics
            .into_iter()
            .map(|t| (t.name.map(|n| n.0.to_string()), t.topic_id))
            .collect()
    } else {
        req.topic_names
            .into_iter()
            .map(|n| (Some(n.0.to_string()), uuid::Uuid::nil()))
            .collect()
    };
    let responses = targets
        .into_iter()
        .map(|(name, id)| {
            let name = name.or_else(|| {
                broker
                    .topics()
                    .all()
                    .into_iter()
                    .find(|t| t.id == id)
                    .map(|t| t.name.clone())
            });
            let Some(name) = name else {
                return DeletableTopicResult::default()
                    .with_topic_id(id)
                    .with_error_code(errors::admin_error_code(&AdminError::UnknownTopicId(id)));
            };
            let id = broker.topics().get(&name).map_or(id, |t| t.id);
            let result = DeletableTopicResult::default()
                .with_name(Some(topic_name(&name)))
                .with_topic_id(id);
            match broker.topics().delete(&name) {
                Ok(()) => {
                    broker.groups().topic_deleted(&name);
                    result
                }
                Err(e) => result
                    .with_error_code(errors::topic_error_code(&e))
                    .with_error_message(Some(str_bytes(e.to_string()))),
            }
        })
        .collect();
    let response = DeleteTopicsResponse::default().with_responses(responses);
    after_sync(broker, response, ResponseKind::DeleteTopics)
}
