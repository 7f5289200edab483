#!/usr/bin/env bash
# Runs Sluice's whole test suite: formatting, lints, unit, property, recovery and crash tests,
# black-box tests of the binary, and the real-client compatibility suite (compat/).
# Installs what it needs (idempotently); safe to run on a fresh clone.
#
#   scripts/test.sh                            # everything in the default suite
#   SLUICE_TEST_QUICK=1 scripts/test.sh        # skip fmt/clippy (inner dev loop)
#   SLUICE_TEST_SKIP_COMPAT=1 scripts/test.sh  # skip the real-client suite (all three modes)
set -euo pipefail
cd "$(dirname "$0")/.."

need() { command -v "$1" >/dev/null 2>&1; }
if ! need cargo; then
  echo "error: cargo not found. Install Rust (https://rustup.rs) and re-run." >&2
  exit 1
fi
# rustfmt and clippy ship as rustup components; add them if this toolchain lacks them.
if need rustup; then
  for component in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep -q "^$component" \
      || rustup component add "$component"
  done
fi

# The declared minimum Rust version must build the workspace. With that exact toolchain
# installed, build with it; otherwise compare the declared version with what is known to be
# needed: let-chains (`if let .. && let ..`, Rust 1.88) and the highest `rust-version` of the
# locked dependencies. (Clippy's `incompatible_msrv` lint, on in the clippy step below, flags
# standard-library APIs newer than the declared version.)
echo "==> minimum Rust version"
msrv="$(sed -n 's/^rust-version = "\([0-9.]*\)"$/\1/p' Cargo.toml | head -1)"
[ -n "$msrv" ] || { echo "error: no rust-version in Cargo.toml" >&2; exit 1; }
msrv_norm() { case "$1" in *.*.*) echo "$1" ;; *) echo "$1.0" ;; esac; }
msrv_lt() { [ "$(msrv_norm "$1")" != "$(msrv_norm "$2")" ] \
  && [ "$(printf '%s\n%s\n' "$(msrv_norm "$1")" "$(msrv_norm "$2")" | sort -V | head -1)" = "$(msrv_norm "$1")" ]; }
msrv_toolchain=""
if need rustup; then
  msrv_toolchain="$(rustup toolchain list 2>/dev/null | awk '{print $1}' \
    | grep -E "^$(msrv_norm "$msrv" | sed 's/\./\\./g')-" | head -1 || true)"
fi
if [ -n "$msrv_toolchain" ]; then
  cargo "+$msrv_toolchain" check --workspace --locked
else
  msrv_need="1.88" msrv_why="let-chains in the code"
  msrv_src="$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/ 2>/dev/null || true)"
  while read -r crate; do
    for dir in $msrv_src; do
      [ -f "$dir$crate/Cargo.toml" ] || continue
      rv="$(sed -n 's/^rust-version = "\([0-9.]*\)"$/\1/p' "$dir$crate/Cargo.toml" | head -1)"
      if [ -n "$rv" ] && msrv_lt "$msrv_need" "$rv"; then
        msrv_need="$rv" msrv_why="dependency $crate"
      fi
      break
    done
  done < <(awk '/^name = /{n=$3} /^version = /{v=$3} /^source = "registry/{gsub(/"/,"",n);
    gsub(/"/,"",v); print n "-" v}' Cargo.lock)
  if msrv_lt "$msrv" "$msrv_need"; then
    echo "error: Cargo.toml declares rust-version $msrv, but Rust $msrv_need is needed" \
      "($msrv_why); raise rust-version (and the README) to $msrv_need" >&2
    exit 1
  fi
  echo "rust-version $msrv covers what the code needs (Rust $msrv_need, $msrv_why)"
fi

# kcat (a librdkafka CLI) drives the broker in the black-box tests.
if ! need kcat; then
  echo "==> installing kcat"
  sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get install -y -qq kcat >/dev/null 2>&1 \
    || { $sudo_cmd apt-get update -qq && $sudo_cmd apt-get install -y -qq kcat >/dev/null; }
fi

# MinIO (built with `go install` once, then cached) is the S3 server the object-storage
# tests start on loopback; they fail, not skip, without it.
# shellcheck source=lib/minio.sh
. scripts/lib/minio.sh
ensure_minio

# PostgreSQL (Debian's package, installed if missing) is the metadata store the cluster tests
# start on loopback; they fail, not skip, without it.
# shellcheck source=lib/postgres.sh
. scripts/lib/postgres.sh
ensure_postgres

if [ -z "${SLUICE_TEST_QUICK:-}" ]; then
  echo "==> cargo fmt --check"
  cargo fmt --all -- --check
  echo "==> cargo clippy"
  cargo clippy --workspace --all-targets --locked -- -D warnings
fi
echo "==> cargo test"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
status=0
cargo test --workspace --locked 2>&1 | tee "$log" || status=$?

# A bounded fuzz run: every target under fuzz/ for 60 s in all (the long run is a separate
# command, scripts/fuzz.sh 3600). Without a nightly toolchain it says so and is skipped.
if [ "$status" -eq 0 ]; then
  scripts/fuzz.sh 60 2>&1 | tee -a "$log" || status=$?
fi

# Real Kafka clients (kcat, confluent-kafka, kafka-python, Java kafka-clients) against the
# binary cargo just built, three times: in local mode, in object-storage mode
# (`sluice serve --storage s3://...` on a MinIO the suite starts, the one ensure_minio
# installed above), and against three brokers in cluster mode (that MinIO and a PostgreSQL the
# suite starts). compat/run.sh installs what it needs.
if [ "$status" -eq 0 ] && [ -z "${SLUICE_TEST_SKIP_COMPAT:-}" ]; then
  echo "==> compat/run.sh (real Kafka clients, local mode)"
  SLUICE_BIN="$PWD/target/debug/sluice" compat/run.sh 2>&1 | tee -a "$log" || status=$?
  echo "==> compat/run.sh --storage object (real Kafka clients, object-storage mode)"
  SLUICE_BIN="$PWD/target/debug/sluice" compat/run.sh --storage object 2>&1 | tee -a "$log" || status=$?
  echo "==> compat/run.sh --storage cluster (real Kafka clients, three brokers over MinIO and PostgreSQL)"
  SLUICE_BIN="$PWD/target/debug/sluice" compat/run.sh --storage cluster 2>&1 | tee -a "$log" || status=$?
fi

# One overall line: cargo prints one per test binary (the last being doc-tests), pytest one.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) s += $i } }
     /^=+ .*(passed|failed).* in [0-9.]+s/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^skipped/) s += $i; if ($(i+1) ~ /^errors?/) f += $i } }
     END { printf "%d passed, %d failed, %d skipped\n", p, f, s }' "$log"
exit "$status"
