//! SCRAM (RFC 5802, RFC 7677): mechanisms, stored credentials and the server side of the
//! exchange, as Apache Kafka's broker runs SCRAM-SHA-256 and SCRAM-SHA-512.
//!
//! Where it sits: the server's SASL layer feeds the bytes of each SaslAuthenticate request
//! into a [`ScramServer`] and sends back what it returns; credentials come from the
//! [`UserStore`](crate::UserStore) (or anything implementing [`CredentialSource`]).
//!
//! - [`ScramMechanism`]: SCRAM-SHA-256 or SCRAM-SHA-512, with Kafka's names, wire type codes
//!   and iteration bounds.
//! - [`ScramCredential`]: what the server keeps per user and mechanism — salt, StoredKey,
//!   ServerKey, iterations — never the password. Built from a password (with a salt drawn
//!   from a caller-supplied RNG) or from a salted password (what AlterUserScramCredentials
//!   carries).
//! - [`ScramServer`] (in `server`): the exchange as an explicit state machine.
//! - [`FakeCredentials`]: the per-process secret that gives unknown users a plausible,
//!   stable salt, so server-first does not reveal whether a user exists.
//!
//! Passwords are used as their UTF-8 bytes without SASLprep, as Kafka does; a client that
//! applies SASLprep to a non-ASCII password would compute a different key.

mod messages;
mod server;

pub use server::{CredentialSource, ScramServer, ScramState, ServerNonce};

use std::fmt;

use hmac::{Hmac, Mac};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256, Sha512};
use subtle::ConstantTimeEq;

use crate::error::SecurityError;

/// Kafka's default (and minimum) PBKDF2 iteration count for both SCRAM mechanisms.
pub const DEFAULT_ITERATIONS: u32 = 4096;
/// Kafka's minimum iteration count (`ScramMechanism.minIterations`).
pub const MIN_ITERATIONS: u32 = 4096;
/// Kafka's maximum iteration count accepted by AlterUserScramCredentials.
pub const MAX_ITERATIONS: u32 = 16384;
/// Length of salts this crate generates. Any non-empty salt is accepted from clients.
pub const SALT_BYTES: usize = 32;

/// A SCRAM mechanism this server supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ScramMechanism {
    /// SCRAM-SHA-256 (RFC 7677).
    #[serde(rename = "SCRAM-SHA-256")]
    Sha256,
    /// SCRAM-SHA-512.
    #[serde(rename = "SCRAM-SHA-512")]
    Sha512,
}

impl ScramMechanism {
    /// Both mechanisms, in Kafka's type-code order.
    pub const ALL: [ScramMechanism; 2] = [ScramMechanism::Sha256, ScramMechanism::Sha512];

    /// The SASL mechanism name, e.g. `SCRAM-SHA-256`.
    pub fn name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    /// Parses a SASL mechanism name (exact, as Kafka compares them).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Kafka's `ScramMechanism` type code on the wire (DescribeUserScramCredentials,
    /// AlterUserScramCredentials): 1 for SHA-256, 2 for SHA-512 (0 is UNKNOWN).
    pub fn kafka_type(self) -> i8 {
        match self {
            ScramMechanism::Sha256 => 1,
            ScramMechanism::Sha512 => 2,
        }
    }

    /// The mechanism for a Kafka type code, `None` for UNKNOWN (0) and anything else.
    pub fn from_kafka_type(code: i8) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.kafka_type() == code)
    }

    /// Output length of the hash, which is also the length of keys, proofs and signatures.
    pub fn hash_len(self) -> usize {
        match self {
            ScramMechanism::Sha256 => 32,
            ScramMechanism::Sha512 => 64,
        }
    }

    pub(crate) fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            ScramMechanism::Sha256 => Sha256::digest(data).to_vec(),
            ScramMechanism::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    pub(crate) fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        // HMAC accepts keys of any length, so `new_from_slice` cannot fail here.
        match self {
            ScramMechanism::Sha256 => {
                let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key)
                    .expect("HMAC accepts keys of any length");
                mac.update(data);
                mac.finalize().into_bytes().to_vec()
            }
            ScramMechanism::Sha512 => {
                let mut mac = <Hmac<Sha512> as Mac>::new_from_slice(key)
                    .expect("HMAC accepts keys of any length");
                mac.update(data);
                mac.finalize().into_bytes().to_vec()
            }
        }
    }

    /// `Hi(password, salt, i)` of RFC 5802: PBKDF2 with this mechanism's HMAC.
    pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        let mut out = vec![0u8; self.hash_len()];
        match self {
            ScramMechanism::Sha256 => {
                pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out)
            }
            ScramMechanism::Sha512 => {
                pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut out)
            }
        }
        out
    }
}

impl fmt::Display for ScramMechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What the server stores for one user and mechanism (RFC 5802 section 2.2 / 3). The salted
/// password and the ClientKey are not kept: StoredKey only lets the server check a proof,
/// and ServerKey only lets it sign.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramCredential {
    pub mechanism: ScramMechanism,
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: u32,
}

/// What may be shown about a credential: DescribeUserScramCredentials returns exactly this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CredentialInfo {
    pub mechanism: ScramMechanism,
    pub iterations: u32,
}

impl fmt::Debug for ScramCredential {
    // Keys stay out of logs even at debug level.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramCredential")
            .field("mechanism", &self.mechanism)
            .field("iterations", &self.iterations)
            .field("salt_len", &self.salt.len())
            .finish_non_exhaustive()
    }
}

fn check_iterations(iterations: u32) -> Result<(), SecurityError> {
    if iterations < MIN_ITERATIONS {
        return Err(SecurityError::UnacceptableCredential(format!(
            "too few iterations: {iterations} (minimum {MIN_ITERATIONS})"
        )));
    }
    if iterations > MAX_ITERATIONS {
        return Err(SecurityError::UnacceptableCredential(format!(
            "too many iterations: {iterations} (maximum {MAX_ITERATIONS})"
        )));
    }
    Ok(())
}

impl ScramCredential {
    /// Derives a credential from a password with a fresh random salt of [`SALT_BYTES`].
    /// Refuses iteration counts outside Kafka's `[4096, 16384]`.
    pub fn from_password(
        mechanism: ScramMechanism,
        password: &str,
        iterations: u32,
        rng: &mut impl RngCore,
    ) -> Result<Self, SecurityError> {
        let mut salt = vec![0u8; SALT_BYTES];
        rng.fill_bytes(&mut salt);
        Self::from_password_and_salt(mechanism, password, &salt, iterations)
    }

    /// Derives a credential from a password and a given salt.
    pub fn from_password_and_salt(
        mechanism: ScramMechanism,
        password: &str,
        salt: &[u8],
        iterations: u32,
    ) -> Result<Self, SecurityError> {
        check_iterations(iterations)?;
        let salted = mechanism.salted_password(password.as_bytes(), salt, iterations);
        Self::from_salted_password(mechanism, salt, &salted, iterations)
    }

    /// Builds a credential from what Kafka's AlterUserScramCredentials upsertion carries:
    /// `salt`, `salted_password` (= `Hi(password, salt, iterations)`) and `iterations`.
    /// Refuses an empty salt, a salted password whose length is not the hash length, and
    /// iteration counts outside `[4096, 16384]` (all `UNACCEPTABLE_CREDENTIAL`).
    pub fn from_salted_password(
        mechanism: ScramMechanism,
        salt: &[u8],
        salted_password: &[u8],
        iterations: u32,
    ) -> Result<Self, SecurityError> {
        check_iterations(iterations)?;
        if salt.is_empty() {
            return Err(SecurityError::UnacceptableCredential(
                "salt must not be empty".into(),
            ));
        }
        if salted_password.len() != mechanism.hash_len() {
            return Err(SecurityError::UnacceptableCredential(format!(
                "salted password must be {} bytes for {mechanism}, got {}",
                mechanism.hash_len(),
                salted_password.len()
            )));
        }
        let client_key = mechanism.hmac(salted_password, b"Client Key");
        Ok(ScramCredential {
            mechanism,
            salt: salt.to_vec(),
            stored_key: mechanism.hash(&client_key),
            server_key: mechanism.hmac(salted_password, b"Server Key"),
            iterations,
        })
    }

    /// Whether `password` is the one this credential was made from: recomputes the salted
    /// password with the stored salt and iterations and compares StoredKey in constant time.
    pub fn verify_password(&self, password: &[u8]) -> bool {
        let salted = self
            .mechanism
            .salted_password(password, &self.salt, self.iterations);
        let client_key = self.mechanism.hmac(&salted, b"Client Key");
        let stored_key = self.mechanism.hash(&client_key);
        bool::from(stored_key.ct_eq(&self.stored_key))
    }

    /// The part that may be shown: mechanism and iterations.
    pub fn info(&self) -> CredentialInfo {
        CredentialInfo {
            mechanism: self.mechanism,
            iterations: self.iterations,
        }
    }
}

/// A per-process secret from which unknown users get a fake but stable credential.
///
/// Kafka answers an unknown SCRAM user at once with an error, which tells a prober which
/// user names exist. This server instead answers every client-first with a plausible
/// server-first: for an unknown user the salt is `HMAC(secret, mechanism, user name)`, so
/// asking twice gives the same salt (a random one each time would give the game away),
/// and the iteration count is the configured default. The exchange then fails at the
/// proof with the same [`AuthError::BadCredentials`](crate::AuthError::BadCredentials) a
/// wrong password gets. The secret must not be persisted or shared; a new one per process
/// is fine (salts of unknown users then change across restarts, as if re-created).
#[derive(Clone)]
pub struct FakeCredentials {
    secret: [u8; 32],
    iterations: u32,
}

impl fmt::Debug for FakeCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FakeCredentials")
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

impl FakeCredentials {
    /// Draws a fresh secret; unknown users are shown [`DEFAULT_ITERATIONS`].
    pub fn generate(rng: &mut impl RngCore) -> Self {
        let mut secret = [0u8; 32];
        rng.fill_bytes(&mut secret);
        FakeCredentials {
            secret,
            iterations: DEFAULT_ITERATIONS,
        }
    }

    /// Shows unknown users this iteration count instead (use the count real users have).
    pub fn with_iterations(mut self, iterations: u32) -> Self {
        self.iterations = iterations.clamp(MIN_ITERATIONS, MAX_ITERATIONS);
        self
    }

    /// The fake credential for `username`. Its keys are HMAC outputs nobody knows a
    /// preimage of, and the server also refuses the proof outright for unknown users.
    pub(crate) fn credential(&self, mechanism: ScramMechanism, username: &str) -> ScramCredential {
        let derive = |label: &[u8], len: usize| {
            let mut data = Vec::with_capacity(label.len() + username.len() + 16);
            data.extend_from_slice(label);
            data.push(0);
            data.extend_from_slice(mechanism.name().as_bytes());
            data.push(0);
            data.extend_from_slice(username.as_bytes());
            let mut out = ScramMechanism::Sha512.hmac(&self.secret, &data);
            out.truncate(len);
            out
        };
        ScramCredential {
            mechanism,
            salt: derive(b"salt", SALT_BYTES),
            stored_key: derive(b"stored-key", mechanism.hash_len()),
            server_key: derive(b"server-key", mechanism.hash_len()),
            iterations: self.iterations,
        }
    }
}

#[cfg(test)]
mod tests;
