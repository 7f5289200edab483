//! The ACL decision point and its durable store.
//!
//! - [`AclIndex`]: an immutable, in-memory set of validated bindings with an index for
//!   `authorize` — per resource type, literal names in a hash map and prefixed names in
//!   another; a lookup probes the exact name, the literal `*`, and each prefix of the name
//!   that some PREFIXED binding has the length of. Pure: no I/O, no locks.
//! - [`Authorizer`]: the index behind an `RwLock<Arc<_>>` snapshot (readers never wait on
//!   an fsync), the super users, and `DATA_DIR/security/acls.json`, rewritten whole and
//!   durably on every change (see `durable`).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use serde::{Deserialize, Serialize};

use super::{
    AccessControlEntry, AclBinding, AclBindingFilter, AclOperation, AclPermissionType, PatternType,
    Principal, ResourcePattern, ResourceType, WILDCARD,
};
use crate::durable::{load_json, security_dir, store_json};
use crate::error::{AclValidationError, SecurityError};

/// File name of the ACL store inside `DATA_DIR/security`.
pub const ACLS_FILE: &str = "acls.json";
const FORMAT_VERSION: u32 = 1;

/// The parts of a binding `authorize` needs, with the principal parsed once.
#[derive(Debug, Clone)]
struct IndexedEntry {
    principal: Principal,
    host: String,
    operation: AclOperation,
    permission: AclPermissionType,
}

#[derive(Debug, Default, Clone)]
struct TypeIndex {
    literal: HashMap<String, Vec<IndexedEntry>>,
    prefixed: HashMap<String, Vec<IndexedEntry>>,
    /// Byte lengths of the prefixed names present, so a lookup probes only those.
    prefix_lens: BTreeSet<usize>,
}

/// A validated set of bindings and the index `authorize` uses. Build it with
/// [`AclIndex::from_bindings`]; [`Authorizer`] keeps one as its current snapshot.
#[derive(Debug, Default, Clone)]
pub struct AclIndex {
    bindings: BTreeSet<AclBinding>,
    by_type: HashMap<ResourceType, TypeIndex>,
}

impl AclIndex {
    /// Builds an index; every binding must pass [`AclBinding::validate`]. Duplicates
    /// collapse into one, as in Kafka.
    pub fn from_bindings(
        bindings: impl IntoIterator<Item = AclBinding>,
    ) -> Result<Self, AclValidationError> {
        let mut index = AclIndex::default();
        for binding in bindings {
            index.insert(binding)?;
        }
        Ok(index)
    }

    fn insert(&mut self, binding: AclBinding) -> Result<(), AclValidationError> {
        let principal = binding.validate()?;
        if self.bindings.contains(&binding) {
            return Ok(());
        }
        let entry = IndexedEntry {
            principal,
            host: binding.entry.host.clone(),
            operation: binding.entry.operation,
            permission: binding.entry.permission,
        };
        let by_type = self
            .by_type
            .entry(binding.pattern.resource_type)
            .or_default();
        let name = binding.pattern.name.clone();
        match binding.pattern.pattern_type {
            PatternType::Prefixed => {
                by_type.prefix_lens.insert(name.len());
                by_type.prefixed.entry(name).or_default().push(entry);
            }
            _ => by_type.literal.entry(name).or_default().push(entry),
        }
        self.bindings.insert(binding);
        Ok(())
    }

    /// Number of bindings.
    pub fn len(&self) -> usize {
        self.bindings.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bindings.is_empty()
    }

    /// All bindings, in a stable order.
    pub fn bindings(&self) -> impl Iterator<Item = &AclBinding> {
        self.bindings.iter()
    }

    /// Bindings matching `filter`, in a stable order.
    pub fn describe(&self, filter: &AclBindingFilter) -> Vec<AclBinding> {
        self.bindings
            .iter()
            .filter(|b| filter.matches(b))
            .cloned()
            .collect()
    }

    /// Whether the ACLs allow `principal` at `host` to perform `operation` on the named
    /// resource. Super users are not known here (see [`Authorizer::authorize`]).
    ///
    /// A DENY that matches wins over any ALLOW; no matching ALLOW means `false`. ANY or
    /// UNKNOWN as the operation or the resource type are never allowed. Asking for ALL
    /// (Kafka never does) is allowed only by an ALL entry, as in Kafka.
    pub fn authorize(
        &self,
        principal: &Principal,
        host: &str,
        operation: AclOperation,
        resource_type: ResourceType,
        resource_name: &str,
    ) -> bool {
        if matches!(operation, AclOperation::Any | AclOperation::Unknown)
            || matches!(resource_type, ResourceType::Any | ResourceType::Unknown)
        {
            return false;
        }
        let Some(index) = self.by_type.get(&resource_type) else {
            return false;
        };
        let literal = [resource_name, WILDCARD]
            .into_iter()
            .enumerate()
            // Avoid visiting the `*` list twice when the resource is itself named `*`.
            .filter(|&(i, name)| i == 0 || resource_name != name)
            .filter_map(|(_, name)| index.literal.get(name));
        let prefixed = index
            .prefix_lens
            .range(..=resource_name.len())
            // `get` is None where `len` splits a multi-byte character: no such prefix.
            .filter_map(|&len| resource_name.get(..len))
            .filter_map(|prefix| index.prefixed.get(prefix));
        let mut allowed = false;
        for entry in literal.chain(prefixed).flatten() {
            if !applies(entry, principal, host, operation) {
                continue;
            }
            match entry.permission {
                AclPermissionType::Deny => return false,
                AclPermissionType::Allow => allowed = true,
                _ => {}
            }
        }
        allowed
    }
    /// Whether some ALLOW entry on a resource of `resource_type` grants `operation` (or ALL)
    /// to `principal` at `host`, with no DENY for it on a literal `*` (which would cover every
    /// resource of the type). Kafka's `authorizeByResourceType`, used where any one resource
    /// of a type is enough (InitProducerId without a transactional id: WRITE on some topic).
    pub fn allows_any(
        &self,
        principal: &Principal,
        host: &str,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> bool {
        let Some(index) = self.by_type.get(&resource_type) else {
            return false;
        };
        let entry_applies = |e: &IndexedEntry| {
            applies(e, principal, host, operation)
                && (e.operation == operation || e.operation == AclOperation::All)
        };
        let denied_everywhere = index
            .literal
            .get(WILDCARD)
            .into_iter()
            .flatten()
            .any(|e| e.permission == AclPermissionType::Deny && entry_applies(e));
        !denied_everywhere
            && index
                .literal
                .values()
                .chain(index.prefixed.values())
                .flatten()
                .any(|e| e.permission == AclPermissionType::Allow && entry_applies(e))
    }
}

/// Whether an entry on a matching resource applies to this principal, host and operation.
fn applies(
    entry: &IndexedEntry,
    principal: &Principal,
    host: &str,
    operation: AclOperation,
) -> bool {
    if entry.principal != *principal && !entry.principal.is_wildcard() {
        return false;
    }
    if entry.host != WILDCARD && entry.host != host && !same_address(&entry.host, host) {
        return false;
    }
    if entry.operation == AclOperation::All || entry.operation == operation {
        return true;
    }
    // Implied operations apply to ALLOW entries only: denying READ does not deny DESCRIBE.
    entry.permission == AclPermissionType::Allow
        && match operation {
            AclOperation::Describe => matches!(
                entry.operation,
                AclOperation::Read
                    | AclOperation::Write
                    | AclOperation::Delete
                    | AclOperation::Alter
            ),
            AclOperation::DescribeConfigs => entry.operation == AclOperation::AlterConfigs,
            _ => false,
        }
}

/// Whether two host strings name the same IP address in different forms: Kafka writes IPv6
/// addresses in full (`0:0:0:0:0:0:0:1`), Sluice in short (`::1`). Only IPv6 forms differ.
fn same_address(a: &str, b: &str) -> bool {
    a.contains(':')
        && b.contains(':')
        && matches!(
            (a.parse::<std::net::IpAddr>(), b.parse::<std::net::IpAddr>()),
            (Ok(x), Ok(y)) if x == y
        )
}

/// The ACLs `path` holds (none when it does not exist).
fn load_index(path: &Path) -> Result<AclIndex, SecurityError> {
    let path = path.to_path_buf();
    let index = match load_json::<AclsFile>(&path)? {
        None => AclIndex::default(),
        Some(file) => {
            if file.version != FORMAT_VERSION {
                return Err(SecurityError::InvalidStore {
                    path,
                    reason: format!(
                        "format version {} is not supported (expected {FORMAT_VERSION})",
                        file.version
                    ),
                });
            }
            AclIndex::from_bindings(file.acls.into_iter().map(AclBinding::from)).map_err(|e| {
                SecurityError::InvalidStore {
                    path: path.clone(),
                    reason: format!("invalid ACL: {e}"),
                }
            })?
        }
    };
    Ok(index)
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct AclsFile {
    version: u32,
    acls: Vec<StoredAcl>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredAcl {
    resource_type: ResourceType,
    resource_name: String,
    pattern_type: PatternType,
    principal: String,
    host: String,
    operation: AclOperation,
    permission: AclPermissionType,
}

impl From<&AclBinding> for StoredAcl {
    fn from(b: &AclBinding) -> Self {
        StoredAcl {
            resource_type: b.pattern.resource_type,
            resource_name: b.pattern.name.clone(),
            pattern_type: b.pattern.pattern_type,
            principal: b.entry.principal.clone(),
            host: b.entry.host.clone(),
            operation: b.entry.operation,
            permission: b.entry.permission,
        }
    }
}

impl From<StoredAcl> for AclBinding {
    fn from(s: StoredAcl) -> Self {
        AclBinding::new(
            ResourcePattern::new(s.resource_type, s.resource_name, s.pattern_type),
            AccessControlEntry::new(s.principal, s.host, s.operation, s.permission),
        )
    }
}

/// The durable ACL store and the decision point; `Send + Sync`, share it in an `Arc`.
#[derive(Debug)]
pub struct Authorizer {
    path: PathBuf,
    super_users: HashSet<Principal>,
    snapshot: RwLock<Arc<AclIndex>>,
    writer: Mutex<()>,
}

impl Authorizer {
    /// Opens (or starts empty) `DATA_DIR/security/acls.json`. `super_users` are allowed
    /// everything (Kafka's `super.users`). A file that does not parse, or holds a binding
    /// CreateAcls would refuse, is an error naming the file.
    pub fn open(
        data_dir: &Path,
        super_users: impl IntoIterator<Item = Principal>,
    ) -> Result<Self, SecurityError> {
        let path = security_dir(data_dir)?.join(ACLS_FILE);
        let index = load_index(&path)?;
        Ok(Authorizer {
            path,
            super_users: super_users.into_iter().collect(),
            snapshot: RwLock::new(Arc::new(index)),
            writer: Mutex::new(()),
        })
    }

    /// Reads the ACL file again and enforces what it holds from now on (cluster mode, after
    /// another broker's change was written into it). A file that does not load is an error,
    /// and the current ACLs stay.
    pub fn reload(&self) -> Result<usize, SecurityError> {
        let _writer = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        let index = load_index(&self.path)?;
        let count = index.len();
        *self
            .snapshot
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(index);
        Ok(count)
    }

    /// The file the ACLs live in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The current bindings as an immutable snapshot (cheap: one `Arc` clone).
    pub fn snapshot(&self) -> Arc<AclIndex> {
        Arc::clone(&self.snapshot.read().unwrap_or_else(PoisonError::into_inner))
    }

    pub fn is_super_user(&self, principal: &Principal) -> bool {
        self.super_users.contains(principal)
    }

    /// May `principal`, connected from `host`, perform `operation` on the resource?
    /// Super users always may; otherwise see [`AclIndex::authorize`].
    pub fn authorize(
        &self,
        principal: &Principal,
        host: &str,
        operation: AclOperation,
        resource_type: ResourceType,
        resource_name: &str,
    ) -> bool {
        self.is_super_user(principal)
            || self
                .snapshot
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .authorize(principal, host, operation, resource_type, resource_name)
    }

    /// [`AclIndex::allows_any`], or a super user.
    pub fn allows_any(
        &self,
        principal: &Principal,
        host: &str,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> bool {
        self.is_super_user(principal)
            || self
                .snapshot
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .allows_any(principal, host, operation, resource_type)
    }

    /// Bindings matching `filter` (DescribeAcls). A filter with an UNKNOWN element is
    /// refused, as Kafka does.
    pub fn describe(
        &self,
        filter: &AclBindingFilter,
    ) -> Result<Vec<AclBinding>, AclValidationError> {
        filter.validate()?;
        Ok(self.snapshot().describe(filter))
    }

    /// Creates bindings (CreateAcls); returns one result per binding, in order. Invalid
    /// bindings are refused one by one; existing ones succeed without change.
    ///
    /// Durability: when this returns `Ok`, every accepted binding is in the fsynced file
    /// (one write for the whole batch) and already enforced. On `Err` (an I/O failure)
    /// nothing changed, on disk or in memory.
    pub fn create(
        &self,
        bindings: &[AclBinding],
    ) -> Result<Vec<Result<(), AclValidationError>>, SecurityError> {
        let _writer = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        let mut next = (*self.snapshot()).clone();
        let before = next.len();
        let results: Vec<_> = bindings.iter().map(|b| next.insert(b.clone())).collect();
        if next.len() != before {
            self.replace(next)?;
        }
        Ok(results)
    }

    /// Deletes, for each filter, the bindings it matches (DeleteAcls); returns per filter
    /// the deleted bindings, or why the filter was refused. As in Kafka, every filter sees
    /// the bindings as they were before the request, so a binding matched by two filters
    /// is reported by both.
    ///
    /// Durability: when this returns `Ok`, the removals are in the fsynced file (one write
    /// for the batch) and no longer enforced. On `Err` nothing changed.
    pub fn delete(
        &self,
        filters: &[AclBindingFilter],
    ) -> Result<Vec<Result<Vec<AclBinding>, AclValidationError>>, SecurityError> {
        let _writer = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        let current = self.snapshot();
        let results: Vec<_> = filters
            .iter()
            .map(|f| f.validate().map(|()| current.describe(f)))
            .collect();
        let doomed: HashSet<&AclBinding> = results
            .iter()
            .filter_map(|r| r.as_ref().ok())
            .flatten()
            .collect();
        if !doomed.is_empty() {
            let next = AclIndex::from_bindings(
                current.bindings().filter(|b| !doomed.contains(b)).cloned(),
            )
            .expect("bindings already in the index are valid");
            self.replace(next)?;
        }
        Ok(results)
    }

    /// Makes `next` durable, then current. Called with the writer lock held.
    fn replace(&self, next: AclIndex) -> Result<(), SecurityError> {
        let file = AclsFile {
            version: FORMAT_VERSION,
            acls: next.bindings().map(StoredAcl::from).collect(),
        };
        store_json(&self.path, &file)?;
        *self
            .snapshot
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(next);
        Ok(())
    }
}
