//! Sets `SLUICE_GIT_COMMIT` for `machine::git_commit`: the commit of the repository this crate
//! is built from (`git rev-parse HEAD`), suffixed `-dirty` when tracked files have uncommitted
//! changes, or `unknown` when git or the repository is missing. Git trouble never fails the
//! build: a benchmark result with an unknown commit is better than no benchmark.
//!
//! Cargo reruns this script when HEAD moves (checkout, commit: `.git/HEAD` and the branch ref
//! it points to) or the index changes (`git add`, `git commit`). Editing a tracked file without
//! touching the index does not rerun it, so `-dirty` can lag behind until the next index change;
//! watching the whole work tree instead would rerun it on every build (the target directory is
//! inside it).

// A build script talks to cargo through standard output.
#![allow(clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    // crates/bench -> the repository root.
    let root = manifest_dir
        .ancestors()
        .nth(2)
        .unwrap_or(Path::new(""))
        .to_path_buf();

    for watched in watched_paths(&root) {
        if watched.exists() {
            println!("cargo:rerun-if-changed={}", watched.display());
        }
    }
    println!("cargo:rustc-env=SLUICE_GIT_COMMIT={}", commit(&root));
}

/// `<hash>`, `<hash>-dirty` or `unknown`.
fn commit(root: &Path) -> String {
    let Some(hash) = git(root, &["rev-parse", "HEAD"]) else {
        return "unknown".to_owned();
    };
    // `--no-optional-locks`: a plain `git status` may rewrite the index to refresh its stat
    // cache, which would make cargo rerun this script on every build.
    let dirty = git(
        root,
        &[
            "--no-optional-locks",
            "status",
            "--porcelain",
            "--untracked-files=no",
        ],
    )
    .is_some_and(|changes| !changes.is_empty());
    if dirty { format!("{hash}-dirty") } else { hash }
}

/// The files whose change means the commit (or its dirtiness) may have changed: HEAD, the index,
/// and the ref HEAD points to (loose or packed).
fn watched_paths(root: &Path) -> Vec<PathBuf> {
    let mut paths = vec![git_path(root, "HEAD"), git_path(root, "index")];
    // `ref: refs/heads/main` unless HEAD is detached.
    let head = std::fs::read_to_string(git_path(root, "HEAD")).unwrap_or_default();
    if let Some(reference) = head.trim().strip_prefix("ref:") {
        paths.push(git_path(root, reference.trim()));
        paths.push(git_path(root, "packed-refs"));
    }
    paths
}

/// Where `.git/<name>` really is: git knows (worktrees keep HEAD and refs in different
/// directories); without git, guess `<root>/.git/<name>`.
fn git_path(root: &Path, name: &str) -> PathBuf {
    match git(root, &["rev-parse", "--git-path", name]) {
        Some(path) => root.join(path),
        None => root.join(".git").join(name),
    }
}

/// The trimmed standard output of a successful `git` run in `root`; `None` on any failure.
fn git(root: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .args(args)
        .current_dir(root)
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8(output.stdout).ok()?;
    Some(text.trim().to_owned())
}
