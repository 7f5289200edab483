//! Sluice's security library: who a client is (SASL authentication), what it may do (ACLs),
//! and the durable stores behind both. Pure library: no sockets, no broker types.
//!
//! Where it sits in the request flow:
//!
//! ```text
//! connection ── SaslHandshake / SaslAuthenticate bytes ──► ScramServer / authenticate_plain
//!                                                             │ reads credentials
//!                                                             ▼
//!                                                          UserStore  (DATA_DIR/security/users.json)
//! every request ── (principal, host, operation, resource) ──► Authorizer::authorize
//!                                                             │ ACL snapshot
//!                                                             ▼
//!                                                          Authorizer (DATA_DIR/security/acls.json)
//! ```
//!
//! Modules and key types:
//! - [`scram`]: SCRAM-SHA-256/512 server side (RFC 5802/7677) as a state machine
//!   ([`ScramServer`]), credentials ([`ScramCredential`]), and [`FakeCredentials`], which
//!   keeps unknown users indistinguishable from known ones until the proof fails.
//! - [`plain`]: SASL PLAIN (RFC 4616), checked against the stored SCRAM credential.
//! - [`users`]: [`UserStore`], the durable credential store (one credential per mechanism
//!   per user; passwords never stored).
//! - [`acl`]: Kafka's ACL model with Kafka's wire codes, CreateAcls validation, binding
//!   filters, and the [`Authorizer`] (index + super users + durable store).
//! - [`quotas`]: [`ClientQuotas`], Kafka's client quotas (byte rates and request time per
//!   user and client id) with their durable store and the usage they are measured against.
//! - [`SecurityError`]: the one error enum; refusals carry the Kafka error code to answer.
//!
//! Nothing here reads the clock or draws randomness on its own: nonces, salts and the
//! unknown-user secret come from an RNG the caller passes in, so tests are deterministic.
//! Every write API says what is durable when it returns; both stores rewrite their file
//! atomically (temp file, fsync, rename, fsync directory).

pub mod acl;
mod durable;
mod error;
pub mod plain;
pub mod quotas;
pub mod scram;
pub mod users;

pub use acl::{
    AccessControlEntry, AccessControlEntryFilter, AclBinding, AclBindingFilter, AclIndex,
    AclOperation, AclPermissionType, Authorizer, PatternType, Principal, ResourcePattern,
    ResourcePatternFilter, ResourceType,
};
pub use durable::SECURITY_DIR;
pub use error::{
    AclValidationError, AclValidationKind, AuthError, ILLEGAL_SASL_STATE, INVALID_REQUEST,
    RESOURCE_NOT_FOUND, SASL_AUTHENTICATION_FAILED, SecurityError, UNACCEPTABLE_CREDENTIAL,
    UNSUPPORTED_SASL_MECHANISM,
};
pub use plain::{PlainMessage, authenticate_plain, parse_plain};
pub use quotas::{
    ClientQuotas, QuotaEntity, QuotaError, QuotaFilter, QuotaKind, QuotaMatch, QuotaOp,
};
pub use scram::{
    CredentialInfo, CredentialSource, DEFAULT_ITERATIONS, FakeCredentials, ScramCredential,
    ScramMechanism, ScramServer, ScramState, ServerNonce,
};
pub use users::{CredentialChange, UserStore};
