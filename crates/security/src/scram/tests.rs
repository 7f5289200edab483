//! Tests of the SCRAM server: RFC 7677's exchange byte for byte, a SHA-512 round trip
//! against an independent client computation, and every way an exchange can fail.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{Hmac, Mac};
use proptest::prelude::*;
use rand::SeedableRng;
use rand::rngs::StdRng;
use sha2::{Digest, Sha512};

use super::messages::encode_saslname;
use super::*;
use crate::error::AuthError;

fn rng() -> StdRng {
    StdRng::seed_from_u64(7)
}

fn fake() -> FakeCredentials {
    FakeCredentials::generate(&mut rng())
}

fn nonce(s: &str) -> ServerNonce {
    ServerNonce::new(s).unwrap()
}

/// RFC 7677 section 3: user "user", password "pencil".
const RFC_CLIENT_FIRST: &str = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
const RFC_SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
const RFC_SERVER_FIRST: &str =
    "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
const RFC_CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                                p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
const RFC_SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

fn rfc_credential() -> ScramCredential {
    // Cached: PBKDF2 is slow in debug builds and the property tests call this per case.
    static CREDENTIAL: std::sync::OnceLock<ScramCredential> = std::sync::OnceLock::new();
    CREDENTIAL
        .get_or_init(|| {
            let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
            ScramCredential::from_password_and_salt(ScramMechanism::Sha256, "pencil", &salt, 4096)
                .unwrap()
        })
        .clone()
}

fn rfc_source(user: &str, mechanism: ScramMechanism) -> Option<ScramCredential> {
    (user == "user" && mechanism == ScramMechanism::Sha256).then(rfc_credential)
}

fn rfc_after_first() -> ScramServer {
    let mut server = ScramServer::new(ScramMechanism::Sha256, fake());
    server
        .client_first(
            RFC_CLIENT_FIRST.as_bytes(),
            &rfc_source,
            nonce(RFC_SERVER_NONCE),
        )
        .unwrap();
    server
}

#[test]
fn rfc7677_exchange_byte_for_byte() {
    let mut server = ScramServer::new(ScramMechanism::Sha256, fake());
    assert_eq!(server.state(), ScramState::AwaitingClientFirst);
    let server_first = server
        .client_first(
            RFC_CLIENT_FIRST.as_bytes(),
            &rfc_source,
            nonce(RFC_SERVER_NONCE),
        )
        .unwrap();
    assert_eq!(String::from_utf8(server_first).unwrap(), RFC_SERVER_FIRST);
    assert_eq!(server.state(), ScramState::AwaitingClientFinal);
    assert_eq!(server.authenticated_user(), None);
    let server_final = server.client_final(RFC_CLIENT_FINAL.as_bytes()).unwrap();
    assert_eq!(String::from_utf8(server_final).unwrap(), RFC_SERVER_FINAL);
    assert_eq!(server.state(), ScramState::Authenticated);
    assert_eq!(server.authenticated_user(), Some("user"));
    // Nothing more is accepted once done.
    assert_eq!(
        server.client_final(RFC_CLIENT_FINAL.as_bytes()),
        Err(AuthError::InvalidState("client-final"))
    );
}

/// A SCRAM-SHA-512 client written straight from RFC 5802 section 3, on the hash crates.
struct Client512 {
    password: String,
    client_first_bare: String,
    gs2_header: String,
}

type HmacSha512 = Hmac<Sha512>;

fn hmac512(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut mac = HmacSha512::new_from_slice(key).unwrap();
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

impl Client512 {
    fn new(user: &str, password: &str, authzid: Option<&str>, client_nonce: &str) -> Self {
        let gs2_header = match authzid {
            Some(a) => format!("n,a={},", encode_saslname(a)),
            None => "n,,".to_string(),
        };
        Client512 {
            password: password.to_string(),
            client_first_bare: format!("n={},r={client_nonce}", encode_saslname(user)),
            gs2_header,
        }
    }

    fn first(&self) -> String {
        format!("{}{}", self.gs2_header, self.client_first_bare)
    }

    /// Returns client-final and the server signature the client expects.
    fn last(&self, server_first: &str) -> (String, String) {
        let mut nonce = "";
        let mut salt = Vec::new();
        let mut iterations = 0u32;
        for field in server_first.split(',') {
            let (k, v) = field.split_at(2);
            match k {
                "r=" => nonce = v,
                "s=" => salt = B64.decode(v).unwrap(),
                "i=" => iterations = v.parse().unwrap(),
                _ => panic!("unexpected {field}"),
            }
        }
        let mut salted = [0u8; 64];
        pbkdf2::pbkdf2_hmac::<Sha512>(self.password.as_bytes(), &salt, iterations, &mut salted);
        let client_key = hmac512(&salted, b"Client Key");
        let stored_key = Sha512::digest(&client_key);
        let without_proof = format!("c={},r={nonce}", B64.encode(self.gs2_header.as_bytes()));
        let auth_message = format!("{},{server_first},{without_proof}", self.client_first_bare);
        let signature = hmac512(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(a, b)| a ^ b)
            .collect();
        let server_key = hmac512(&salted, b"Server Key");
        let server_signature = hmac512(&server_key, auth_message.as_bytes());
        (
            format!("{without_proof},p={}", B64.encode(proof)),
            format!("v={}", B64.encode(server_signature)),
        )
    }
}

fn store_512(
    user: &str,
    password: &str,
) -> impl Fn(&str, ScramMechanism) -> Option<ScramCredential> {
    let credential =
        ScramCredential::from_password(ScramMechanism::Sha512, password, 4096, &mut rng()).unwrap();
    let user = user.to_string();
    move |u: &str, m: ScramMechanism| {
        (u == user && m == ScramMechanism::Sha512).then(|| credential.clone())
    }
}

#[test]
fn sha512_round_trip_against_independent_client() {
    let source = store_512("al,i=ce", "s3cret");
    for authzid in [None, Some("al,i=ce")] {
        let client = Client512::new("al,i=ce", "s3cret", authzid, "fyko+d2lbbFgONRv9qkxdawL");
        let mut server = ScramServer::new(ScramMechanism::Sha512, fake());
        let first = server
            .client_first(
                client.first().as_bytes(),
                &source,
                ServerNonce::generate(&mut rng()),
            )
            .unwrap();
        let first = String::from_utf8(first).unwrap();
        assert!(first.starts_with("r=fyko+d2lbbFgONRv9qkxdawL"), "{first}");
        assert!(first.ends_with(",i=4096"), "{first}");
        let (last, expected_final) = client.last(&first);
        let server_final = server.client_final(last.as_bytes()).unwrap();
        assert_eq!(String::from_utf8(server_final).unwrap(), expected_final);
        assert_eq!(server.authenticated_user(), Some("al,i=ce"));
    }
}

fn run_512(client: &Client512, source: &impl CredentialSource) -> Result<Vec<u8>, AuthError> {
    let mut server = ScramServer::new(ScramMechanism::Sha512, fake());
    let first = server.client_first(client.first().as_bytes(), source, nonce("srv"))?;
    let (last, _) = client.last(std::str::from_utf8(&first).unwrap());
    let result = server.client_final(last.as_bytes());
    if result.is_err() {
        assert_eq!(server.state(), ScramState::Failed);
        assert_eq!(server.authenticated_user(), None);
    }
    result
}

#[test]
fn wrong_password_and_unknown_user_fail_alike() {
    let source = store_512("alice", "right");
    let wrong = Client512::new("alice", "wrong", None, "abc");
    assert_eq!(run_512(&wrong, &source), Err(AuthError::BadCredentials));
    let unknown = Client512::new("mallory", "right", None, "abc");
    assert_eq!(run_512(&unknown, &source), Err(AuthError::BadCredentials));
    // A credential for the other mechanism does not count.
    let only_256 = |_: &str, _: ScramMechanism| Some(rfc_credential());
    let client = Client512::new("user", "pencil", None, "abc");
    assert_eq!(run_512(&client, &only_256), Err(AuthError::BadCredentials));
}

#[test]
fn unknown_user_gets_plausible_stable_server_first() {
    let none = |_: &str, _: ScramMechanism| None;
    let fake = fake();
    let server_first = |user: &str, fake: &FakeCredentials| {
        let mut server = ScramServer::new(ScramMechanism::Sha256, fake.clone());
        let msg = format!("n,,n={user},r=abc");
        String::from_utf8(
            server
                .client_first(msg.as_bytes(), &none, nonce("xyz"))
                .unwrap(),
        )
        .unwrap()
    };
    let a1 = server_first("ghost", &fake);
    let a2 = server_first("ghost", &fake);
    let b = server_first("phantom", &fake);
    let other_process = server_first(
        "ghost",
        &FakeCredentials::generate(&mut StdRng::seed_from_u64(8)),
    );
    assert_eq!(a1, a2, "same user, same process: same salt");
    assert_ne!(a1, b, "different users: different salts");
    assert_ne!(a1, other_process, "salt depends on the per-process secret");
    let salt = a1.split(",s=").nth(1).unwrap().split(",i=").next().unwrap();
    assert_eq!(B64.decode(salt).unwrap().len(), SALT_BYTES);
    assert!(
        a1.starts_with("r=abcxyz,s=") && a1.ends_with(",i=4096"),
        "{a1}"
    );
    let iter = fake.with_iterations(8192);
    assert!(server_first("ghost", &iter).ends_with(",i=8192"));
}

#[test]
fn rfc_exchange_tampered_client_final() {
    let final_with = |c: &str, r: &str, p: &str| format!("c={c},r={r},p={p}");
    let full_nonce = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
    let proof = "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
    let bad_proof = "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVU=";
    let cases = [
        (
            final_with("biws", "rOprNGfwEbeRWgbNEkqO", proof),
            AuthError::NonceMismatch,
        ),
        (
            final_with("biws", &format!("{full_nonce}x"), proof),
            AuthError::NonceMismatch,
        ),
        (
            final_with("eSws", full_nonce, proof),
            AuthError::ChannelBindingMismatch,
        ),
        (
            final_with("biws", full_nonce, bad_proof),
            AuthError::BadCredentials,
        ),
        (
            final_with("biws", full_nonce, "AAAA"),
            AuthError::malformed(
                "client-final",
                "proof must be 32 bytes for SCRAM-SHA-256, got 3",
            ),
        ),
    ];
    for (msg, expected) in cases {
        let mut server = rfc_after_first();
        assert_eq!(server.client_final(msg.as_bytes()), Err(expected), "{msg}");
        assert_eq!(server.state(), ScramState::Failed);
        // A failed exchange stays failed.
        assert!(matches!(
            server.client_final(RFC_CLIENT_FINAL.as_bytes()),
            Err(AuthError::InvalidState(_))
        ));
    }
    // An extension in client-final is part of the AuthMessage, so the RFC proof no longer fits.
    let mut server = rfc_after_first();
    let with_ext = format!("c=biws,r={full_nonce},x=1,p={proof}");
    assert_eq!(
        server.client_final(with_ext.as_bytes()),
        Err(AuthError::BadCredentials)
    );
}

#[test]
fn client_first_refusals_in_the_state_machine() {
    let cases: [(&str, AuthError); 4] = [
        (
            "p=tls-server-end-point,,n=user,r=abc",
            AuthError::ChannelBindingNotSupported,
        ),
        (
            "n,,n=user,r=abc,tokenauth=true",
            AuthError::TokenAuthNotSupported,
        ),
        ("n,a=admin,n=user,r=abc", AuthError::AuthzidMismatch),
        ("n,,m=ext,n=user,r=abc", AuthError::MandatoryExtension),
    ];
    for (msg, expected) in cases {
        let mut server = ScramServer::new(ScramMechanism::Sha256, fake());
        assert_eq!(
            server.client_first(msg.as_bytes(), &rfc_source, nonce("n")),
            Err(expected),
            "{msg}"
        );
        assert_eq!(server.state(), ScramState::Failed);
    }
    // client-final before client-first, and client-first twice.
    let mut server = ScramServer::new(ScramMechanism::Sha256, fake());
    assert_eq!(
        server.client_final(RFC_CLIENT_FINAL.as_bytes()),
        Err(AuthError::InvalidState("client-final"))
    );
    let mut server = rfc_after_first();
    assert_eq!(
        server.client_first(RFC_CLIENT_FIRST.as_bytes(), &rfc_source, nonce("n")),
        Err(AuthError::InvalidState("client-first"))
    );
    assert_eq!(AuthError::InvalidState("x").kafka_error_code(), 34);
    assert_eq!(AuthError::BadCredentials.kafka_error_code(), 58);
}

#[test]
fn credential_derivation_rules() {
    let mut r = rng();
    let a = ScramCredential::from_password(ScramMechanism::Sha256, "pw", 4096, &mut r).unwrap();
    let b = ScramCredential::from_password(ScramMechanism::Sha256, "pw", 4096, &mut r).unwrap();
    assert_ne!(a.salt, b.salt, "each credential gets a fresh salt");
    assert!(a.verify_password(b"pw") && !a.verify_password(b"pW"));
    let salted = ScramMechanism::Sha256.salted_password(b"pw", &a.salt, 4096);
    let c = ScramCredential::from_salted_password(ScramMechanism::Sha256, &a.salt, &salted, 4096)
        .unwrap();
    assert_eq!(a, c, "salted-password path equals password path");
    for (iterations, ok) in [(4095, false), (4096, true), (16384, true), (16385, false)] {
        let result = ScramCredential::from_salted_password(
            ScramMechanism::Sha256,
            b"s",
            &salted,
            iterations,
        );
        assert_eq!(result.is_ok(), ok, "{iterations}");
    }
    assert!(
        ScramCredential::from_salted_password(ScramMechanism::Sha256, b"", &salted, 4096).is_err()
    );
    assert!(
        ScramCredential::from_salted_password(ScramMechanism::Sha512, b"s", &salted, 4096).is_err(),
        "a 32-byte salted password is not a SHA-512 one"
    );
    let debug = format!("{a:?}");
    assert!(
        !debug.contains("stored_key") && !debug.contains("server_key"),
        "{debug}"
    );
    assert_eq!(
        ScramMechanism::from_name("SCRAM-SHA-512"),
        Some(ScramMechanism::Sha512)
    );
    assert_eq!(ScramMechanism::from_name("scram-sha-512"), None);
    assert_eq!(
        ScramMechanism::from_kafka_type(1),
        Some(ScramMechanism::Sha256)
    );
    assert_eq!(ScramMechanism::from_kafka_type(0), None);
    assert!(ServerNonce::new("a,b").is_none() && ServerNonce::new("").is_none());
}

proptest! {
    #[test]
    fn arbitrary_client_first_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut server = ScramServer::new(ScramMechanism::Sha256, fake());
        let _ = server.client_first(&bytes, &rfc_source, nonce("n"));
    }

    #[test]
    fn arbitrary_client_final_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut server = rfc_after_first();
        prop_assert!(server.client_final(&bytes).is_err());
        prop_assert_eq!(server.state(), ScramState::Failed);
    }

    #[test]
    fn structured_client_messages_never_panic(
        user in "[a-z=,2CD3]{0,8}",
        cnonce in "[!-~]{0,8}",
        ext in "[a-z=,]{0,12}",
        proof in "[A-Za-z0-9+/=]{0,48}",
    ) {
        let mut server = ScramServer::new(ScramMechanism::Sha256, fake());
        let first = format!("n,,n={user},r={cnonce},{ext}");
        if server.client_first(first.as_bytes(), &rfc_source, nonce("s")).is_ok() {
            let last = format!("c=biws,r={cnonce}s,{ext},p={proof}");
            prop_assert!(server.client_final(last.as_bytes()).is_err());
        }
    }
}

#[test]
fn nonce_suffix_is_accepted_only_when_asked() {
    // librdkafka's client-final: its client nonce, then the whole combined nonce.
    let doubled = RFC_CLIENT_FINAL.replace("r=", "r=rOprNGfwEbeRWgbNEkqO");
    let mut strict = rfc_after_first();
    assert_eq!(
        strict.client_final(doubled.as_bytes()),
        Err(AuthError::NonceMismatch)
    );
    // Kafka's check: the nonce passes; the proof (made for the RFC message) then fails.
    let mut server = ScramServer::new(ScramMechanism::Sha256, fake()).accept_nonce_suffix();
    server
        .client_first(
            RFC_CLIENT_FIRST.as_bytes(),
            &rfc_source,
            nonce(RFC_SERVER_NONCE),
        )
        .unwrap();
    assert_eq!(
        server.client_final(doubled.as_bytes()),
        Err(AuthError::BadCredentials)
    );
    // A nonce that does not end with the combined one is still refused.
    let mut server = ScramServer::new(ScramMechanism::Sha256, fake()).accept_nonce_suffix();
    server
        .client_first(
            RFC_CLIENT_FIRST.as_bytes(),
            &rfc_source,
            nonce(RFC_SERVER_NONCE),
        )
        .unwrap();
    let other = RFC_CLIENT_FINAL.replace("hNlF$k0", "hNlF$k1");
    assert_eq!(
        server.client_final(other.as_bytes()),
        Err(AuthError::NonceMismatch)
    );
    // With the RFC's own message, the exchange still succeeds.
    let mut server = ScramServer::new(ScramMechanism::Sha256, fake()).accept_nonce_suffix();
    server
        .client_first(
            RFC_CLIENT_FIRST.as_bytes(),
            &rfc_source,
            nonce(RFC_SERVER_NONCE),
        )
        .unwrap();
    assert!(server.client_final(RFC_CLIENT_FINAL.as_bytes()).is_ok());
}
