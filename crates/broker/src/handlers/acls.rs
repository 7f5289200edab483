//! CreateAcls, DescribeAcls and DeleteAcls over the broker's [`Authorizer`], so `kafka-acls`
//! and AdminClient manage Sluice's ACLs. Without an authorizer (`--authorizer` not `acl`) they
//! answer SECURITY_DISABLED, as Kafka does without `authorizer.class.name`. Who may call them
//! is checked before (`crate::authz`: ALTER or DESCRIBE on the cluster).
//!
//! Writes rewrite the ACL file and fsync it: they run on the blocking pool. In object-storage
//! mode the new file is then recorded in the metadata journal, and the answer waits until it
//! is in the bucket ([`Broker::record_file`]); if it cannot be, each success becomes
//! KAFKA_STORAGE_ERROR (the change stands locally and is recorded with the next one).

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::FutureExt;
use sluice_protocol::kafka_protocol::ResponseError;
use sluice_protocol::kafka_protocol::messages::create_acls_response::AclCreationResult;
use sluice_protocol::kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use sluice_protocol::kafka_protocol::messages::describe_acls_response::{
    AclDescription, DescribeAclsResource,
};
use sluice_protocol::kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse, ResponseKind,
};
use sluice_protocol::kafka_protocol::protocol::StrBytes;
use sluice_security::{
    AccessControlEntry, AccessControlEntryFilter, AclBinding, AclBindingFilter, AclOperation,
    AclPermissionType, PatternType, ResourcePattern, ResourcePatternFilter, ResourceType,
    SecurityError,
};

use super::{Answer, str_bytes};
use crate::Broker;
use crate::shared_files::Changed;

const SECURITY_DISABLED: i16 = ResponseError::SecurityDisabled.code();
const UNKNOWN_SERVER_ERROR: i16 = ResponseError::UnknownServerError.code();
const KAFKA_STORAGE_ERROR: i16 = ResponseError::KafkaStorageError.code();
const REQUEST_TIMED_OUT: i16 = ResponseError::RequestTimedOut.code();
const NO_AUTHORIZER: &str =
    "no authorizer is configured on this broker (sluice serve --authorizer acl)";

fn binding(
    c: &sluice_protocol::kafka_protocol::messages::create_acls_request::AclCreation,
) -> AclBinding {
    AclBinding::new(
        ResourcePattern::new(
            ResourceType::from_code(c.resource_type),
            c.resource_name.as_str(),
            PatternType::from_code(c.resource_pattern_type),
        ),
        AccessControlEntry::new(
            c.principal.as_str(),
            c.host.as_str(),
            AclOperation::from_code(c.operation),
            AclPermissionType::from_code(c.permission_type),
        ),
    )
}

#[allow(clippy::too_many_arguments)]
fn filter(
    resource_type: i8,
    name: Option<&StrBytes>,
    pattern_type: i8,
    principal: Option<&StrBytes>,
    host: Option<&StrBytes>,
    operation: i8,
    permission: i8,
) -> AclBindingFilter {
    AclBindingFilter::new(
        ResourcePatternFilter::new(
            ResourceType::from_code(resource_type),
            name.map(|n| n.as_str()),
            PatternType::from_code(pattern_type),
        ),
        AccessControlEntryFilter::new(
            principal.map(|p| p.as_str()),
            host.map(|h| h.as_str()),
            AclOperation::from_code(operation),
            AclPermissionType::from_code(permission),
        ),
    )
}

/// The code and message for a write that failed on the server's side (the ACL file).
fn server_error(e: &SecurityError) -> (i16, Option<StrBytes>) {
    tracing::error!(error = %e, "ACL change not made");
    (
        e.kafka_error_code().unwrap_or(UNKNOWN_SERVER_ERROR),
        Some(str_bytes(format!(
            "the ACL change could not be stored: {e}"
        ))),
    )
}

pub fn create(broker: &Arc<Broker>, req: CreateAclsRequest) -> Answer {
    let Some(authorizer) = broker.authorizer().cloned() else {
        let results = req
            .creations
            .iter()
            .map(|_| {
                AclCreationResult::default()
                    .with_error_code(SECURITY_DISABLED)
                    .with_error_message(Some(StrBytes::from_static_str(NO_AUTHORIZER)))
            })
            .collect();
        return ready(ResponseKind::CreateAcls(
            CreateAclsResponse::default().with_results(results),
        ));
    };
    let bindings: Vec<AclBinding> = req.creations.iter().map(binding).collect();
    let count = bindings.len();
    let path = authorizer.path().to_owned();
    let change = move || {
        let results: Vec<AclCreationResult> = match authorizer.create(&bindings) {
            Ok(results) => results
                .into_iter()
                .zip(&bindings)
                .map(|(r, b)| match r {
                    Ok(()) => {
                        tracing::info!(acl = %describe_binding(b), "ACL created");
                        AclCreationResult::default()
                    }
                    Err(e) => AclCreationResult::default()
                        .with_error_code(e.kafka_error_code())
                        .with_error_message(Some(str_bytes(e.message))),
                })
                .collect(),
            Err(e) => {
                let (code, message) = server_error(&e);
                bindings
                    .iter()
                    .map(|_| {
                        AclCreationResult::default()
                            .with_error_code(code)
                            .with_error_message(message.clone())
                    })
                    .collect()
            }
        };
        let changed = results.iter().any(|r| r.error_code == 0);
        (
            ResponseKind::CreateAcls(CreateAclsResponse::default().with_results(results)),
            changed,
        )
    };
    let not_made = move |reason: String| {
        let message = Some(str_bytes(format!("the ACLs were not changed: {reason}")));
        let results = (0..count)
            .map(|_| {
                AclCreationResult::default()
                    .with_error_code(REQUEST_TIMED_OUT)
                    .with_error_message(message.clone())
            })
            .collect();
        ResponseKind::CreateAcls(CreateAclsResponse::default().with_results(results))
    };
    apply(broker, &path, Arc::new(change), not_made)
}

pub fn describe(broker: &Broker, req: DescribeAclsRequest) -> Answer {
    let Some(authorizer) = broker.authorizer() else {
        return ready(ResponseKind::DescribeAcls(
            DescribeAclsResponse::default()
                .with_error_code(SECURITY_DISABLED)
                .with_error_message(Some(StrBytes::from_static_str(NO_AUTHORIZER))),
        ));
    };
    let f = filter(
        req.resource_type_filter,
        req.resource_name_filter.as_ref(),
        req.pattern_type_filter,
        req.principal_filter.as_ref(),
        req.host_filter.as_ref(),
        req.operation,
        req.permission_type,
    );
    let response = match authorizer.describe(&f) {
        Err(e) => DescribeAclsResponse::default()
            .with_error_code(e.kafka_error_code())
            .with_error_message(Some(str_bytes(e.message))),
        Ok(bindings) => DescribeAclsResponse::default().with_resources(by_resource(bindings)),
    };
    ready(ResponseKind::DescribeAcls(response))
}

pub fn delete(broker: &Arc<Broker>, req: DeleteAclsRequest) -> Answer {
    let Some(authorizer) = broker.authorizer().cloned() else {
        let results = req
            .filters
            .iter()
            .map(|_| {
                DeleteAclsFilterResult::default()
                    .with_error_code(SECURITY_DISABLED)
                    .with_error_message(Some(StrBytes::from_static_str(NO_AUTHORIZER)))
            })
            .collect();
        return ready(ResponseKind::DeleteAcls(
            DeleteAclsResponse::default().with_filter_results(results),
        ));
    };
    let filters: Vec<AclBindingFilter> = req
        .filters
        .iter()
        .map(|f| {
            filter(
                f.resource_type_filter,
                f.resource_name_filter.as_ref(),
                f.pattern_type_filter,
                f.principal_filter.as_ref(),
                f.host_filter.as_ref(),
                f.operation,
                f.permission_type,
            )
        })
        .collect();
    let count = filters.len();
    let path = authorizer.path().to_owned();
    let change = move || {
        let results: Vec<DeleteAclsFilterResult> = match authorizer.delete(&filters) {
            Ok(results) => results
                .into_iter()
                .map(|r| match r {
                    Ok(deleted) => DeleteAclsFilterResult::default().with_matching_acls(
                        deleted
                            .iter()
                            .map(|b| {
                                tracing::info!(acl = %describe_binding(b), "ACL deleted");
                                matching(b)
                            })
                            .collect(),
                    ),
                    Err(e) => DeleteAclsFilterResult::default()
                        .with_error_code(e.kafka_error_code())
                        .with_error_message(Some(str_bytes(e.message))),
                })
                .collect(),
            Err(e) => {
                let (code, message) = server_error(&e);
                filters
                    .iter()
                    .map(|_| {
                        DeleteAclsFilterResult::default()
                            .with_error_code(code)
                            .with_error_message(message.clone())
                    })
                    .collect()
            }
        };
        let changed = results.iter().any(|r| !r.matching_acls.is_empty());
        (
            ResponseKind::DeleteAcls(DeleteAclsResponse::default().with_filter_results(results)),
            changed,
        )
    };
    let not_made = move |reason: String| {
        let message = Some(str_bytes(format!("the ACLs were not changed: {reason}")));
        let results = (0..count)
            .map(|_| {
                DeleteAclsFilterResult::default()
                    .with_error_code(REQUEST_TIMED_OUT)
                    .with_error_message(message.clone())
            })
            .collect();
        ResponseKind::DeleteAcls(DeleteAclsResponse::default().with_filter_results(results))
    };
    apply(broker, &path, Arc::new(change), not_made)
}

/// DescribeAcls groups the entries by resource pattern.
fn by_resource(bindings: Vec<AclBinding>) -> Vec<DescribeAclsResource> {
    let mut grouped: BTreeMap<ResourcePattern, Vec<AccessControlEntry>> = BTreeMap::new();
    for b in bindings {
        grouped.entry(b.pattern).or_default().push(b.entry);
    }
    grouped
        .into_iter()
        .map(|(pattern, entries)| {
            DescribeAclsResource::default()
                .with_resource_type(pattern.resource_type.code())
                .with_resource_name(str_bytes(pattern.name))
                .with_pattern_type(pattern.pattern_type.code())
                .with_acls(
                    entries
                        .into_iter()
                        .map(|e| {
                            AclDescription::default()
                                .with_principal(str_bytes(e.principal))
                                .with_host(str_bytes(e.host))
                                .with_operation(e.operation.code())
                                .with_permission_type(e.permission.code())
                        })
                        .collect(),
                )
        })
        .collect()
}

fn matching(b: &AclBinding) -> DeleteAclsMatchingAcl {
    DeleteAclsMatchingAcl::default()
        .with_resource_type(b.pattern.resource_type.code())
        .with_resource_name(str_bytes(b.pattern.name.clone()))
        .with_pattern_type(b.pattern.pattern_type.code())
        .with_principal(str_bytes(b.entry.principal.clone()))
        .with_host(str_bytes(b.entry.host.clone()))
        .with_operation(b.entry.operation.code())
        .with_permission_type(b.entry.permission.code())
}

/// One line for the log: `ALLOW User:alice from * READ on TOPIC orders (LITERAL)`.
pub fn describe_binding(b: &AclBinding) -> String {
    format!(
        "{} {} from {} {} on {} {} ({})",
        b.entry.permission,
        b.entry.principal,
        b.entry.host,
        b.entry.operation,
        b.pattern.resource_type,
        b.pattern.name,
        b.pattern.pattern_type
    )
}

fn ready(response: ResponseKind) -> Answer {
    futures::future::ready(Some(response)).boxed()
}

/// Runs an ACL file change and makes it durable as the storage mode keeps metadata
/// (`Broker::change_security_file`); a change made but not durable turns each success into
/// KAFKA_STORAGE_ERROR, one not made answers `not_made` (a retriable error per item).
fn apply(
    broker: &Arc<Broker>,
    path: &std::path::Path,
    change: crate::shared_files::Change<ResponseKind>,
    not_made: impl FnOnce(String) -> ResponseKind + Send + 'static,
) -> Answer {
    let changing = broker.change_security_file(path, change);
    async move {
        let (mut response, reason) = match changing.await {
            Changed::Durable(response) => return Some(response),
            Changed::NotMade(reason) => {
                tracing::error!(error = %reason, "ACL change not made");
                return Some(not_made(reason));
            }
            Changed::NotDurable(response, reason) => (response, reason),
        };
        tracing::error!(error = %reason, "ACL change not durable beyond this broker");
        let message = Some(str_bytes(format!(
            "the ACL change is made on this broker but could not be made durable in storage: {reason}"
        )));
        let failed = |code: &mut i16, text: &mut Option<StrBytes>| {
            if *code == 0 {
                (*code, *text) = (KAFKA_STORAGE_ERROR, message.clone());
            }
        };
        match &mut response {
            ResponseKind::CreateAcls(r) => r
                .results
                .iter_mut()
                .for_each(|r| failed(&mut r.error_code, &mut r.error_message)),
            ResponseKind::DeleteAcls(r) => r
                .filter_results
                .iter_mut()
                .for_each(|r| failed(&mut r.error_code, &mut r.error_message)),
            _ => {}
        }
        Some(response)
    }
    .boxed()
}
