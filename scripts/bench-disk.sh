#!/usr/bin/env bash
# Measures this filesystem's sequential write throughput when every 1 MiB write is followed by
# fdatasync, which is the floor/ceiling context for the partition log's group-commit numbers:
#
#   best  - overwrite a preallocated, zero-filled file (no block allocation, no size change,
#           so fdatasync only has to flush data)
#   grow  - append to a brand-new file (every fdatasync also commits the size/extent change
#           through the filesystem journal)
#
# For each case it reports MiB/s and the fdatasync latency p50/p99 taken from fio's JSON output.
#
# Usage: scripts/bench-disk.sh [--json]
#   --json      print only key=value result lines on stdout (the table goes to stderr)
# Environment:
#   BENCH_DIR   parent directory for the scratch files (default <repo>/target/bench-tmp);
#               it must be on the filesystem you want to measure
#   FIO_SIZE    bytes written per case, with an M or G suffix (default 1G)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bench_dir="${BENCH_DIR:-$repo_root/target/bench-tmp}"
fio_size="${FIO_SIZE:-1G}"
kv_only=0

for arg in "$@"; do
    case "$arg" in
        --json) kv_only=1 ;;
        -h | --help)
            sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *)
            echo "bench-disk: unknown argument: $arg (try --help)" >&2
            exit 2
            ;;
    esac
done

# Human-readable output goes to stdout, or to stderr when only key=value lines are wanted.
say() {
    if [[ $kv_only -eq 1 ]]; then
        printf '%s\n' "$*" >&2
    else
        printf '%s\n' "$*"
    fi
}

size_mib() {
    local s="${1^^}"
    s="${s%IB}"
    s="${s%B}"
    if [[ $s =~ ^([0-9]+)G$ ]]; then
        echo $((BASH_REMATCH[1] * 1024))
    elif [[ $s =~ ^([0-9]+)M$ ]]; then
        echo "${BASH_REMATCH[1]}"
    else
        return 1
    fi
}

if ! size_mb="$(size_mib "$fio_size")" || [[ $size_mb -le 0 ]]; then
    echo "bench-disk: FIO_SIZE must look like 1G or 512M, got '$fio_size'" >&2
    exit 2
fi

if ! command -v fio >/dev/null 2>&1; then
    say "fio not found; installing it with apt-get"
    if ! apt-get install -y fio >&2; then
        apt-get update >&2
        apt-get install -y fio >&2
    fi
fi
if ! command -v python3 >/dev/null 2>&1; then
    echo "bench-disk: python3 is required to parse fio's JSON output" >&2
    exit 1
fi

mkdir -p "$bench_dir"
work_dir="$(mktemp -d "$bench_dir/bench-disk.XXXXXX")"
cleanup() { rm -rf -- "$work_dir"; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

avail_mib="$(df -Pm -- "$work_dir" | awk 'NR == 2 { print $4 }')"
if [[ -n $avail_mib && $avail_mib -lt $((size_mb + 256)) ]]; then
    echo "bench-disk: only ${avail_mib} MiB free in $work_dir, need about $((size_mb + 256)) MiB" >&2
    exit 1
fi

say "bench-disk: fio $(fio --version), ${size_mb} MiB per case, 1 MiB writes + fdatasync each, in $work_dir"

run_fio() {
    local name="$1" file="$2" overwrite="$3"
    fio --name="$name" --filename="$file" --rw=write --bs=1M --size="${size_mb}M" \
        --ioengine=sync --fdatasync=1 --direct=0 --fallocate=none --overwrite="$overwrite" \
        --output-format=json --output="$work_dir/$name.json" >&2
}

# (1) Best case: the file exists at full size and is zero-filled and synced, so fio overwrites
# already-allocated blocks in place.
best_file="$work_dir/best.dat"
say "[1/2] best case: preallocating ${size_mb} MiB with dd, then overwriting it"
dd if=/dev/zero of="$best_file" bs=1M count="$size_mb" conv=fsync status=none
sync
run_fio best "$best_file" 1
rm -f -- "$best_file"

# (2) Growing file: fio starts from a missing file (no fallocate), so every write extends it.
say "[2/2] growing file: appending ${size_mb} MiB to a new file"
sync
run_fio grow "$work_dir/grow.dat" 0
rm -f -- "$work_dir/grow.dat"

python3 - "$work_dir/best.json" "$work_dir/grow.json" "$kv_only" <<'PY'
import json
import sys

MIB = 1024 * 1024


def load(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    # fio may put warnings in front of the JSON document; skip to the first brace.
    start = text.find("{")
    if start < 0:
        sys.exit(f"bench-disk: no JSON in fio output {path}")
    job = json.loads(text[start:])["jobs"][0]
    if job.get("error"):
        sys.exit(f"bench-disk: fio job {job.get('jobname')} failed with error {job['error']}")
    write = job["write"]
    runtime_s = write["runtime"] / 1000.0
    mib_s = write["io_bytes"] / MIB / runtime_s if runtime_s > 0 else 0.0
    pct = job["sync"]["lat_ns"].get("percentile", {})

    def pct_ms(key):
        return pct[key] / 1e6 if key in pct else float("nan")

    return mib_s, pct_ms("50.000000"), pct_ms("99.000000")


best = load(sys.argv[1])
grow = load(sys.argv[2])
kv_only = sys.argv[3] == "1"
table = sys.stderr if kv_only else sys.stdout

print("", file=table)
print("| case | MiB/s | fdatasync p50 ms | fdatasync p99 ms |", file=table)
print("|---|---:|---:|---:|", file=table)
for label, (mib_s, p50, p99) in (
    ("best: overwrite preallocated file, 1 MiB + fdatasync", best),
    ("grow: append to new file, 1 MiB + fdatasync", grow),
):
    print(f"| {label} | {mib_s:.1f} | {p50:.2f} | {p99:.2f} |", file=table)
print("", file=table)

for prefix, (mib_s, p50, p99) in (("fio_best", best), ("fio_grow", grow)):
    print(f"{prefix}_mib_s={mib_s:.1f}")
    print(f"{prefix}_sync_p50_ms={p50:.3f}")
    print(f"{prefix}_sync_p99_ms={p99:.3f}")
PY
