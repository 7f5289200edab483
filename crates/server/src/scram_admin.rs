//! DescribeUserScramCredentials and AlterUserScramCredentials: Kafka's online path for SASL
//! users (`kafka-configs --bootstrap-server ... --alter --entity-type users --add-config
//! 'SCRAM-SHA-512=[password=...]'`), answered from the same user store the SASL listeners
//! read ([`Users`]).
//!
//! Kafka's tool salts on the client and sends the salt, the salted password and the
//! iterations; the password never reaches the broker. Results come one per user named, the
//! first problem of that user winning, and a user with a problem has none of its changes
//! applied; the others are written in one durable batch.
//!
//! Known gap until ACLs exist: any client that can connect (and, on a SASL listener, has
//! authenticated) may call these.

use std::collections::{HashMap, HashSet};

use sluice_protocol::kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use sluice_protocol::kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use sluice_protocol::kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};
use sluice_protocol::kafka_protocol::protocol::StrBytes;
use sluice_security::{
    CredentialChange, RESOURCE_NOT_FOUND, ScramCredential, ScramMechanism, UNACCEPTABLE_CREDENTIAL,
    UNSUPPORTED_SASL_MECHANISM,
};

use crate::sasl::Users;
#[cfg(test)]
use sluice_security::UserStore;

/// Kafka's DUPLICATE_RESOURCE: a user (or user and mechanism) named twice in one request.
const DUPLICATE_RESOURCE: i16 = 92;
/// Kafka's UNKNOWN_SERVER_ERROR: the store could not be written.
const UNKNOWN_SERVER_ERROR: i16 = -1;

/// Answers DescribeUserScramCredentials: mechanisms and iterations, never keys or salts.
/// No users named (null or empty) describes every user.
pub fn describe(
    users: &Users,
    request: &DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    let store = users.store();
    let names: Vec<String> = match &request.users {
        Some(named) if !named.is_empty() => named.iter().map(|u| u.name.to_string()).collect(),
        _ => store.list(),
    };
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for name in &names {
        *counts.entry(name.as_str()).or_default() += 1;
    }
    let mut answered = HashSet::new();
    let results = names
        .iter()
        .filter(|name| answered.insert(name.as_str()))
        .map(|name| {
            let result = DescribeUserScramCredentialsResult::default()
                .with_user(StrBytes::from_string(name.clone()));
            if counts[name.as_str()] > 1 {
                return result.with_error_code(DUPLICATE_RESOURCE).with_error_message(Some(
                    StrBytes::from_string(format!(
                        "Cannot describe SCRAM credentials for the same user twice in a single request: {name}"
                    )),
                ));
            }
            match store.describe(name) {
                Some(infos) if !infos.is_empty() => result.with_credential_infos(
                    infos
                        .iter()
                        .map(|i| {
                            CredentialInfo::default()
                                .with_mechanism(i.mechanism.kafka_type())
                                .with_iterations(i.iterations as i32)
                        })
                        .collect(),
                ),
                _ => result.with_error_code(RESOURCE_NOT_FOUND).with_error_message(Some(
                    StrBytes::from_string(format!(
                        "Attempt to describe a user credential that does not exist: {name}"
                    )),
                )),
            }
        })
        .collect();
    DescribeUserScramCredentialsResponse::default().with_results(results)
}

/// Answers AlterUserScramCredentials. Durability: when the response is built, the changes
/// of every user answered without error are in the user file, fsynced.
pub fn alter(
    users: &Users,
    request: &AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    // Changes `sluice user` made since the last poll must not be overwritten.
    users.reload_if_changed();
    let store = users.store();
    let mut order: Vec<String> = Vec::new();
    let mut errors: HashMap<String, (i16, String)> = HashMap::new();
    let mut changes: Vec<CredentialChange> = Vec::new();
    let mut seen: HashMap<(String, i8), usize> = HashMap::new();
    let named = request
        .deletions
        .iter()
        .map(|d| (d.name.to_string(), d.mechanism))
        .chain(
            request
                .upsertions
                .iter()
                .map(|u| (u.name.to_string(), u.mechanism)),
        );
    for (name, mechanism) in named {
        if !order.contains(&name) {
            order.push(name.clone());
        }
        *seen.entry((name, mechanism)).or_default() += 1;
    }
    let mut fail = |name: &str, code: i16, message: String| {
        errors.entry(name.to_owned()).or_insert((code, message));
    };
    for ((name, _), count) in &seen {
        if *count > 1 {
            fail(
                name,
                DUPLICATE_RESOURCE,
                "A user credential cannot be altered twice in the same request".to_owned(),
            );
        }
    }
    let check = |name: &str, mechanism: i8| -> Result<ScramMechanism, (i16, String)> {
        if name.is_empty() {
            return Err((
                UNACCEPTABLE_CREDENTIAL,
                "Username must not be empty".to_owned(),
            ));
        }
        ScramMechanism::from_kafka_type(mechanism).ok_or((
            UNSUPPORTED_SASL_MECHANISM,
            "Unknown SCRAM mechanism".to_owned(),
        ))
    };
    for deletion in &request.deletions {
        let name = deletion.name.as_str();
        match check(name, deletion.mechanism) {
            Err((code, message)) => fail(name, code, message),
            Ok(mechanism) if store.credential(name, mechanism).is_none() => fail(
                name,
                RESOURCE_NOT_FOUND,
                "Attempt to delete a user credential that does not exist".to_owned(),
            ),
            Ok(mechanism) => changes.push(CredentialChange::Delete {
                username: name.to_owned(),
                mechanism,
            }),
        }
    }
    for upsertion in &request.upsertions {
        let name = upsertion.name.as_str();
        let credential = check(name, upsertion.mechanism).and_then(|mechanism| {
            let iterations = u32::try_from(upsertion.iterations).unwrap_or(0);
            ScramCredential::from_salted_password(
                mechanism,
                &upsertion.salt,
                &upsertion.salted_password,
                iterations,
            )
            .map_err(|e| {
                (
                    e.kafka_error_code().unwrap_or(UNACCEPTABLE_CREDENTIAL),
                    e.to_string(),
                )
            })
        });
        match credential {
            Err((code, message)) => fail(name, code, message),
            Ok(credential) => changes.push(CredentialChange::Upsert {
                username: name.to_owned(),
                credential,
            }),
        }
    }
    changes.retain(|c| {
        let name = match c {
            CredentialChange::Upsert { username, .. }
            | CredentialChange::Delete { username, .. } => username,
        };
        !errors.contains_key(name)
    });
    if !changes.is_empty()
        && let Err(e) = store.alter(&changes)
    {
        tracing::error!(error = %e, "AlterUserScramCredentials: cannot write the user file");
        for change in &changes {
            let (CredentialChange::Upsert { username, .. }
            | CredentialChange::Delete { username, .. }) = change;
            errors.entry(username.clone()).or_insert((
                UNKNOWN_SERVER_ERROR,
                "cannot write the user file".to_owned(),
            ));
        }
    }
    let results = order
        .into_iter()
        .map(|name| {
            let (code, message) = match errors.remove(&name) {
                Some((code, message)) => (code, Some(StrBytes::from_string(message))),
                None => (0, None),
            };
            AlterUserScramCredentialsResult::default()
                .with_user(StrBytes::from_string(name))
                .with_error_code(code)
                .with_error_message(message)
        })
        .collect();
    AlterUserScramCredentialsResponse::default().with_results(results)
}

/// The answer to an AlterUserScramCredentials whose change could not be made (cluster mode:
/// the shared user file could not be read): REQUEST_TIMED_OUT, retriable, for each user named.
pub fn not_made(users: Vec<StrBytes>, reason: &str) -> AlterUserScramCredentialsResponse {
    tracing::error!(error = %reason, "SCRAM credential change not made");
    let unique: std::collections::BTreeSet<StrBytes> = users.into_iter().collect();
    let results = unique
        .into_iter()
        .map(|user| {
            AlterUserScramCredentialsResult::default()
                .with_user(user)
                .with_error_code(
                    sluice_protocol::kafka_protocol::ResponseError::RequestTimedOut.code(),
                )
                .with_error_message(Some(StrBytes::from_string(format!(
                    "the credentials were not changed: {reason}"
                ))))
        })
        .collect();
    AlterUserScramCredentialsResponse::default().with_results(results)
}

/// Turns each success of an AlterUserScramCredentials answer into KAFKA_STORAGE_ERROR: the
/// change is in the local user file but could not be made durable in the metadata journal
/// (object-storage mode); it is recorded again with the next change.
pub fn not_durable(response: &mut AlterUserScramCredentialsResponse, reason: &str) {
    tracing::error!(error = %reason, "SCRAM credential change not recorded in the metadata journal");
    for r in &mut response.results {
        if r.error_code == 0 {
            r.error_code = sluice_protocol::kafka_protocol::ResponseError::KafkaStorageError.code();
            r.error_message = Some(StrBytes::from_string(format!(
                "the change is made on this broker but could not be made durable in storage: {reason}"
            )));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use sluice_protocol::kafka_protocol::messages::alter_user_scram_credentials_request::{
        ScramCredentialDeletion, ScramCredentialUpsertion,
    };
    use sluice_protocol::kafka_protocol::messages::describe_user_scram_credentials_request::UserName;

    fn name(n: &'static str) -> StrBytes {
        StrBytes::from_static_str(n)
    }

    /// What `kafka-configs --add-config 'SCRAM-SHA-512=[password=...]'` sends.
    fn upsertion(
        user: &'static str,
        mechanism: i8,
        password: &str,
        iterations: i32,
    ) -> ScramCredentialUpsertion {
        let salt = b"a salt from the client".to_vec();
        let salted = ScramMechanism::from_kafka_type(mechanism)
            .map(|m| m.salted_password(password.as_bytes(), &salt, iterations.max(1) as u32))
            .unwrap_or_default();
        ScramCredentialUpsertion::default()
            .with_name(name(user))
            .with_mechanism(mechanism)
            .with_iterations(iterations)
            .with_salt(Bytes::from(salt))
            .with_salted_password(Bytes::from(salted))
    }

    fn codes(response: &AlterUserScramCredentialsResponse) -> Vec<(String, i16)> {
        response
            .results
            .iter()
            .map(|r| (r.user.to_string(), r.error_code))
            .collect()
    }

    #[test]
    fn alter_with_a_salted_credential_then_describe_and_log_in() {
        let dir = tempfile::tempdir().unwrap();
        let users = Users::open(dir.path()).unwrap();
        let request = AlterUserScramCredentialsRequest::default().with_upsertions(vec![
            upsertion("alice", 2, "secret", 8192),
            upsertion("bob", 1, "pw", 100),
            upsertion("carol", 9, "pw", 4096),
        ]);
        let response = alter(&users, &request);
        assert_eq!(
            codes(&response),
            [
                ("alice".to_owned(), 0),
                ("bob".to_owned(), UNACCEPTABLE_CREDENTIAL),
                ("carol".to_owned(), UNSUPPORTED_SASL_MECHANISM),
            ]
        );
        // Stored durably, and the password the client salted logs in.
        let store = UserStore::open(dir.path()).unwrap();
        let credential = store.credential("alice", ScramMechanism::Sha512).unwrap();
        assert!(credential.verify_password(b"secret"));
        assert!(!credential.verify_password(b"other"));
        assert!(store.credential("bob", ScramMechanism::Sha256).is_none());

        let described = describe(
            &users,
            &DescribeUserScramCredentialsRequest::default().with_users(Some(vec![
                UserName::default().with_name(name("alice")),
                UserName::default().with_name(name("nobody")),
            ])),
        );
        let alice = &described.results[0];
        assert_eq!((alice.error_code, alice.credential_infos.len()), (0, 1));
        assert_eq!(alice.credential_infos[0].mechanism, 2);
        assert_eq!(alice.credential_infos[0].iterations, 8192);
        assert_eq!(described.results[1].error_code, RESOURCE_NOT_FOUND);
        // No users named: every user.
        let all = describe(&users, &DescribeUserScramCredentialsRequest::default());
        assert_eq!(all.results.len(), 1);

        // Deleting: a missing credential, a duplicate, then the real one.
        let delete = |user: &'static str, mechanism: i8| {
            ScramCredentialDeletion::default()
                .with_name(name(user))
                .with_mechanism(mechanism)
        };
        let response = alter(
            &users,
            &AlterUserScramCredentialsRequest::default().with_deletions(vec![
                delete("alice", 1),
                delete("dave", 2),
                delete("dave", 2),
            ]),
        );
        assert_eq!(
            codes(&response),
            [
                ("alice".to_owned(), RESOURCE_NOT_FOUND),
                ("dave".to_owned(), DUPLICATE_RESOURCE),
            ]
        );
        let response = alter(
            &users,
            &AlterUserScramCredentialsRequest::default().with_deletions(vec![delete("alice", 2)]),
        );
        assert_eq!(codes(&response), [("alice".to_owned(), 0)]);
        assert!(users.store().list().is_empty());
    }
}
