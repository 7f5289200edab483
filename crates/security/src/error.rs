//! The crate's one error enum, [`SecurityError`], and the two kinds of refusal that are
//! answers to a client rather than faults: [`AuthError`] (a SASL exchange failed) and
//! [`AclValidationError`] (a CreateAcls/DeleteAcls element was refused).
//!
//! Every variant carries what a log line needs and nothing secret: no password, salted
//! password, key or proof ever appears in a message. Each refusal names the Kafka error code
//! the broker should answer with (`kafka_error_code`), so the broker's one error map stays
//! a thin table.

use std::io;
use std::path::PathBuf;

/// Kafka `ILLEGAL_SASL_STATE`.
pub const ILLEGAL_SASL_STATE: i16 = 34;
/// Kafka `SASL_AUTHENTICATION_FAILED`.
pub const SASL_AUTHENTICATION_FAILED: i16 = 58;
/// Kafka `INVALID_REQUEST`.
pub const INVALID_REQUEST: i16 = 42;
/// Kafka `UNSUPPORTED_SASL_MECHANISM`.
pub const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
/// Kafka `UNACCEPTABLE_CREDENTIAL` (AlterUserScramCredentials).
pub const UNACCEPTABLE_CREDENTIAL: i16 = 93;
/// Kafka `RESOURCE_NOT_FOUND` (AlterUserScramCredentials deleting a missing credential).
pub const RESOURCE_NOT_FOUND: i16 = 91;

/// Everything that can go wrong in this crate.
#[derive(Debug, thiserror::Error)]
pub enum SecurityError {
    /// A file-system call failed; `op` says which one, `path` on what.
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A store file exists but is not valid JSON of the expected shape.
    #[error("{path} is corrupt (not valid JSON of the expected shape): {source}")]
    Corrupt {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// A store file parsed as JSON but holds a value that cannot be right.
    #[error("{path} is corrupt: {reason}")]
    InvalidStore { path: PathBuf, reason: String },
    /// A credential offered for storage was refused (Kafka `UNACCEPTABLE_CREDENTIAL`).
    #[error("unacceptable credential: {0}")]
    UnacceptableCredential(String),
    /// A mechanism name that is not SCRAM-SHA-256 or SCRAM-SHA-512.
    #[error("unsupported SASL mechanism {0:?}")]
    UnsupportedMechanism(String),
    /// A SASL exchange failed.
    #[error(transparent)]
    Auth(#[from] AuthError),
    /// An ACL binding or filter was refused.
    #[error(transparent)]
    Acl(#[from] AclValidationError),
}

impl SecurityError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        SecurityError::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// The Kafka error code a broker should answer with, where the error is the client's
    /// doing; `None` for server-side faults (answer `UNKNOWN_SERVER_ERROR` and log).
    pub fn kafka_error_code(&self) -> Option<i16> {
        match self {
            SecurityError::UnacceptableCredential(_) => Some(UNACCEPTABLE_CREDENTIAL),
            SecurityError::UnsupportedMechanism(_) => Some(UNSUPPORTED_SASL_MECHANISM),
            SecurityError::Auth(e) => Some(e.kafka_error_code()),
            SecurityError::Acl(e) => Some(e.kafka_error_code()),
            SecurityError::Io { .. }
            | SecurityError::Corrupt { .. }
            | SecurityError::InvalidStore { .. } => None,
        }
    }
}

/// Why a SASL exchange (SCRAM or PLAIN) failed. The message names the failed check, never
/// a secret, and never whether the user exists: an unknown user and a wrong password both
/// end in [`AuthError::BadCredentials`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// The message does not follow the mechanism's grammar; the text says where.
    #[error("malformed {message} message: {reason}")]
    Malformed {
        message: &'static str,
        reason: String,
    },
    /// The client asked for channel binding (`p=`), which this server does not offer.
    #[error("channel binding (p=) is not supported")]
    ChannelBindingNotSupported,
    /// The client sent the reserved `m=` attribute, which RFC 5802 says must fail.
    #[error("the reserved mandatory extension attribute (m=) is not supported")]
    MandatoryExtension,
    /// The client asked for delegation-token authentication (`tokenauth=true`).
    #[error("delegation token authentication (tokenauth) is not supported")]
    TokenAuthNotSupported,
    /// The authorization id differs from the authenticated user name.
    #[error("authorization id differs from the user name")]
    AuthzidMismatch,
    /// The `c=` value of client-final is not the base64 of the client-first gs2 header.
    #[error("channel binding in client-final does not match the gs2 header of client-first")]
    ChannelBindingMismatch,
    /// The nonce of client-final is not the combined nonce sent in server-first.
    #[error("nonce in client-final does not match the nonce of server-first")]
    NonceMismatch,
    /// Unknown user or wrong password (deliberately not told apart).
    #[error("authentication failed: invalid user credentials")]
    BadCredentials,
    /// A message arrived in a state that does not expect it (e.g. after the exchange ended).
    #[error("unexpected {0} message in this state of the exchange")]
    InvalidState(&'static str),
}

impl AuthError {
    pub(crate) fn malformed(message: &'static str, reason: impl Into<String>) -> Self {
        AuthError::Malformed {
            message,
            reason: reason.into(),
        }
    }

    /// The Kafka error code for a SaslAuthenticate response carrying this failure.
    pub fn kafka_error_code(&self) -> i16 {
        match self {
            AuthError::InvalidState(_) => ILLEGAL_SASL_STATE,
            _ => SASL_AUTHENTICATION_FAILED,
        }
    }
}

/// Why Kafka would refuse an ACL binding in CreateAcls, or a filter in DeleteAcls.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct AclValidationError {
    /// Which rule was broken.
    pub kind: AclValidationKind,
    /// A message in the spirit of Kafka's, for the response's `error_message`.
    pub message: String,
}

/// The rule an ACL binding or filter broke. All map to `INVALID_REQUEST` (42) today; the
/// kind is kept so a broker can tell them apart in logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AclValidationKind {
    /// An element decoded as UNKNOWN (a code this version does not know). Kafka refuses
    /// these while parsing the request; answering `INVALID_REQUEST` per element is the
    /// gentler equivalent.
    UnknownElement,
    /// A filter-only value (ANY, MATCH) where a concrete value is required.
    NotConcrete,
    /// An empty resource name.
    EmptyResourceName,
    /// A CLUSTER resource not named `kafka-cluster`.
    InvalidClusterName,
    /// A principal that is not of the form `Type:name`.
    InvalidPrincipal,
}

impl AclValidationError {
    pub(crate) fn new(kind: AclValidationKind, message: impl Into<String>) -> Self {
        AclValidationError {
            kind,
            message: message.into(),
        }
    }

    /// The Kafka error code for this element's result.
    pub fn kafka_error_code(&self) -> i16 {
        INVALID_REQUEST
    }
}
