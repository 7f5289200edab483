//! The durable credential store: users and their SCRAM credentials (at most one per
//! mechanism per user) in `DATA_DIR/security/users.json`.
//!
//! Where it sits: AlterUserScramCredentials and the CLI write through [`UserStore::alter`];
//! every SASL authentication reads through [`CredentialSource`], so reads must be cheap and
//! never wait for a write's fsync. Readers take a read lock only long enough to clone one
//! credential out of an immutable snapshot (`Arc`); a writer builds the next snapshot,
//! makes it durable, then swaps it in. Writers are serialised by their own mutex, so two
//! writes never race to replace the file.
//!
//! Passwords are never stored, only salt, StoredKey, ServerKey and iterations (base64 in
//! the file). [`UserStore::describe`] shows mechanism and iterations only.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::{Deserialize, Serialize};

use crate::durable::{load_json, security_dir, store_json};
use crate::error::SecurityError;
use crate::scram::{
    CredentialInfo, CredentialSource, MAX_ITERATIONS, MIN_ITERATIONS, ScramCredential,
    ScramMechanism,
};

/// File name of the store inside `DATA_DIR/security`.
pub const USERS_FILE: &str = "users.json";
const FORMAT_VERSION: u32 = 1;

type Users = BTreeMap<String, BTreeMap<ScramMechanism, ScramCredential>>;

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct UsersFile {
    version: u32,
    users: BTreeMap<String, BTreeMap<ScramMechanism, StoredCredential>>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredCredential {
    salt: String,
    stored_key: String,
    server_key: String,
    iterations: u32,
}

/// One change of an AlterUserScramCredentials-style batch.
#[derive(Debug, Clone)]
pub enum CredentialChange {
    /// Set (add or replace) the user's credential for `credential.mechanism`.
    Upsert {
        username: String,
        credential: ScramCredential,
    },
    /// Remove the user's credential for `mechanism`.
    Delete {
        username: String,
        mechanism: ScramMechanism,
    },
}

/// Users and their SCRAM credentials; `Send + Sync`, share it in an `Arc`.
#[derive(Debug)]
pub struct UserStore {
    path: PathBuf,
    snapshot: RwLock<Arc<Users>>,
    writer: Mutex<()>,
}

impl UserStore {
    /// Opens (or starts empty) the store at `DATA_DIR/security/users.json`, creating the
    /// directory if needed. A file that does not parse, or holds impossible values, is an
    /// error naming the file: the broker must not start with half its users missing.
    pub fn open(data_dir: &Path) -> Result<Self, SecurityError> {
        let path = security_dir(data_dir)?.join(USERS_FILE);
        let users = match load_json::<UsersFile>(&path)? {
            None => Users::new(),
            Some(file) => decode(&path, file)?,
        };
        Ok(UserStore {
            path,
            snapshot: RwLock::new(Arc::new(users)),
            writer: Mutex::new(()),
        })
    }

    /// The file this store lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn current(&self) -> Arc<Users> {
        Arc::clone(&self.snapshot.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Applies a batch of changes with one durable write; returns, per change, whether it
    /// changed anything (`false` for deleting a credential that does not exist, which
    /// Kafka answers with `RESOURCE_NOT_FOUND`).
    ///
    /// Refuses the whole batch with `UNACCEPTABLE_CREDENTIAL` if a user name is empty.
    ///
    /// Durability: when this returns `Ok`, the new file is fsynced and renamed into place
    /// and the directory fsynced; readers already see the new credentials. On `Err`
    /// nothing changed, on disk or in memory.
    pub fn alter(&self, changes: &[CredentialChange]) -> Result<Vec<bool>, SecurityError> {
        let _writer = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        let mut users = (*self.current()).clone();
        let mut applied = Vec::with_capacity(changes.len());
        for change in changes {
            match change {
                CredentialChange::Upsert {
                    username,
                    credential,
                } => {
                    if username.is_empty() {
                        return Err(SecurityError::UnacceptableCredential(
                            "user name must not be empty".into(),
                        ));
                    }
                    users
                        .entry(username.clone())
                        .or_default()
                        .insert(credential.mechanism, credential.clone());
                    applied.push(true);
                }
                CredentialChange::Delete {
                    username,
                    mechanism,
                } => {
                    let removed = match users.get_mut(username) {
                        Some(mechs) => {
                            let removed = mechs.remove(mechanism).is_some();
                            if mechs.is_empty() {
                                users.remove(username);
                            }
                            removed
                        }
                        None => false,
                    };
                    applied.push(removed);
                }
            }
        }
        store_json(&self.path, &encode(&users))?;
        *self
            .snapshot
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(users);
        Ok(applied)
    }

    /// Sets one credential. Durability as [`UserStore::alter`].
    pub fn upsert(&self, username: &str, credential: ScramCredential) -> Result<(), SecurityError> {
        self.alter(&[CredentialChange::Upsert {
            username: username.to_owned(),
            credential,
        }])
        .map(|_| ())
    }

    /// Removes one credential; `Ok(false)` if there was none. Durability as
    /// [`UserStore::alter`].
    pub fn delete(&self, username: &str, mechanism: ScramMechanism) -> Result<bool, SecurityError> {
        self.alter(&[CredentialChange::Delete {
            username: username.to_owned(),
            mechanism,
        }])
        .map(|applied| applied[0])
    }

    /// Removes every credential of a user; `Ok(false)` if the user had none. Durability as
    /// [`UserStore::alter`].
    pub fn delete_user(&self, username: &str) -> Result<bool, SecurityError> {
        let changes: Vec<_> = ScramMechanism::ALL
            .into_iter()
            .map(|mechanism| CredentialChange::Delete {
                username: username.to_owned(),
                mechanism,
            })
            .collect();
        Ok(self.alter(&changes)?.contains(&true))
    }

    /// All user names, sorted.
    pub fn list(&self) -> Vec<String> {
        self.current().keys().cloned().collect()
    }

    /// Mechanism and iterations of each of the user's credentials (never keys or salt);
    /// `None` for an unknown user.
    pub fn describe(&self, username: &str) -> Option<Vec<CredentialInfo>> {
        self.current()
            .get(username)
            .map(|mechs| mechs.values().map(ScramCredential::info).collect())
    }

    /// The user's credential for `mechanism`.
    pub fn credential(&self, username: &str, mechanism: ScramMechanism) -> Option<ScramCredential> {
        let snapshot = self.snapshot.read().unwrap_or_else(PoisonError::into_inner);
        snapshot.get(username)?.get(&mechanism).cloned()
    }
}

impl CredentialSource for UserStore {
    fn scram_credential(
        &self,
        username: &str,
        mechanism: ScramMechanism,
    ) -> Option<ScramCredential> {
        self.credential(username, mechanism)
    }
}

fn encode(users: &Users) -> UsersFile {
    let users = users
        .iter()
        .map(|(name, mechs)| {
            let mechs = mechs
                .iter()
                .map(|(mechanism, c)| {
                    let stored = StoredCredential {
                        salt: BASE64.encode(&c.salt),
                        stored_key: BASE64.encode(&c.stored_key),
                        server_key: BASE64.encode(&c.server_key),
                        iterations: c.iterations,
                    };
                    (*mechanism, stored)
                })
                .collect();
            (name.clone(), mechs)
        })
        .collect();
    UsersFile {
        version: FORMAT_VERSION,
        users,
    }
}

fn decode(path: &Path, file: UsersFile) -> Result<Users, SecurityError> {
    let invalid = |reason: String| SecurityError::InvalidStore {
        path: path.to_path_buf(),
        reason,
    };
    if file.version != FORMAT_VERSION {
        return Err(invalid(format!(
            "format version {} is not supported (expected {FORMAT_VERSION})",
            file.version
        )));
    }
    let mut users = Users::new();
    for (name, mechs) in file.users {
        if name.is_empty() {
            return Err(invalid("a user has an empty name".into()));
        }
        let mut decoded = BTreeMap::new();
        for (mechanism, stored) in mechs {
            let field = |what: &str, value: &str, len: Option<usize>| {
                let bytes = BASE64.decode(value).map_err(|_| {
                    invalid(format!(
                        "user {name:?} {mechanism}: {what} is not valid base64"
                    ))
                })?;
                match len {
                    Some(len) if bytes.len() != len => Err(invalid(format!(
                        "user {name:?} {mechanism}: {what} is {} bytes, expected {len}",
                        bytes.len()
                    ))),
                    _ if bytes.is_empty() => Err(invalid(format!(
                        "user {name:?} {mechanism}: {what} is empty"
                    ))),
                    _ => Ok(bytes),
                }
            };
            let hash_len = Some(mechanism.hash_len());
            let credential = ScramCredential {
                mechanism,
                salt: field("salt", &stored.salt, None)?,
                stored_key: field("stored_key", &stored.stored_key, hash_len)?,
                server_key: field("server_key", &stored.server_key, hash_len)?,
                iterations: stored.iterations,
            };
            if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&credential.iterations) {
                return Err(invalid(format!(
                    "user {name:?} {mechanism}: iterations {} outside [{MIN_ITERATIONS}, {MAX_ITERATIONS}]",
                    credential.iterations
                )));
            }
            decoded.insert(mechanism, credential);
        }
        if !decoded.is_empty() {
            users.insert(name, decoded);
        }
    }
    Ok(users)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    fn cred(mechanism: ScramMechanism, password: &str) -> ScramCredential {
        ScramCredential::from_password(mechanism, password, 4096, &mut StdRng::seed_from_u64(3))
            .unwrap()
    }

    #[test]
    fn upsert_describe_delete_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let store = UserStore::open(dir.path()).unwrap();
        assert!(store.list().is_empty());
        store
            .upsert("alice", cred(ScramMechanism::Sha256, "a"))
            .unwrap();
        store
            .upsert("alice", cred(ScramMechanism::Sha512, "a"))
            .unwrap();
        store
            .upsert("bob", cred(ScramMechanism::Sha256, "b"))
            .unwrap();
        assert_eq!(store.list(), ["alice", "bob"]);
        let info = store.describe("alice").unwrap();
        assert_eq!(info.len(), 2);
        assert!(info.iter().all(|i| i.iterations == 4096));
        assert_eq!(store.describe("carol"), None);

        let reopened = UserStore::open(dir.path()).unwrap();
        assert_eq!(reopened.list(), ["alice", "bob"]);
        let c = reopened
            .credential("alice", ScramMechanism::Sha512)
            .unwrap();
        assert!(c.verify_password(b"a"));
        assert_eq!(
            c,
            store.credential("alice", ScramMechanism::Sha512).unwrap()
        );

        assert!(store.delete("bob", ScramMechanism::Sha256).unwrap());
        assert!(!store.delete("bob", ScramMechanism::Sha256).unwrap());
        assert!(store.delete_user("alice").unwrap());
        assert!(!store.delete_user("alice").unwrap());
        assert!(UserStore::open(dir.path()).unwrap().list().is_empty());

        let text = std::fs::read_to_string(store.path()).unwrap();
        assert!(!text.contains("\"a\""), "no password in the file");
        assert!(matches!(
            store.upsert("", cred(ScramMechanism::Sha256, "x")),
            Err(SecurityError::UnacceptableCredential(_))
        ));
    }

    #[test]
    fn batch_reports_per_change() {
        let dir = tempfile::tempdir().unwrap();
        let store = UserStore::open(dir.path()).unwrap();
        let applied = store
            .alter(&[
                CredentialChange::Upsert {
                    username: "u".into(),
                    credential: cred(ScramMechanism::Sha256, "p"),
                },
                CredentialChange::Delete {
                    username: "u".into(),
                    mechanism: ScramMechanism::Sha512,
                },
                CredentialChange::Delete {
                    username: "u".into(),
                    mechanism: ScramMechanism::Sha256,
                },
            ])
            .unwrap();
        assert_eq!(applied, [true, false, true]);
        assert!(store.list().is_empty());
    }

    #[test]
    fn corrupt_files_give_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = UserStore::open(dir.path()).unwrap().path().to_path_buf();
        let good_key = BASE64.encode([0u8; 32]);
        let cases = [
            ("{", "not valid JSON"),
            (r#"{"version":2,"users":{}}"#, "format version 2"),
            (
                r#"{"version":1,"users":{"u":{"SCRAM-SHA-1":{}}}}"#,
                "not valid JSON",
            ),
            (
                &format!(
                    r#"{{"version":1,"users":{{"u":{{"SCRAM-SHA-256":{{"salt":"!!","stored_key":"{good_key}","server_key":"{good_key}","iterations":4096}}}}}}}}"#
                ),
                "salt is not valid base64",
            ),
            (
                &format!(
                    r#"{{"version":1,"users":{{"u":{{"SCRAM-SHA-512":{{"salt":"AA==","stored_key":"{good_key}","server_key":"{good_key}","iterations":4096}}}}}}}}"#
                ),
                "stored_key is 32 bytes, expected 64",
            ),
            (
                &format!(
                    r#"{{"version":1,"users":{{"u":{{"SCRAM-SHA-256":{{"salt":"AA==","stored_key":"{good_key}","server_key":"{good_key}","iterations":1}}}}}}}}"#
                ),
                "iterations 1 outside",
            ),
        ];
        for (contents, expected) in cases {
            std::fs::write(&path, contents).unwrap();
            let err = UserStore::open(dir.path()).unwrap_err().to_string();
            assert!(err.contains(expected), "{contents}: {err}");
            assert!(err.contains("users.json"), "{err}");
        }
    }

    #[test]
    fn readers_see_whole_snapshots_while_a_writer_writes() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(UserStore::open(dir.path()).unwrap());
        let c256 = cred(ScramMechanism::Sha256, "p");
        let c512 = cred(ScramMechanism::Sha512, "p");
        store.upsert("u", c256.clone()).unwrap();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (store, stop, c256) = (Arc::clone(&store), Arc::clone(&stop), c256.clone());
                std::thread::spawn(move || {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        // The SHA-256 credential is never touched by the writer.
                        assert_eq!(
                            store.credential("u", ScramMechanism::Sha256),
                            Some(c256.clone())
                        );
                    }
                })
            })
            .collect();
        for i in 0..20 {
            let change = if i % 2 == 0 {
                CredentialChange::Upsert {
                    username: "u".into(),
                    credential: c512.clone(),
                }
            } else {
                CredentialChange::Delete {
                    username: "u".into(),
                    mechanism: ScramMechanism::Sha512,
                }
            };
            store.alter(&[change]).unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for reader in readers {
            reader.join().unwrap();
        }
        assert_eq!(store.describe("u").unwrap().len(), 1);
    }

    #[test]
    fn store_serves_a_scram_exchange() {
        use crate::scram::{FakeCredentials, ScramServer, ServerNonce};
        let dir = tempfile::tempdir().unwrap();
        let store = UserStore::open(dir.path()).unwrap();
        let salt = BASE64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let credential =
            ScramCredential::from_password_and_salt(ScramMechanism::Sha256, "pencil", &salt, 4096)
                .unwrap();
        store.upsert("user", credential).unwrap();
        let store = UserStore::open(dir.path()).unwrap();
        let mut server = ScramServer::new(
            ScramMechanism::Sha256,
            FakeCredentials::generate(&mut StdRng::seed_from_u64(5)),
        );
        let nonce = ServerNonce::new("%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0").unwrap();
        server
            .client_first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO", &store, nonce)
            .unwrap();
        let last = b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                     p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
        assert_eq!(
            server.client_final(last).unwrap(),
            b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
        assert_eq!(server.authenticated_user(), Some("user"));
    }

    #[test]
    fn store_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<UserStore>();
    }
}
