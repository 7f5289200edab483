#!/usr/bin/env bash
# Builds and runs every cargo-fuzz target under fuzz/ (fuzz/fuzz_targets/*.rs), splitting
# SECONDS (default 60) evenly across them.
#
#   scripts/fuzz.sh          # the bounded run scripts/test.sh does (60 s in all)
#   scripts/fuzz.sh 3600     # the long run: an hour in all
#
# Targets: `request` (arbitrary bytes through framing, decoding and the broker's handlers) and
# `request_lengths` (structure-aware: a valid request of every supported API and version with
# its declared lengths rewritten to hostile values; checks that no allocation outgrows the
# frame and that the length guard never refuses what kafka-protocol decodes).
#
# Needs a nightly Rust toolchain (cargo-fuzz builds with sanitizer flags only nightly has); if
# `rustup toolchain list` shows none, prints one line saying the run is skipped and exits 0.
# Installs cargo-fuzz with `cargo install cargo-fuzz --locked` if it is missing (cached in
# ~/.cargo/bin). Corpora grow under fuzz/corpus/TARGET and crashing inputs are saved under
# fuzz/artifacts/TARGET (both gitignored); any crash makes the script exit non-zero. Replay one
# with `cd fuzz && cargo +nightly fuzz run TARGET artifacts/TARGET/crash-...`; once fixed, copy
# it to fuzz/regressions/TARGET/ (committed), which every run replays first.
set -euo pipefail
cd "$(dirname "$0")/.."

total="${1:-60}"
if ! [[ "$total" =~ ^[0-9]+$ ]] || [ "$total" -lt 1 ]; then
  echo "usage: scripts/fuzz.sh [SECONDS]   (SECONDS: a whole number >= 1, default 60)" >&2
  exit 2
fi

if ! command -v rustup >/dev/null 2>&1 || ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  echo "==> fuzz: skipped: no nightly Rust toolchain (cargo-fuzz needs one: rustup toolchain install nightly)"
  exit 0
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "==> installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

cd fuzz
mapfile -t targets < <(cargo +nightly fuzz list)
if [ "${#targets[@]}" -eq 0 ]; then
  echo "fuzz: no targets under fuzz/fuzz_targets" >&2
  exit 1
fi
per=$(( total / ${#targets[@]} ))
[ "$per" -ge 1 ] || per=1

echo "==> fuzz: building ${#targets[@]} targets"
cargo +nightly fuzz build

# request_lengths reads its first byte as the (api, version) to build: one seed per value
# reaches every supported request type from the first run on.
mkdir -p corpus/request_lengths
for i in $(seq 0 255); do
  seed="corpus/request_lengths/seed-$(printf %03d "$i")"
  [ -e "$seed" ] || printf "\\x$(printf %02x "$i")" >"$seed"
done

status=0
summary=()
for target in "${targets[@]}"; do
  echo "==> fuzz: $target for ${per}s"
  mkdir -p "corpus/$target" "artifacts/$target"
  log="$(mktemp)"
  # Inputs that once crashed a target (fuzz/regressions/TARGET, committed) run first, every time.
  dirs=("corpus/$target")
  [ -d "regressions/$target" ] && dirs+=("regressions/$target")
  if cargo +nightly fuzz run "$target" "${dirs[@]}" -- \
      -max_total_time="$per" -print_final_stats=1 2>&1 | tee "$log" | grep -E '^(#[0-9]+.*DONE|==[0-9]+==|.*panicked|SUMMARY|Done)' ; then :; fi
  runs="$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1 || true)"
  if grep -qE '^(==[0-9]+==ERROR|SUMMARY: libFuzzer|.*panicked at|Test unit written to)' "$log" \
      || ! grep -q 'stat::number_of_executed_units' "$log"; then
    status=1
    summary+=("$target: FAILED after ${runs:-?} executions (artifacts in fuzz/artifacts/$target)")
    tail -40 "$log"
  else
    summary+=("$target: ${runs:-?} executions in ${per}s, no crash")
  fi
  rm -f "$log"
done

echo "==> fuzz summary"
printf '  %s\n' "${summary[@]}"
exit "$status"
