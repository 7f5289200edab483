//! SASL PLAIN (RFC 4616): one message `authzid NUL authcid NUL passwd`, checked against the
//! user's stored SCRAM credential.
//!
//! Where it sits: the server's SASL layer passes the single SaslAuthenticate payload to
//! [`authenticate_plain`]; on `Ok` the connection is authenticated as the returned user.
//! The password is checked by recomputing `Hi(password, salt, iterations)` with the stored
//! salt and iterations and comparing the resulting StoredKey in constant time, so PLAIN
//! needs no separate password store. PLAIN sends the password in clear; use it over TLS.
//!
//! Like Kafka, the authzid must be empty or equal to the authcid. Unlike Kafka, an unknown
//! user costs the same PBKDF2 work as a known one (checked against a fake credential), so
//! response time does not reveal which user names exist.

use crate::error::AuthError;
use crate::scram::{CredentialSource, FakeCredentials, ScramMechanism};

const PLAIN: &str = "PLAIN";

/// The three fields of a PLAIN message.
#[derive(PartialEq, Eq)]
pub struct PlainMessage<'a> {
    /// Empty, or the identity to act as (must equal `authcid` here).
    pub authzid: &'a str,
    /// The user name.
    pub authcid: &'a str,
    pub password: &'a str,
}

impl std::fmt::Debug for PlainMessage<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlainMessage")
            .field("authzid", &self.authzid)
            .field("authcid", &self.authcid)
            .finish_non_exhaustive()
    }
}

/// Splits a PLAIN message into its fields. Needs exactly two NULs, UTF-8, a non-empty
/// user name and password; never panics.
pub fn parse_plain(message: &[u8]) -> Result<PlainMessage<'_>, AuthError> {
    let text =
        std::str::from_utf8(message).map_err(|_| AuthError::malformed(PLAIN, "not valid UTF-8"))?;
    let mut parts = text.split('\0');
    let (Some(authzid), Some(authcid), Some(password), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        let fields = text.split('\0').count();
        return Err(AuthError::malformed(
            PLAIN,
            format!("expected 3 NUL-separated fields, got {fields}"),
        ));
    };
    if authcid.is_empty() {
        return Err(AuthError::malformed(PLAIN, "user name not specified"));
    }
    if password.is_empty() {
        return Err(AuthError::malformed(PLAIN, "password not specified"));
    }
    Ok(PlainMessage {
        authzid,
        authcid,
        password,
    })
}

/// Authenticates a PLAIN message; returns the user name on success.
///
/// The password is checked against the user's SCRAM-SHA-512 credential if there is one,
/// else SCRAM-SHA-256. Unknown user and wrong password both give
/// [`AuthError::BadCredentials`].
pub fn authenticate_plain(
    message: &[u8],
    credentials: &impl CredentialSource,
    fake: &FakeCredentials,
) -> Result<String, AuthError> {
    let plain = parse_plain(message)?;
    if !plain.authzid.is_empty() && plain.authzid != plain.authcid {
        return Err(AuthError::AuthzidMismatch);
    }
    let found = [ScramMechanism::Sha512, ScramMechanism::Sha256]
        .into_iter()
        .find_map(|m| {
            credentials
                .scram_credential(plain.authcid, m)
                .filter(|c| c.mechanism == m)
        });
    let ok = match found {
        Some(credential) => credential.verify_password(plain.password.as_bytes()),
        None => {
            // Same work as for a real user, result ignored.
            let decoy = fake.credential(ScramMechanism::Sha256, plain.authcid);
            let _ = decoy.verify_password(plain.password.as_bytes());
            false
        }
    };
    if ok {
        Ok(plain.authcid.to_owned())
    } else {
        Err(AuthError::BadCredentials)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scram::ScramCredential;
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    fn setup() -> (impl CredentialSource, FakeCredentials) {
        let mut rng = StdRng::seed_from_u64(1);
        let c256 = ScramCredential::from_password(ScramMechanism::Sha256, "pw256", 4096, &mut rng)
            .unwrap();
        let c512 = ScramCredential::from_password(ScramMechanism::Sha512, "pw512", 4096, &mut rng)
            .unwrap();
        let source = move |user: &str, m: ScramMechanism| match (user, m) {
            ("both", ScramMechanism::Sha256) | ("only256", ScramMechanism::Sha256) => {
                Some(c256.clone())
            }
            ("both", ScramMechanism::Sha512) => Some(c512.clone()),
            _ => None,
        };
        (source, FakeCredentials::generate(&mut rng))
    }

    #[test]
    fn table() {
        let (source, fake) = setup();
        let ok = |user: &str| Ok::<String, AuthError>(user.to_string());
        let cases: &[(&[u8], Result<String, AuthError>)] = &[
            (b"\0only256\0pw256", ok("only256")),
            (b"only256\0only256\0pw256", ok("only256")),
            (b"\0both\0pw512", ok("both")),
            (b"\0both\0pw256", Err(AuthError::BadCredentials)),
            (b"\0only256\0wrong", Err(AuthError::BadCredentials)),
            (b"\0nobody\0pw256", Err(AuthError::BadCredentials)),
            (b"admin\0only256\0pw256", Err(AuthError::AuthzidMismatch)),
        ];
        for (msg, expected) in cases {
            assert_eq!(
                &authenticate_plain(msg, &source, &fake),
                expected,
                "{:?}",
                String::from_utf8_lossy(msg)
            );
        }
        for bad in [
            &b""[..],
            b"\0",
            b"a\0b",
            b"\0\0pw",
            b"\0u\0",
            b"\0u\0p\0",
            b"\0u\0\xff",
        ] {
            assert!(
                matches!(
                    authenticate_plain(bad, &source, &fake),
                    Err(AuthError::Malformed { .. })
                ),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let parsed = parse_plain(b"z\0u\0secret").unwrap();
        assert!(!format!("{parsed:?}").contains("secret"));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let none = |_: &str, _: ScramMechanism| None;
            let fake = FakeCredentials::generate(&mut StdRng::seed_from_u64(2));
            let _ = parse_plain(&bytes);
            prop_assert!(authenticate_plain(&bytes, &none, &fake).is_err());
        }
    }
}
