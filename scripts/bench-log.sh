#!/usr/bin/env bash
# The partition log's benchmark campaign: the disk's own fdatasync throughput (fio) and the log's
# fsync'd append throughput, measured alternately in one run on the same filesystem, RUNS times,
# then summarised as min/median/max with the log's throughput as a ratio of the disk's.
#
# Usage: scripts/bench-log.sh
# Environment:
#   RUNS        rounds of (fio, append benchmark) (default 3)
#   SECONDS_PER_CASE  measured seconds per append case (default 5)
#   OUT         results directory (default target/bench-log); summary in $OUT/summary.md
#   BENCH_DIR   scratch directory on the filesystem under test (default target/bench-tmp)
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
runs="${RUNS:-3}"
seconds="${SECONDS_PER_CASE:-5}"
out="${OUT:-$repo_root/target/bench-log}"
mkdir -p "$out"
rm -f "$out"/append-*.jsonl "$out"/fio-*.txt

cargo bench -p sluice-log --bench append --no-run >/dev/null 2>&1 || cargo bench -p sluice-log --bench append --no-run
for run in $(seq 1 "$runs"); do
    echo "==> run $run/$runs: fio" >&2
    scripts/bench-disk.sh --json >"$out/fio-$run.txt"
    echo "==> run $run/$runs: append benchmark" >&2
    cargo bench -q -p sluice-log --bench append -- --seconds "$seconds" \
        --json "$out/append-$run.jsonl" >&2
done

{
    echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates || echo ' (with uncommitted changes)')"
    echo "machine: nproc=$(nproc), memory=$(free -g | awk '/^Mem:/{print $2}') GiB, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r)"
    echo "filesystem: $(df -T "$repo_root/target" | awk 'NR==2{print $2" on "$1}')"
    echo "runs: $runs, ${seconds} s per append case"
    echo
    python3 - "$out" "$runs" <<'PY'
import json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
fio = {"best": [], "grow": []}
cases, allocs = {}, {}
for run in range(1, runs + 1):
    for line in open(f"{out}/fio-{run}.txt"):
        k, _, v = line.strip().partition("=")
        if k == "fio_best_mib_s": fio["best"].append(float(v))
        if k == "fio_grow_mib_s": fio["grow"].append(float(v))
    for line in open(f"{out}/append-{run}.jsonl"):
        r = json.loads(line)
        if r["kind"] == "throughput":
            key = (r["record_bytes"], r["batch_bytes"], r["partitions"])
            cases.setdefault(key, []).append(r)
        else:
            allocs.setdefault(r.get("batch_bytes"), []).append(r)
def mmm(xs, fmt="{:.0f}"):
    xs = sorted(xs)
    return " / ".join(fmt.format(x) for x in (xs[0], statistics.median(xs), xs[-1]))
best, grow = statistics.median(fio["best"]), statistics.median(fio["grow"])
print("Disk (fio, 1 MiB writes + fdatasync each, 1 GiB), MiB/s min / median / max:")
print()
print("| case | MiB/s |")
print("|---|---|")
print(f"| preallocated zero-filled file (best case) | {mmm(fio['best'])} |")
print(f"| growing file | {mmm(fio['grow'])} |")
print()
print("Log appends, FlushPolicy::Always, durable throughput, min / median / max over runs:")
print()
print("| record B | batch B | partitions | MiB/s | records/s | fdatasyncs/s | KiB/fdatasync | durable p50 ms | durable p99 ms | median / fio best | median / fio grow |")
print("|---:|---:|---:|---|---|---|---|---|---|---:|---:|")
for key in sorted(cases):
    rs = cases[key]
    med = statistics.median(r["mib_per_s"] for r in rs)
    print(f"| {key[0]} | {key[1]} | {key[2]} | {mmm([r['mib_per_s'] for r in rs])} | "
          f"{mmm([r['records_per_s'] for r in rs])} | {mmm([r['fdatasyncs_per_s'] for r in rs])} | "
          f"{mmm([r['avg_kib_per_fdatasync'] for r in rs])} | {mmm([r['latency_p50_ms'] for r in rs], '{:.1f}')} | "
          f"{mmm([r['latency_p99_ms'] for r in rs], '{:.1f}')} | {med / best:.0%} | {med / grow:.0%} |")
print()
for batch, rs in sorted(allocs.items(), key=lambda kv: str(kv[0])):
    r = rs[-1]
    print(f"Allocations per append, batch {batch} B: " + ", ".join(
        f"{k}={v}" for k, v in r.items() if k not in ("kind",)))
PY
} | tee "$out/summary.md"
