//! API keys: who may call the HTTP API, and which topics each key may read, write and
//! administer.
//!
//! Keys are configured as `[[http_api_keys]]` tables ([`ApiKeyConfig`]): a name, the hex
//! SHA-256 of the key (the key itself is never stored), and three lists of topic-name
//! patterns. A request presents its key as `Authorization: Bearer <key>`; the [`Principal`]
//! extractor hashes it, finds the configured key with that hash, and hands the handler a
//! principal whose grants it checks with [`Principal::require`] / [`Principal::allows`].
//!
//! - No keys configured: authentication is off and every request is allowed.
//! - Missing or malformed header, or an unknown key: 401 with `WWW-Authenticate: Bearer`.
//! - A valid key without the grant: 403 naming the key and the topic.
//!
//! Keys can be replaced while running ([`Auth::replace`], on a config reload): the new set is
//! checked first and swapped in as a whole, so a request sees either the old keys or the new
//! ones, and a bad config leaves the old keys in place.

use std::sync::{Arc, RwLock};

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use sluice_security::{AclOperation, ResourceType};

use crate::{ApiError, AppState};

/// One configured API key: its name, the hex SHA-256 of the key, and topic-name patterns it
/// may read, write and administer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKeyConfig {
    pub name: String,
    pub sha256: String,
    #[serde(default)]
    pub read: Vec<String>,
    #[serde(default)]
    pub write: Vec<String>,
    #[serde(default)]
    pub admin: Vec<String>,
    /// The principal the broker's ACLs know this key as, when ACL checks are on
    /// (`--authorizer acl`), e.g. `User:alice`; then the ACLs decide what the key may do and
    /// `read`, `write` and `admin` do not apply [default: `User:` + the key's name]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
}

/// What a request wants to do with a topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
    Admin,
}

impl Access {
    /// The config list that grants this access (`read`, `write`, `admin`).
    pub fn name(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
            Access::Admin => "admin",
        }
    }
}

/// A topic-name pattern: `*` matches any run of characters (including none), every other
/// character matches itself.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pattern {
    text: String,
}

impl Pattern {
    fn matches(&self, topic: &str) -> bool {
        glob_match(&self.text, topic)
    }
}

/// True when `pattern` matches all of `text`; `*` matches any run of characters.
///
/// The pieces between stars must appear in order: the first one anchored at the start (unless
/// the pattern starts with `*`), the last one at the end (unless it ends with `*`), the middle
/// ones anywhere in between, each taken at its leftmost match. Leftmost is always safe: a later
/// match could only leave less room for the pieces after it. Linear in practice, no recursion.
fn glob_match(pattern: &str, text: &str) -> bool {
    let mut pieces = pattern.split('*');
    // `split` yields at least one piece; with no star, the whole pattern must equal the text.
    let first = pieces.next().unwrap_or_default();
    let Some(rest) = text.strip_prefix(first) else {
        return false;
    };
    let mut middle: Vec<&str> = pieces.collect();
    let Some(last) = middle.pop() else {
        return rest.is_empty();
    };
    let Some(mut rest) = rest.len().checked_sub(last.len()).and_then(|end| {
        // The last piece is anchored at the end, and may not overlap what the first took.
        rest.is_char_boundary(end)
            .then(|| rest.split_at(end))
            .filter(|(_, tail)| *tail == last)
            .map(|(head, _)| head)
    }) else {
        return false;
    };
    for piece in middle {
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    true
}

/// A checked key, ready to match requests.
struct Key {
    name: String,
    /// Who the ACLs know this key as (`Type:name`).
    principal: String,
    /// SHA-256 of the key.
    hash: [u8; 32],
    read: Vec<Pattern>,
    write: Vec<Pattern>,
    admin: Vec<Pattern>,
}

impl std::fmt::Debug for Key {
    // Leaves the hash out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key")
            .field("name", &self.name)
            .field("read", &self.read)
            .field("write", &self.write)
            .field("admin", &self.admin)
            .finish_non_exhaustive()
    }
}

impl Key {
    fn patterns(&self, access: Access) -> &[Pattern] {
        match access {
            Access::Read => &self.read,
            Access::Write => &self.write,
            Access::Admin => &self.admin,
        }
    }
}

/// One generation of keys; replaced as a whole.
#[derive(Debug, Default)]
struct KeySet {
    keys: Vec<Arc<Key>>,
}

impl KeySet {
    /// The key whose hash is `hash`. Compares against every key, each in constant time, and
    /// does not stop at a match: the time taken says nothing about which bytes matched.
    fn find(&self, hash: &[u8; 32]) -> Option<&Arc<Key>> {
        let mut found = None;
        for key in &self.keys {
            if constant_time_eq(&key.hash, hash) && found.is_none() {
                found = Some(key);
            }
        }
        found
    }
}

/// Equality of two hashes in time independent of where they differ. (Short enough to own
/// rather than pull in a crate; `black_box` keeps the compiler from turning the fold into an
/// early-exit comparison.)
fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    #[cfg(test)]
    tests::CONSTANT_TIME_COMPARES.with(|n| n.set(n.get() + 1));
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= std::hint::black_box(x ^ y);
    }
    std::hint::black_box(diff) == 0
}

/// SHA-256 of `key` as lowercase hex: the `sha256` to configure for it.
pub fn hash_key_hex(key: &str) -> String {
    let digest = Sha256::digest(key.as_bytes());
    let mut hex = String::with_capacity(64);
    for byte in digest {
        hex.push(char::from(HEX[usize::from(byte >> 4)]));
        hex.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    hex
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Parses 64 hex digits (either case) into 32 bytes.
fn parse_hex_hash(hex: &str) -> Option<[u8; 32]> {
    let digits = hex.as_bytes();
    if digits.len() != 64 {
        return None;
    }
    let nibble = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = [0u8; 32];
    for (i, pair) in digits.chunks_exact(2).enumerate() {
        out[i] = (nibble(pair[0])? << 4) | nibble(pair[1])?;
    }
    Some(out)
}

/// Checks a whole key list; the error says which key and what to fix.
fn build(configs: Vec<ApiKeyConfig>) -> Result<KeySet, String> {
    let mut keys: Vec<Arc<Key>> = Vec::with_capacity(configs.len());
    for (i, config) in configs.into_iter().enumerate() {
        let at = if config.name.trim().is_empty() {
            format!("http_api_keys[{i}]")
        } else {
            format!("http_api_keys[{i}] (name \"{}\")", config.name)
        };
        if config.name.trim().is_empty() {
            return Err(format!(
                "{at}: name is empty; give every key a name (it appears in logs and 403 answers)"
            ));
        }
        if keys.iter().any(|k| k.name == config.name) {
            return Err(format!(
                "{at}: another key already has this name; key names must be unique"
            ));
        }
        let Some(hash) = parse_hex_hash(config.sha256.trim()) else {
            return Err(format!(
                "{at}: sha256 must be 64 hex characters, the SHA-256 of the key (`sluice api-key new` prints it; `sluice api-key hash` computes it for an existing key); got {} characters",
                config.sha256.trim().chars().count()
            ));
        };
        if let Some(other) = keys.iter().find(|k| k.hash == hash) {
            return Err(format!(
                "{at}: same sha256 as key \"{}\"; each key must be distinct",
                other.name
            ));
        }
        let patterns = |list: Vec<String>, access: Access| -> Result<Vec<Pattern>, String> {
            list.into_iter()
                .map(|text| check_pattern(&at, access, text))
                .collect()
        };
        let principal = match config.principal {
            None => format!("User:{}", config.name),
            Some(p) => match p.split_once(':') {
                Some((kind, name)) if !kind.is_empty() && !name.is_empty() => p,
                _ => {
                    return Err(format!(
                        "{at}: principal {p:?} is not of the form Type:name (e.g. \"User:alice\")"
                    ));
                }
            },
        };
        keys.push(Arc::new(Key {
            principal,
            read: patterns(config.read, Access::Read)?,
            write: patterns(config.write, Access::Write)?,
            admin: patterns(config.admin, Access::Admin)?,
            name: config.name,
            hash,
        }));
    }
    Ok(KeySet { keys })
}

fn check_pattern(at: &str, access: Access, text: String) -> Result<Pattern, String> {
    let list = access.name();
    if text.is_empty() {
        return Err(format!(
            "{at}: an empty pattern in `{list}`; use \"*\" for every topic, or a topic name with `*` wildcards"
        ));
    }
    // Topic names use only these characters, so a pattern with anything else could never
    // match: most likely a typo (a regex, a comma-separated list in one string).
    if let Some(bad) = text
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '*')))
    {
        return Err(format!(
            "{at}: pattern \"{text}\" in `{list}` contains '{bad}', which no topic name has; patterns use letters, digits, '.', '_', '-' and '*' (any run of characters), one pattern per list entry"
        ));
    }
    Ok(Pattern { text })
}

/// The configured keys (replaceable while running).
#[derive(Debug, Default)]
pub struct Auth {
    /// The current generation. A request clones the `Arc` under the read lock (no waiting on
    /// writers beyond a pointer swap) and uses that generation to the end.
    keys: RwLock<Arc<KeySet>>,
}

impl Auth {
    /// Checks and installs `keys` (none: authentication is off).
    pub fn new(keys: Vec<ApiKeyConfig>) -> Result<Auth, String> {
        Ok(Auth {
            keys: RwLock::new(Arc::new(build(keys)?)),
        })
    }

    /// Replaces the keys (a reload); on error the old keys stay.
    ///
    /// Refuses to remove every key while keys are configured: that would silently turn
    /// authentication off on a server that may listen on a public address (the startup check
    /// against anonymous non-loopback listeners would be bypassed). Turning it off takes a
    /// restart.
    pub fn replace(&self, keys: Vec<ApiKeyConfig>) -> Result<(), String> {
        let new = Arc::new(build(keys)?);
        let mut current = self.keys.write().unwrap_or_else(|p| p.into_inner());
        if new.keys.is_empty() && !current.keys.is_empty() {
            return Err(
                "the new config has no http_api_keys; removing every key would open the HTTP API to anyone, so the current keys stay (restart the server to run without keys)"
                    .to_owned(),
            );
        }
        *current = new;
        Ok(())
    }

    /// True when keys are configured.
    pub fn enabled(&self) -> bool {
        !self.current().keys.is_empty()
    }

    fn current(&self) -> Arc<KeySet> {
        // The lock only guards a pointer swap, which cannot be left half done: a poisoned lock
        // still holds a whole generation.
        Arc::clone(&self.keys.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// The principal for a request's `Authorization` header value (`None`: no header).
    pub fn authenticate(
        &self,
        authorization: Option<&HeaderValue>,
    ) -> Result<Principal, Unauthorized> {
        let keys = self.current();
        if keys.keys.is_empty() {
            return Ok(Principal {
                key: None,
                acl: None,
            });
        }
        let Some(value) = authorization else {
            return Err(Unauthorized::new(
                "missing API key: send the header `Authorization: Bearer <key>`",
            ));
        };
        let token = value
            .to_str()
            .ok()
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
            .filter(|token| !token.is_empty());
        let Some(token) = token else {
            return Err(Unauthorized::new(
                "malformed Authorization header: expected `Authorization: Bearer <key>`",
            ));
        };
        let hash: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        match keys.find(&hash) {
            Some(key) => Ok(Principal {
                key: Some(Arc::clone(key)),
                acl: None,
            }),
            None => Err(Unauthorized::new(
                "unknown API key: check the key, or ask for one to be added to http_api_keys",
            )),
        }
    }
}

/// The caller of a request: a key with its grants, or anyone when authentication is off.
/// With ACL checks on (`--authorizer acl`), the broker's ACLs decide instead, for the key's
/// principal (`User:ANONYMOUS` without keys), as they do for Kafka clients.
#[derive(Debug, Clone)]
pub struct Principal {
    /// `None`: authentication is off.
    key: Option<Arc<Key>>,
    /// `Some` when ACL checks are on.
    acl: Option<AclCaller>,
}

/// What the broker's ACL check needs to know of an HTTP caller.
#[derive(Debug, Clone)]
struct AclCaller {
    broker: Arc<sluice_broker::Broker>,
    caller: sluice_broker::Caller,
}

/// The ACL operation an HTTP access needs on a topic: reads READ, produce WRITE; an admin
/// route names its own (CREATE, DELETE) through [`Principal::require_to`].
fn acl_operation(access: Access) -> AclOperation {
    match access {
        Access::Read => AclOperation::Read,
        Access::Write => AclOperation::Write,
        Access::Admin => AclOperation::Alter,
    }
}

impl Principal {
    /// Ok when this caller may do `access` on `topic`; else 403 naming the key and the topic.
    pub fn require(&self, access: Access, topic: &str) -> Result<(), ApiError> {
        self.require_to(access, acl_operation(access), topic)
    }

    /// [`Principal::require`] for a route whose ACL operation is not `access`'s usual one
    /// (creating a topic takes CREATE, deleting it DELETE).
    pub fn require_to(
        &self,
        access: Access,
        operation: AclOperation,
        topic: &str,
    ) -> Result<(), ApiError> {
        if let Some(acl) = &self.acl {
            let allowed = acl
                .broker
                .authorized(&acl.caller, operation, ResourceType::Topic, topic)
                || (operation == AclOperation::Create
                    && acl.broker.authorized(
                        &acl.caller,
                        AclOperation::Create,
                        ResourceType::Cluster,
                        sluice_security::acl::CLUSTER_NAME,
                    ));
            if allowed {
                return Ok(());
            }
            return Err(self.acl_refusal(operation, "topic", topic));
        }
        if self.allows(access, topic) {
            return Ok(());
        }
        let name = self.key_name().unwrap_or_default();
        Err(ApiError::forbidden(format!(
            "API key \"{name}\" has no {} grant on topic \"{topic}\": add a pattern matching the topic to the key's `{}` list",
            access.name(),
            access.name()
        )))
    }

    /// Ok when this caller may do `operation` on consumer group `group`: always without ACL
    /// checks (key lists name topics only); with them, what the ACLs say.
    pub fn require_group(&self, operation: AclOperation, group: &str) -> Result<(), ApiError> {
        match &self.acl {
            Some(acl)
                if !acl
                    .broker
                    .authorized(&acl.caller, operation, ResourceType::Group, group) =>
            {
                Err(self.acl_refusal(operation, "group", group))
            }
            _ => Ok(()),
        }
    }

    fn acl_refusal(&self, operation: AclOperation, kind: &str, name: &str) -> ApiError {
        let who = self
            .acl
            .as_ref()
            .map(|a| a.caller.principal.to_string())
            .unwrap_or_default();
        let key = match self.key_name() {
            Some(k) => format!(" (API key \"{k}\")"),
            None => String::new(),
        };
        ApiError::forbidden(format!(
            "{who}{key} may not {operation} {kind} \"{name}\": no ACL allows it (kafka-acls --add --allow-principal {who} --operation {operation} --{kind} {name})"
        ))
    }

    /// True when this caller may do `access` on `topic`.
    pub fn allows(&self, access: Access, topic: &str) -> bool {
        if let Some(acl) = &self.acl {
            return acl.broker.authorized(
                &acl.caller,
                acl_operation(access),
                ResourceType::Topic,
                topic,
            );
        }
        match &self.key {
            None => true,
            Some(key) => key.patterns(access).iter().any(|p| p.matches(topic)),
        }
    }

    /// True when this caller has any grant (read, write or admin) on `topic`; with ACL checks
    /// on, when it may DESCRIBE it (which any of READ, WRITE, DELETE or ALTER implies).
    pub fn allows_any(&self, topic: &str) -> bool {
        if let Some(acl) = &self.acl {
            return acl.broker.authorized(
                &acl.caller,
                AclOperation::Describe,
                ResourceType::Topic,
                topic,
            );
        }
        [Access::Read, Access::Write, Access::Admin]
            .into_iter()
            .any(|access| self.allows(access, topic))
    }

    /// The key's configured name (`None` when authentication is off).
    pub fn key_name(&self) -> Option<&str> {
        self.key.as_deref().map(|k| k.name.as_str())
    }
}

/// A 401: no key, a malformed header, or an unknown key. Answered with `WWW-Authenticate:
/// Bearer` and a JSON `{"error": "..."}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unauthorized(pub ApiError);

impl Unauthorized {
    fn new(message: &str) -> Unauthorized {
        Unauthorized(ApiError::unauthorized(message))
    }
}

impl From<Unauthorized> for ApiError {
    fn from(u: Unauthorized) -> ApiError {
        u.0
    }
}

impl IntoResponse for Unauthorized {
    fn into_response(self) -> Response {
        let mut response = self.0.into_response();
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        response
    }
}

impl FromRequestParts<Arc<AppState>> for Principal {
    type Rejection = Unauthorized;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        let mut principal = state
            .auth
            .authenticate(parts.headers.get(header::AUTHORIZATION))?;
        if state.broker.authorizer().is_some() {
            let peer = parts
                .extensions
                .get::<ConnectInfo<std::net::SocketAddr>>()
                .map(|c| c.0.ip());
            let name = match &principal.key {
                Some(key) => key.principal.as_str(),
                None => "User:ANONYMOUS",
            };
            principal.acl = Some(AclCaller {
                broker: Arc::clone(&state.broker),
                caller: sluice_broker::Caller {
                    peer,
                    listener: 0,
                    principal: Arc::from(name),
                    connection: 0,
                },
            });
        }
        Ok(principal)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    thread_local! {
        /// Calls of `constant_time_eq` on this thread.
        pub(super) static CONSTANT_TIME_COMPARES: Cell<usize> = const { Cell::new(0) };
    }

    fn key(
        name: &str,
        secret: &str,
        read: &[&str],
        write: &[&str],
        admin: &[&str],
    ) -> ApiKeyConfig {
        let list = |l: &[&str]| l.iter().map(|s| s.to_string()).collect();
        ApiKeyConfig {
            name: name.to_owned(),
            sha256: hash_key_hex(secret),
            read: list(read),
            write: list(write),
            admin: list(admin),
            principal: None,
        }
    }

    fn bearer(secret: &str) -> HeaderValue {
        HeaderValue::from_str(&format!("Bearer {secret}")).unwrap()
    }

    #[test]
    fn star_matches_any_run_and_the_rest_is_literal() {
        let cases: &[(&str, &str, bool)] = &[
            ("*", "", true),
            ("*", "orders", true),
            ("orders", "orders", true),
            ("orders", "orders2", false),
            ("orders", "order", false),
            ("orders.*", "orders.eu", true),
            ("orders.*", "orders.", true),
            ("orders.*", "orders", false),
            ("orders.*", "ordersXeu", false),
            ("*.eu", "orders.eu", true),
            ("*.eu", "orders.us", false),
            ("a*b*c", "abc", true),
            ("a*b*c", "aXbYc", true),
            ("a*b*c", "aXcYb", false),
            ("a*a", "a", false),
            ("a*a", "aa", true),
            ("ab*ba", "aba", false),
            ("*x*", "x", true),
            ("*x*", "abc", false),
            ("**", "anything", true),
            ("a**b", "ab", true),
            ("t-*-raw", "t-1-raw", true),
            ("t-*-raw", "t--raw", true),
            ("t-*-raw", "t-raw", false),
            ("a.b", "aXb", false),
        ];
        for &(pattern, topic, want) in cases {
            assert_eq!(glob_match(pattern, topic), want, "{pattern:?} vs {topic:?}");
        }
    }

    #[test]
    fn config_errors_say_what_to_fix() {
        let good = key("ci", "sk_1", &["*"], &[], &[]);
        let err = |keys: Vec<ApiKeyConfig>| Auth::new(keys).unwrap_err();

        let e = err(vec![ApiKeyConfig {
            sha256: "abc".into(),
            ..good.clone()
        }]);
        assert!(
            e.contains("\"ci\"") && e.contains("64 hex characters") && e.contains("got 3"),
            "{e}"
        );
        let e = err(vec![ApiKeyConfig {
            sha256: "g".repeat(64),
            ..good.clone()
        }]);
        assert!(e.contains("64 hex characters"), "{e}");
        let e = err(vec![ApiKeyConfig {
            name: " ".into(),
            ..good.clone()
        }]);
        assert!(
            e.contains("http_api_keys[0]") && e.contains("name is empty"),
            "{e}"
        );
        let e = err(vec![good.clone(), key("ci", "sk_2", &[], &[], &[])]);
        assert!(
            e.contains("http_api_keys[1]") && e.contains("unique"),
            "{e}"
        );
        let e = err(vec![good.clone(), key("other", "sk_1", &[], &[], &[])]);
        assert!(e.contains("same sha256 as key \"ci\""), "{e}");
        let e = err(vec![key("w", "sk_3", &[], &[""], &[])]);
        assert!(e.contains("empty pattern in `write`"), "{e}");
        let e = err(vec![key("w", "sk_3", &[], &[], &["orders, payments"])]);
        assert!(e.contains("`admin`") && e.contains("','"), "{e}");

        // Upper-case hex and surrounding spaces are fine; no keys at all is fine too.
        let upper = ApiKeyConfig {
            sha256: format!(" {} ", good.sha256.to_uppercase()),
            ..good.clone()
        };
        let auth = Auth::new(vec![upper]).unwrap();
        assert!(auth.authenticate(Some(&bearer("sk_1"))).is_ok());
        assert!(!Auth::new(Vec::new()).unwrap().enabled());
    }

    #[test]
    fn no_keys_means_everyone_may_do_everything() {
        let auth = Auth::new(Vec::new()).unwrap();
        assert!(!auth.enabled());
        for header in [None, Some(bearer("whatever"))] {
            let p = auth.authenticate(header.as_ref()).unwrap();
            assert!(p.allows(Access::Admin, "any"));
            assert!(p.require(Access::Write, "any").is_ok());
            assert_eq!(p.key_name(), None);
        }
    }

    #[test]
    fn grants_decide_per_access_and_topic() {
        let auth = Auth::new(vec![key(
            "app",
            "sk_app",
            &["orders.*", "audit"],
            &["orders.eu"],
            &[],
        )])
        .unwrap();
        let p = auth.authenticate(Some(&bearer("sk_app"))).unwrap();
        assert_eq!(p.key_name(), Some("app"));
        assert!(p.allows(Access::Read, "orders.us"));
        assert!(p.allows(Access::Read, "audit"));
        assert!(!p.allows(Access::Read, "audit2"));
        assert!(p.allows(Access::Write, "orders.eu"));
        assert!(!p.allows(Access::Write, "orders.us"));
        assert!(!p.allows(Access::Admin, "orders.eu"));
        assert!(p.allows_any("audit"));
        assert!(!p.allows_any("payments"));
        let e = p.require(Access::Write, "orders.us").unwrap_err();
        assert_eq!(e.status, axum::http::StatusCode::FORBIDDEN);
        assert!(
            e.message.contains("\"app\"")
                && e.message.contains("\"orders.us\"")
                && e.message.contains("write"),
            "{}",
            e.message
        );
    }

    #[test]
    fn bad_headers_and_unknown_keys_are_401() {
        let auth = Auth::new(vec![key("app", "sk_app", &["*"], &[], &[])]).unwrap();
        let status = |h: Option<HeaderValue>| {
            let e = auth.authenticate(h.as_ref()).unwrap_err();
            assert_eq!(e.0.status, axum::http::StatusCode::UNAUTHORIZED);
            e.0.message
        };
        assert!(status(None).contains("missing"));
        assert!(status(Some(HeaderValue::from_static("sk_app"))).contains("malformed"));
        assert!(status(Some(HeaderValue::from_static("Basic sk_app"))).contains("malformed"));
        assert!(status(Some(HeaderValue::from_static("Bearer "))).contains("malformed"));
        assert!(
            status(Some(HeaderValue::from_bytes(b"Bearer \xff").unwrap())).contains("malformed")
        );
        assert!(status(Some(bearer("sk_wrong"))).contains("unknown"));
        // The scheme is case-insensitive.
        assert!(
            auth.authenticate(Some(&HeaderValue::from_static("bearer sk_app")))
                .is_ok()
        );
        let response = Unauthorized::new("x").into_response();
        assert_eq!(response.status(), 401);
        assert_eq!(response.headers()[header::WWW_AUTHENTICATE], "Bearer");
    }

    #[test]
    fn lookup_compares_every_key_in_constant_time() {
        let auth = Auth::new(vec![
            key("a", "sk_a", &[], &[], &[]),
            key("b", "sk_b", &[], &[], &[]),
            key("c", "sk_c", &[], &[], &[]),
        ])
        .unwrap();
        for secret in ["sk_a", "sk_c", "sk_none"] {
            CONSTANT_TIME_COMPARES.with(|n| n.set(0));
            let _ = auth.authenticate(Some(&bearer(secret)));
            assert_eq!(
                CONSTANT_TIME_COMPARES.with(Cell::get),
                3,
                "{secret}: every key compared, none skipped after a match"
            );
        }
        let a = [7u8; 32];
        let mut b = a;
        assert!(constant_time_eq(&a, &b));
        b[31] ^= 1;
        assert!(!constant_time_eq(&a, &b));
        b = a;
        b[0] ^= 0x80;
        assert!(!constant_time_eq(&a, &b));
    }

    #[test]
    fn replace_swaps_keys_and_keeps_the_old_ones_on_error() {
        let auth = Auth::new(vec![key("old", "sk_old", &["*"], &[], &[])]).unwrap();
        // Invalid: the old key stays.
        let bad = ApiKeyConfig {
            sha256: "nothex".into(),
            ..key("new", "sk_new", &["*"], &[], &[])
        };
        assert!(auth.replace(vec![bad]).is_err());
        assert!(auth.authenticate(Some(&bearer("sk_old"))).is_ok());
        // Removing every key is refused: it would open the API.
        let e = auth.replace(Vec::new()).unwrap_err();
        assert!(e.contains("restart"), "{e}");
        assert!(auth.enabled());
        // Valid: the new set replaces the old one as a whole.
        auth.replace(vec![key("new", "sk_new", &["t"], &[], &[])])
            .unwrap();
        assert!(auth.authenticate(Some(&bearer("sk_old"))).is_err());
        let p = auth.authenticate(Some(&bearer("sk_new"))).unwrap();
        assert_eq!(p.key_name(), Some("new"));
        // A principal keeps the grants of the generation it was authenticated with.
        auth.replace(vec![key("new", "sk_new", &["u"], &[], &[])])
            .unwrap();
        assert!(p.allows(Access::Read, "t"));
        // From no keys to some keys is a reload like any other.
        let open = Auth::new(Vec::new()).unwrap();
        open.replace(vec![key("k", "sk_k", &[], &[], &[])]).unwrap();
        assert!(open.enabled());
    }

    #[test]
    fn hash_is_lowercase_hex_sha256() {
        // SHA-256("abc") from FIPS 180-2.
        assert_eq!(
            hash_key_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            parse_hex_hash(&hash_key_hex("abc")),
            Some(Sha256::digest(b"abc").into())
        );
    }
}
