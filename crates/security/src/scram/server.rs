//! The server side of one SCRAM exchange as an explicit state machine:
//!
//! ```text
//! AwaitingClientFirst --client_first ok--> AwaitingClientFinal --client_final ok--> Authenticated
//!         |                                        |
//!         +------------- any error ----------------+--------------------------------> Failed
//! ```
//!
//! A failed or finished exchange refuses further messages with
//! [`AuthError::InvalidState`]; the connection should be closed after a failure, as Kafka
//! does. The server nonce is passed in ([`ServerNonce`], drawn from a caller's RNG), so
//! tests can replay RFC 7677's exchange byte for byte.

use std::fmt;

use rand::RngCore;
use subtle::ConstantTimeEq;

use super::messages::{base64_encode, parse_client_final, parse_client_first, valid_nonce};
use super::{FakeCredentials, ScramCredential, ScramMechanism};
use crate::error::AuthError;

/// Where credentials come from: the [`UserStore`](crate::UserStore), or a closure in tests.
pub trait CredentialSource {
    /// The credential of `username` for `mechanism`, if the user has one.
    fn scram_credential(
        &self,
        username: &str,
        mechanism: ScramMechanism,
    ) -> Option<ScramCredential>;
}

impl<F> CredentialSource for F
where
    F: Fn(&str, ScramMechanism) -> Option<ScramCredential>,
{
    fn scram_credential(
        &self,
        username: &str,
        mechanism: ScramMechanism,
    ) -> Option<ScramCredential> {
        self(username, mechanism)
    }
}

/// The server's half of the combined nonce: printable ASCII without `,`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerNonce(String);

impl ServerNonce {
    /// Bytes of randomness in a generated nonce (192 bits).
    pub const RANDOM_BYTES: usize = 24;

    /// A fresh nonce: [`Self::RANDOM_BYTES`] random bytes, base64-encoded.
    pub fn generate(rng: &mut impl RngCore) -> Self {
        let mut bytes = [0u8; Self::RANDOM_BYTES];
        rng.fill_bytes(&mut bytes);
        ServerNonce(base64_encode(&bytes))
    }

    /// A given nonce (tests, or a caller with its own generator); `None` if it holds a
    /// character a SCRAM nonce may not.
    pub fn new(nonce: impl Into<String>) -> Option<Self> {
        let nonce = nonce.into();
        valid_nonce(&nonce).then_some(ServerNonce(nonce))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The public view of where an exchange stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScramState {
    AwaitingClientFirst,
    AwaitingClientFinal,
    Authenticated,
    Failed,
}

enum State {
    AwaitingClientFirst,
    AwaitingClientFinal(Box<Pending>),
    Authenticated { username: String },
    Failed,
}

/// What server-first committed to, kept for checking client-final.
struct Pending {
    username: String,
    known_user: bool,
    credential: ScramCredential,
    gs2_header: String,
    combined_nonce: String,
    /// `client-first-bare "," server-first ","`; client-final-without-proof is appended.
    auth_message_prefix: String,
}

/// One server-side SCRAM exchange (one per connection authentication).
pub struct ScramServer {
    mechanism: ScramMechanism,
    fake: FakeCredentials,
    state: State,
    /// Accept a client-final nonce that merely ends with the combined nonce (see
    /// [`ScramServer::accept_nonce_suffix`]).
    nonce_suffix: bool,
}

impl fmt::Debug for ScramServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramServer")
            .field("mechanism", &self.mechanism)
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

impl ScramServer {
    /// A new exchange for `mechanism`. `fake` is the process-wide secret that gives unknown
    /// users a stable fake salt (see [`FakeCredentials`]).
    pub fn new(mechanism: ScramMechanism, fake: FakeCredentials) -> Self {
        ScramServer {
            mechanism,
            fake,
            state: State::AwaitingClientFirst,
            nonce_suffix: false,
        }
    }

    /// Checks the nonce of client-final the way Apache Kafka's broker does: it must *end
    /// with* the combined nonce of server-first, rather than equal it. librdkafka (up to at
    /// least 2.x) sends its client nonce followed by the whole combined nonce, and Kafka
    /// accepts that; a broker that wants those clients must too. The nonce still has to
    /// carry this exchange's server nonce, and the proof still covers the message as sent,
    /// so replay protection is unchanged. Off by default (RFC 5802's strict equality).
    pub fn accept_nonce_suffix(mut self) -> Self {
        self.nonce_suffix = true;
        self
    }

    pub fn mechanism(&self) -> ScramMechanism {
        self.mechanism
    }

    pub fn state(&self) -> ScramState {
        match self.state {
            State::AwaitingClientFirst => ScramState::AwaitingClientFirst,
            State::AwaitingClientFinal(_) => ScramState::AwaitingClientFinal,
            State::Authenticated { .. } => ScramState::Authenticated,
            State::Failed => ScramState::Failed,
        }
    }

    /// The authenticated user name, once the exchange has succeeded.
    pub fn authenticated_user(&self) -> Option<&str> {
        match &self.state {
            State::Authenticated { username } => Some(username),
            _ => None,
        }
    }

    /// Handles client-first and returns server-first (`r=...,s=...,i=...`).
    ///
    /// Refuses channel binding, `m=`, `tokenauth=true`, an authzid other than the user
    /// name, and malformed input. An unknown user gets a normal-looking server-first.
    pub fn client_first(
        &mut self,
        message: &[u8],
        credentials: &impl CredentialSource,
        nonce: ServerNonce,
    ) -> Result<Vec<u8>, AuthError> {
        if !matches!(self.state, State::AwaitingClientFirst) {
            self.state = State::Failed;
            return Err(AuthError::InvalidState("client-first"));
        }
        self.state = State::Failed;
        let first = parse_client_first(message)?;
        if first
            .authzid
            .as_deref()
            .is_some_and(|authzid| authzid != first.username)
        {
            return Err(AuthError::AuthzidMismatch);
        }
        let (credential, known_user) =
            match credentials.scram_credential(&first.username, self.mechanism) {
                Some(credential) if credential.mechanism == self.mechanism => (credential, true),
                _ => (self.fake.credential(self.mechanism, &first.username), false),
            };
        let combined_nonce = format!("{}{}", first.nonce, nonce.as_str());
        let server_first = format!(
            "r={combined_nonce},s={},i={}",
            base64_encode(&credential.salt),
            credential.iterations
        );
        let auth_message_prefix = format!("{},{server_first},", first.bare);
        self.state = State::AwaitingClientFinal(Box::new(Pending {
            username: first.username,
            known_user,
            credential,
            gs2_header: first.gs2_header.to_owned(),
            combined_nonce,
            auth_message_prefix,
        }));
        Ok(server_first.into_bytes())
    }

    /// Handles client-final and returns server-final (`v=signature`).
    ///
    /// Checks, in order: grammar, channel binding (`c=` must be the base64 of the gs2
    /// header client-first sent), nonce, then the proof in constant time.
    pub fn client_final(&mut self, message: &[u8]) -> Result<Vec<u8>, AuthError> {
        let pending = match std::mem::replace(&mut self.state, State::Failed) {
            State::AwaitingClientFinal(pending) => pending,
            _ => return Err(AuthError::InvalidState("client-final")),
        };
        let last = parse_client_final(message)?;
        if last.channel_binding != pending.gs2_header.as_bytes() {
            return Err(AuthError::ChannelBindingMismatch);
        }
        let nonce_ok = if self.nonce_suffix {
            last.nonce.ends_with(pending.combined_nonce.as_str())
        } else {
            last.nonce == pending.combined_nonce
        };
        if !nonce_ok {
            return Err(AuthError::NonceMismatch);
        }
        let mechanism = self.mechanism;
        let credential = &pending.credential;
        if last.proof.len() != mechanism.hash_len() {
            return Err(AuthError::malformed(
                "client-final",
                format!(
                    "proof must be {} bytes for {mechanism}, got {}",
                    mechanism.hash_len(),
                    last.proof.len()
                ),
            ));
        }
        let mut auth_message = pending.auth_message_prefix.clone();
        auth_message.push_str(last.without_proof);
        let client_signature = mechanism.hmac(&credential.stored_key, auth_message.as_bytes());
        let client_key: Vec<u8> = last
            .proof
            .iter()
            .zip(&client_signature)
            .map(|(p, s)| p ^ s)
            .collect();
        let stored_key = mechanism.hash(&client_key);
        // Both checks are evaluated regardless of the other so timing says nothing about
        // which one failed.
        let key_ok = stored_key.ct_eq(&credential.stored_key);
        let user_ok = subtle::Choice::from(u8::from(pending.known_user));
        if !bool::from(key_ok & user_ok) {
            return Err(AuthError::BadCredentials);
        }
        let server_signature = mechanism.hmac(&credential.server_key, auth_message.as_bytes());
        self.state = State::Authenticated {
            username: pending.username,
        };
        Ok(format!("v={}", base64_encode(&server_signature)).into_bytes())
    }
}
