//! Object names: where flush objects and checkpoints live in the bucket.
//!
//! ```text
//! PREFIX/objects/00000000000000000042.sluice       flush object with sequence number 42
//! PREFIX/checkpoints/00000000000000000042.sluice   checkpoint taken after flush object 42
//! PREFIX/compacted/00000000000000000007.sluice     compacted object number 7
//! ```
//!
//! **Object ids.** The index and the read cache name the object that holds a run by one `u64`:
//! a flush object by its sequence number, a compacted object (written by
//! [`crate::maintenance`], one partition's runs merged) by [`COMPACTED_ID_BASE`] + its number.
//! Flush sequence numbers stay far below that base (2^62: a trillion objects a second for
//! fifty days), so the two never meet; [`data_object_name`] maps an id to its key.
//!
//! The sequence number is written as exactly 20 decimal digits, zero-padded (20 digits hold
//! every `u64`), so names sort as strings in sequence order: an object-store LIST, which returns
//! keys in lexicographic order, returns them in sequence order, and "list after the last name I
//! know" finds exactly the newer objects. Objects are written create-if-absent under these
//! names, which is what fences a second writer: two writers cannot both create sequence `n`.
//!
//! `PREFIX` is the path part of `--storage s3://BUCKET/PREFIX` without leading or trailing
//! slashes; it may be empty (the names then start with `objects/`).

use crate::error::{ObjectError, Result};

const OBJECTS_DIR: &str = "objects/";
const CHECKPOINTS_DIR: &str = "checkpoints/";
const COMPACTED_DIR: &str = "compacted/";

/// Object ids at and above this name compacted objects (see the module doc); below it, flush
/// objects. Positive as an `i64`, so the index stores it like any sequence number.
pub const COMPACTED_ID_BASE: u64 = 1 << 62;
const SUFFIX: &str = ".sluice";
const DIGITS: usize = 20;

/// What a name in the bucket refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ObjectName {
    /// A flush object with this sequence number.
    Flush(u64),
    /// A checkpoint taken after the flush object with this sequence number.
    Checkpoint(u64),
    /// A compacted object with this object id ([`COMPACTED_ID_BASE`] + its number).
    Compacted(u64),
}

fn trimmed(prefix: &str) -> &str {
    prefix.trim_matches('/')
}

fn dir(prefix: &str, sub: &str) -> String {
    let prefix = trimmed(prefix);
    if prefix.is_empty() {
        sub.to_string()
    } else {
        format!("{prefix}/{sub}")
    }
}

/// The key prefix every flush object's name starts with (for LIST), ending in `/`.
pub fn objects_prefix(prefix: &str) -> String {
    dir(prefix, OBJECTS_DIR)
}

/// The key prefix every checkpoint's name starts with (for LIST), ending in `/`.
pub fn checkpoints_prefix(prefix: &str) -> String {
    dir(prefix, CHECKPOINTS_DIR)
}

/// The key prefix every compacted object's name starts with (for LIST), ending in `/`.
pub fn compacted_prefix(prefix: &str) -> String {
    dir(prefix, COMPACTED_DIR)
}

/// The name of the compacted object with id `id` (≥ [`COMPACTED_ID_BASE`]; a smaller id is
/// taken as number 0).
pub fn compacted_name(prefix: &str, id: u64) -> String {
    let n = id.saturating_sub(COMPACTED_ID_BASE);
    format!("{}{n:020}{SUFFIX}", compacted_prefix(prefix))
}

/// The name of the object that holds runs with this object id: a compacted object at or
/// above [`COMPACTED_ID_BASE`], else a flush object.
pub fn data_object_name(prefix: &str, id: u64) -> String {
    if id >= COMPACTED_ID_BASE {
        compacted_name(prefix, id)
    } else {
        object_name(prefix, id)
    }
}

/// The name of flush object `sequence`.
pub fn object_name(prefix: &str, sequence: u64) -> String {
    format!("{}{sequence:020}{SUFFIX}", objects_prefix(prefix))
}

/// The name of flush object `sequence` of writer `writer` (cluster mode: each broker writes
/// under a name of its own, `objects/<writer>/<seq>.sluice`, relative to the storage prefix).
pub fn writer_object_name(writer: &str, sequence: u64) -> String {
    format!("{}{writer}/{sequence:020}{SUFFIX}", objects_prefix(""))
}

/// The name of the checkpoint taken after flush object `sequence`.
pub fn checkpoint_name(prefix: &str, sequence: u64) -> String {
    format!("{}{sequence:020}{SUFFIX}", checkpoints_prefix(prefix))
}

/// Parses a name made by [`object_name`] or [`checkpoint_name`] with the same `prefix`;
/// anything else (another prefix or directory, a missing or extra character, a number that is
/// not exactly 20 digits or overflows a `u64`) is refused as foreign.
pub fn parse_name(prefix: &str, name: &str) -> Result<ObjectName> {
    let foreign = |reason| ObjectError::ForeignName {
        name: name.to_string(),
        reason,
    };
    let prefix = trimmed(prefix);
    let rest = if prefix.is_empty() {
        name
    } else {
        name.strip_prefix(prefix)
            .and_then(|r| r.strip_prefix('/'))
            .ok_or_else(|| foreign("it is not under the storage prefix"))?
    };
    let (rest, dir) = if let Some(r) = rest.strip_prefix(OBJECTS_DIR) {
        (r, OBJECTS_DIR)
    } else if let Some(r) = rest.strip_prefix(CHECKPOINTS_DIR) {
        (r, CHECKPOINTS_DIR)
    } else if let Some(r) = rest.strip_prefix(COMPACTED_DIR) {
        (r, COMPACTED_DIR)
    } else {
        return Err(foreign(
            "it is in none of objects/, checkpoints/ and compacted/",
        ));
    };
    let digits = rest
        .strip_suffix(SUFFIX)
        .ok_or_else(|| foreign("it does not end in .sluice"))?;
    if digits.len() != DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(foreign(
            "the sequence number is not exactly 20 decimal digits",
        ));
    }
    let sequence: u64 = digits
        .parse()
        .map_err(|_| foreign("the sequence number does not fit in 64 bits"))?;
    Ok(match dir {
        OBJECTS_DIR => ObjectName::Flush(sequence),
        CHECKPOINTS_DIR => ObjectName::Checkpoint(sequence),
        _ => {
            if sequence >= COMPACTED_ID_BASE {
                return Err(foreign("the compacted object number is beyond 2^62"));
            }
            ObjectName::Compacted(COMPACTED_ID_BASE + sequence)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_look_as_documented() {
        assert_eq!(
            object_name("data/prod", 42),
            "data/prod/objects/00000000000000000042.sluice"
        );
        assert_eq!(
            checkpoint_name("/data/", 7),
            "data/checkpoints/00000000000000000007.sluice"
        );
        assert_eq!(object_name("", 0), "objects/00000000000000000000.sluice");
        assert_eq!(
            object_name("p", u64::MAX),
            "p/objects/18446744073709551615.sluice"
        );
    }

    #[test]
    fn names_parse_back() {
        for prefix in ["", "p", "a/b/c", "/trailing/"] {
            for seq in [0, 1, 9, 10, 42, 1 << 40, u64::MAX - 1, u64::MAX] {
                assert_eq!(
                    parse_name(prefix, &object_name(prefix, seq)),
                    Ok(ObjectName::Flush(seq))
                );
                assert_eq!(
                    parse_name(prefix, &checkpoint_name(prefix, seq)),
                    Ok(ObjectName::Checkpoint(seq))
                );
            }
        }
    }

    #[test]
    fn compacted_ids_map_to_their_own_directory() {
        let id = COMPACTED_ID_BASE + 7;
        assert_eq!(
            data_object_name("p", id),
            "p/compacted/00000000000000000007.sluice"
        );
        assert_eq!(data_object_name("p", 7), object_name("p", 7));
        assert_eq!(
            parse_name("p", &data_object_name("p", id)),
            Ok(ObjectName::Compacted(id))
        );
        assert!(parse_name("p", "p/compacted/09999999999999999999.sluice").is_err());
    }

    #[test]
    fn names_sort_as_strings_in_sequence_order() {
        let seqs = [0u64, 1, 2, 9, 10, 11, 99, 100, 1 << 33, u64::MAX];
        let names: Vec<String> = seqs.iter().map(|&s| object_name("p", s)).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
    }

    #[test]
    fn foreign_names_are_refused() {
        let ok = "p/objects/00000000000000000042.sluice";
        assert!(parse_name("p", ok).is_ok());
        for bad in [
            "q/objects/00000000000000000042.sluice",
            "pp/objects/00000000000000000042.sluice",
            "p/object/00000000000000000042.sluice",
            "p/objects/0000000000000000042.sluice",
            "p/objects/000000000000000000042.sluice",
            "p/objects/00000000000000000042.sluic",
            "p/objects/00000000000000000042.sluice.tmp",
            "p/objects/0000000000000000004x.sluice",
            "p/objects/+0000000000000000042.sluice",
            "p/objects/99999999999999999999.sluice",
            "p/objects/sub/00000000000000000042.sluice",
            "p/00000000000000000042.sluice",
            "objects/00000000000000000042.sluice",
            "",
            "p/objects/",
        ] {
            let err = parse_name("p", bad).expect_err(bad);
            assert!(
                matches!(err, ObjectError::ForeignName { .. }),
                "{bad}: {err}"
            );
        }
        assert!(parse_name("", "p/objects/00000000000000000042.sluice").is_err());
    }
}
