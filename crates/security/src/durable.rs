//! Whole-file durable replace for the small JSON stores (`users.json`, `acls.json`).
//!
//! The stores are small (kilobytes to a few megabytes) and change rarely, so each change
//! rewrites the whole file: write `NAME.tmp`, fsync it, rename it over `NAME`, fsync the
//! directory. A crash at any point leaves either the old file or the new one, never a torn
//! mix:
//!
//! | crash after            | on restart                                             |
//! |------------------------|--------------------------------------------------------|
//! | partial write of tmp   | old file intact; stale tmp ignored and overwritten     |
//! | fsync of tmp           | old file intact (rename not done)                      |
//! | rename, before dir sync| old or new file, both whole (the rename is atomic)     |
//! | dir fsync              | new file                                               |
//!
//! Why fsync the tmp file *before* the rename: without it the rename can reach the disk
//! before the data, and a crash leaves a zero-length or partial file under the real name.
//! Why fsync the directory after: the rename itself lives in the directory, and until the
//! directory is synced a crash may undo it even though the caller was told "durable".

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::SecurityError;

/// The sub-directory of the data directory that holds this crate's files.
pub const SECURITY_DIR: &str = "security";

/// Creates `DATA_DIR/security` if needed (syncing its parent so the new directory entry is
/// durable) and returns its path.
pub(crate) fn security_dir(data_dir: &Path) -> Result<PathBuf, SecurityError> {
    let dir = data_dir.join(SECURITY_DIR);
    if !dir.is_dir() {
        fs::create_dir_all(&dir).map_err(|e| SecurityError::io("create directory", &dir, e))?;
        sync_dir(data_dir)?;
    }
    Ok(dir)
}

/// Reads and parses `path`; `Ok(None)` when the file does not exist.
pub(crate) fn load_json<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, SecurityError> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(SecurityError::io("read", path, e)),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|source| SecurityError::Corrupt {
            path: path.to_path_buf(),
            source,
        })
}

/// Serialises `value` and durably replaces `path` with it.
///
/// Durability: when this returns `Ok`, the new contents are fsynced and the rename is
/// fsynced in the directory; a crash afterwards keeps them. On `Err` the old file is
/// still in place (a stale `.tmp` may remain and is harmless).
pub(crate) fn store_json<T: Serialize>(path: &Path, value: &T) -> Result<(), SecurityError> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(|source| SecurityError::Corrupt {
        path: path.to_path_buf(),
        source,
    })?;
    bytes.push(b'\n');
    let tmp = tmp_path(path);
    // A leftover temp file would keep its own permissions: start afresh.
    let _ = fs::remove_file(&tmp);
    {
        // Owner only: the user file holds salted credentials an attacker could test passwords
        // against offline, and the ACLs say who may do what.
        let mut options = OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options
            .open(&tmp)
            .map_err(|e| SecurityError::io("create", &tmp, e))?;
        file.write_all(&bytes)
            .map_err(|e| SecurityError::io("write", &tmp, e))?;
        file.sync_all()
            .map_err(|e| SecurityError::io("fsync", &tmp, e))?;
    }
    fs::rename(&tmp, path).map_err(|e| SecurityError::io("rename", &tmp, e))?;
    if let Some(dir) = path.parent() {
        sync_dir(dir)?;
    }
    Ok(())
}

fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

fn sync_dir(dir: &Path) -> Result<(), SecurityError> {
    let handle = File::open(dir).map_err(|e| SecurityError::io("open directory", dir, e))?;
    handle
        .sync_all()
        .map_err(|e| SecurityError::io("fsync directory", dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_missing_and_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let sec = security_dir(dir.path()).unwrap();
        let path = sec.join("x.json");
        assert_eq!(load_json::<Vec<u32>>(&path).unwrap(), None);
        store_json(&path, &vec![1u32, 2, 3]).unwrap();
        assert_eq!(load_json::<Vec<u32>>(&path).unwrap(), Some(vec![1, 2, 3]));
        assert!(!tmp_path(&path).exists());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        }
        fs::write(&path, b"{not json").unwrap();
        let err = load_json::<Vec<u32>>(&path).unwrap_err();
        assert!(matches!(err, SecurityError::Corrupt { .. }));
        assert!(err.to_string().contains("x.json"), "{err}");
    }

    #[test]
    fn stale_tmp_file_is_harmless() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("y.json");
        fs::write(tmp_path(&path), b"garbage").unwrap();
        store_json(&path, &vec![7u32]).unwrap();
        assert_eq!(load_json::<Vec<u32>>(&path).unwrap(), Some(vec![7]));
    }
}
