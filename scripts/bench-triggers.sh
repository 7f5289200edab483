#!/usr/bin/env bash
# Event triggers: the engine alone (evaluations/s, memory per entity, allocations per event) and
# ten triggers on a broker in a temporary directory (end-to-end events/s and CPU, firing latency
# at events and at deadlines, recovery time). Prints the machine, commit and load average, then
# the benchmark's min / median / max tables (markdown).
#
# Usage: scripts/bench-triggers.sh [extra benchmark arguments, e.g. --parts engine --repeats 1]
# Environment:
#   SIZE     full (default: 1M entities, 2M broker events, 10M engine events, 3 repeats)
#            or small (the benchmark's own defaults, a smoke run)
#   OUT      where the whole output is kept too (default target/bench-triggers/<time>.txt)
#   BENCH_DIR  scratch directory for the broker (default target/bench-tmp, on local disk)
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
size="${SIZE:-full}"
out="${OUT:-$repo_root/target/bench-triggers/$(date -u +%Y%m%dT%H%M%SZ).txt}"
mkdir -p "$(dirname "$out")"
args=()
[ "$size" = full ] && args+=(--full)
[ -n "${BENCH_DIR:-}" ] && args+=(--dir "$BENCH_DIR")

cargo bench -p sluice-triggers --bench triggers --no-run >/dev/null 2>&1 \
    || cargo bench -p sluice-triggers --bench triggers --no-run
{
    echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates || echo ' (with uncommitted changes)')"
    echo "machine: nproc=$(nproc), memory=$(free -g | awk '/^Mem:/{print $2}') GiB, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r)"
    echo "scratch filesystem: $(df -T "${BENCH_DIR:-$repo_root/target}" | awk 'NR==2{print $2" on "$1}')"
    echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "command: cargo bench -p sluice-triggers --bench triggers -- ${args[*]} $*"
    cargo bench -q -p sluice-triggers --bench triggers -- "${args[@]}" "$@"
    echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
} 2>&1 | tee "$out"
