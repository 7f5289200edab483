//! The security files (SASL users, ACLs) across storage modes: how a change to one becomes
//! durable where the mode keeps metadata, and, in cluster mode, how every broker sees the
//! others' changes.
//!
//! - Local-disk mode: the file is fsynced where it is; nothing more.
//! - Object-storage mode: the new file is recorded in the metadata journal and the answer waits
//!   until it is in the bucket ([`Broker::record_file`]).
//! - Cluster mode: PostgreSQL holds the truth (`sluice.shared_files`), each broker a copy in its
//!   data directory. A change is made on the copy brought up to date first, then stored with a
//!   compare-and-set on the version; when another broker stored first, the copy is brought up
//!   to date again and the change redone (every change here can be: creating an ACL that
//!   exists, deleting one that does not, setting a credential). [`Broker::sync_shared_files`],
//!   called every second, brings every copy up to date and reloads what changed.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use futures::FutureExt;
use futures::future::BoxFuture;

use crate::Broker;
use crate::cluster::ClusterError;

/// How often a change is redone after other brokers changed the same file first.
const CHANGE_ATTEMPTS: usize = 5;

/// One security file a broker shares with the others (cluster mode).
pub struct SharedFile {
    /// Its name in the store: its path relative to the data directory (`security/acls.json`).
    name: String,
    path: PathBuf,
    /// The version of the local copy (0: no stored version known).
    version: AtomicI64,
    /// Makes the part that uses the file read it again.
    reload: Box<dyn Fn() + Send + Sync>,
    /// One change or update of this file at a time on this broker.
    busy: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for SharedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedFile")
            .field("name", &self.name)
            .field("version", &self.version.load(Ordering::Relaxed))
            .finish()
    }
}

/// The files registered with [`Broker::share_file`].
#[derive(Debug, Default)]
pub(crate) struct SharedFiles {
    files: Mutex<Vec<Arc<SharedFile>>>,
}

impl SharedFiles {
    fn find(&self, path: &Path) -> Option<Arc<SharedFile>> {
        let files = self.files.lock().unwrap_or_else(PoisonError::into_inner);
        files.iter().find(|f| f.path == path).cloned()
    }

    fn all(&self) -> Vec<Arc<SharedFile>> {
        self.files
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// What a change of a security file gives: its result, and whether it changed the file.
pub type Change<T> = Arc<dyn Fn() -> (T, bool) + Send + Sync>;

/// How a change of a security file ended.
#[derive(Debug)]
pub enum Changed<T> {
    /// Made, and durable as the storage mode keeps metadata.
    Durable(T),
    /// Made on this broker, but not durable beyond its disk (the reason); in cluster mode the
    /// next sync undoes it.
    NotDurable(T, String),
    /// Not made (the reason): the shared copy could not be read, or the change failed.
    NotMade(String),
}

impl Broker {
    /// Cluster mode: shares the file at `path` (under the data directory) with the other
    /// brokers; `reload` makes its user read it again after another broker's change was
    /// written into it. Call [`Broker::sync_shared_files`] once after, before serving.
    pub fn share_file(&self, path: &Path, reload: Box<dyn Fn() + Send + Sync>) {
        let name = sluice_storage::relative_path(&self.config.data_dir, path)
            .unwrap_or_else(|| path.display().to_string());
        let file = Arc::new(SharedFile {
            name,
            path: path.to_owned(),
            version: AtomicI64::new(0),
            reload,
            busy: tokio::sync::Mutex::new(()),
        });
        self.shared_files
            .files
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(file);
    }

    /// Cluster mode: brings every shared file's local copy up to the stored version, and
    /// stores a local file no broker has stored yet (users added with `sluice user add`
    /// before the first start). Returns how many copies were replaced.
    pub async fn sync_shared_files(&self) -> Result<usize, ClusterError> {
        let Some(meta) = self.cluster().cloned() else {
            return Ok(0);
        };
        let files = self.shared_files.all();
        if files.is_empty() {
            return Ok(0);
        }
        let stored = meta.shared_file_versions().await?;
        let mut replaced = 0;
        for file in files {
            let version = stored
                .iter()
                .find(|(name, _)| *name == file.name)
                .map(|(_, v)| *v);
            let local = file.version.load(Ordering::Acquire);
            match version {
                Some(v) if v == local => {}
                Some(_) => {
                    let _busy = file.busy.lock().await;
                    if pull(&meta, &file).await? {
                        replaced += 1;
                    }
                }
                None => {
                    let _busy = file.busy.lock().await;
                    let Ok(contents) = std::fs::read(&file.path) else {
                        continue;
                    };
                    if meta
                        .store_shared_file(file.name.clone(), 0, contents)
                        .await?
                    {
                        file.version.store(1, Ordering::Release);
                        tracing::info!(file = %file.name, "stored the local file for every broker");
                    } else if pull(&meta, &file).await? {
                        replaced += 1;
                    }
                }
            }
        }
        Ok(replaced)
    }

    /// Makes a change to the security file at `path` with `change` (run on the blocking pool;
    /// it returns its result and whether it changed the file), and makes it durable as the
    /// storage mode keeps metadata (see the module docs).
    pub fn change_security_file<T: Send + 'static>(
        self: &Arc<Self>,
        path: &Path,
        change: Change<T>,
    ) -> BoxFuture<'static, Changed<T>> {
        let broker = Arc::clone(self);
        let path = path.to_owned();
        let shared = self.cluster().cloned().zip(self.shared_files.find(&path));
        async move {
            let Some((meta, file)) = shared else {
                // Local-disk and object-storage modes.
                let Ok((result, durable)) = tokio::task::spawn_blocking(move || {
                    let (result, changed) = change();
                    (result, changed.then(|| broker.record_file(&path)))
                })
                .await
                else {
                    return Changed::NotMade("the change failed".to_owned());
                };
                return match durable {
                    Some(d) => match d.await {
                        Ok(()) => Changed::Durable(result),
                        Err(e) => Changed::NotDurable(result, e.to_string()),
                    },
                    None => Changed::Durable(result),
                };
            };
            let _busy = file.busy.lock().await;
            for _ in 0..CHANGE_ATTEMPTS {
                if let Err(e) = pull(&meta, &file).await {
                    return Changed::NotMade(e.to_string());
                }
                let run = Arc::clone(&change);
                let path = path.clone();
                let Ok((result, contents)) = tokio::task::spawn_blocking(move || {
                    let (result, changed) = run();
                    let contents = changed.then(|| std::fs::read(&path));
                    (result, contents)
                })
                .await
                else {
                    return Changed::NotMade("the change failed".to_owned());
                };
                let contents = match contents {
                    None => return Changed::Durable(result),
                    Some(Err(e)) => return Changed::NotDurable(result, e.to_string()),
                    Some(Ok(c)) => c,
                };
                let expected = file.version.load(Ordering::Acquire);
                match meta
                    .store_shared_file(file.name.clone(), expected, contents)
                    .await
                {
                    Ok(true) => {
                        file.version.store(expected + 1, Ordering::Release);
                        return Changed::Durable(result);
                    }
                    // Another broker stored first: redo the change on its version.
                    Ok(false) => {}
                    Err(e) => {
                        // The local copy holds a change no other broker sees: the next sync
                        // replaces it with the stored version.
                        file.version.store(-1, Ordering::Release);
                        return Changed::NotDurable(result, e.to_string());
                    }
                }
            }
            // The local copy holds this broker's last try; the next sync replaces it.
            file.version.store(-1, Ordering::Release);
            Changed::NotMade(format!(
                "{} was changed by other brokers {CHANGE_ATTEMPTS} times while this change was made; try again",
                file.name
            ))
        }
        .boxed()
    }
}

/// Replaces the local copy of `file` with the stored version when they differ, and reloads
/// it; returns whether it did. Called with `file.busy` held.
async fn pull(
    meta: &Arc<dyn crate::cluster::ClusterMeta>,
    file: &SharedFile,
) -> Result<bool, ClusterError> {
    let Some((version, contents)) = meta.shared_file(file.name.clone()).await? else {
        return Ok(false);
    };
    if version == file.version.load(Ordering::Acquire) {
        return Ok(false);
    }
    let path = file.path.clone();
    tokio::task::spawn_blocking(move || write_atomically(&path, &contents))
        .await
        .map_err(|e| ClusterError::Unavailable(e.to_string()))?
        .map_err(|e| ClusterError::Unavailable(format!("writing {}: {e}", file.path.display())))?;
    file.version.store(version, Ordering::Release);
    (file.reload)();
    tracing::info!(file = %file.name, version, "loaded another broker's change");
    Ok(true)
}

/// Writes `contents` to `path` through a temporary file and a rename, owner-only.
fn write_atomically(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("shared-tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut out = options.open(&tmp)?;
    out.write_all(contents)?;
    out.sync_all()?;
    std::fs::rename(&tmp, path)
}
