#!/usr/bin/env bash
# HTTP API throughput with 1 KiB records, fsync on (the broker's default): records/s produced and
# read over plain HTTP/1.1 by CLIENTS concurrent keep-alive clients, with 1,000 and 1 record per
# request. Each run starts a fresh release `sluice serve` on free ports and a new data directory,
# creates a topic with PARTITIONS partitions, then runs, in order:
#   produce binary × 1000, produce JSON × 1000, produce binary × 1, produce JSON × 1,
#   consume binary × 1000, consume binary × 1
# (the consume cases read the backlog the produce cases wrote, over and over; see
# crates/http/benches/http_load.rs). Prints one JSON line per case and run, then a summary table
# (min / median / max over the runs).
#
# Environment: RUNS (3), SECONDS_PER_CASE (10), WARMUP (2), CLIENTS (16), PARTITIONS (6),
# RECORD_BYTES (1024), OUT (target/bench-http.jsonl).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
runs="${RUNS:-3}"
seconds="${SECONDS_PER_CASE:-10}"
warmup="${WARMUP:-2}"
clients="${CLIENTS:-16}"
partitions="${PARTITIONS:-6}"
record_bytes="${RECORD_BYTES:-1024}"
out="${OUT:-$repo/target/bench-http.jsonl}"
cargo build --release --bin sluice
cargo bench -p sluice-http --bench http_load --no-run 2>/dev/null
load() { cargo bench -q -p sluice-http --bench http_load -- "$@" 2>>"$dir/load.err"; }
echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates || echo '+dirty'); nproc=$(nproc); memory=$(free -g | awk '/^Mem:/{print $2}') GiB; cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" >&2
pid=""
dir=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; [ -n "$dir" ] && rm -rf "$dir"; return 0; }
trap cleanup EXIT
: >"$out"
for run in $(seq 1 "$runs"); do
  dir="$(mktemp -d "$repo/target/bench-http.XXXX")"
  target/release/sluice serve --data-dir "$dir/data" --kafka-addr 127.0.0.1:0 --http-addr 127.0.0.1:0 >"$dir/log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do grep -q 'kafka listening' "$dir/log" && break; sleep 0.1; done
  kafka="$(grep -o 'kafka listening on 127.0.0.1:[0-9]*' "$dir/log" | grep -o '127.0.0.1:[0-9]*')"
  url="http://$(grep -o 'http listening on 127.0.0.1:[0-9]*' "$dir/log" | grep -o '127.0.0.1:[0-9]*')"
  target/release/sluice topic create bench --partitions "$partitions" --bootstrap "$kafka" >/dev/null
  common=(--url "$url" --topic bench --record-bytes "$record_bytes" --clients "$clients"
    --partitions "$partitions" --warmup "$warmup" --seconds "$seconds")
  for case in "produce binary 1000" "produce json 1000" "produce binary 1" "produce json 1" \
              "consume binary 1000" "consume binary 1"; do
    read -r mode format n <<<"$case"
    sync
    line="$(load "${common[@]}" --mode "$mode" --format "$format" --records-per-request "$n" || true)"
    echo "{\"run\": $run, \"result\": ${line:-null}}" | tee -a "$out"
  done
  cleanup
  pid=""
  dir=""
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
cases = {}
for r in rows:
    res = r["result"]
    if not res:
        continue
    key = (res["mode"], res["format"], res["records_per_request"])
    cases.setdefault(key, []).append(res)
print("| case | records/s min / median / max | MiB/s (median) | request p50 / p99 ms (median run) |")
print("|---|---|---:|---|")
for (mode, fmt, n), rs in cases.items():
    rate = sorted(x["records_per_sec"] for x in rs)
    med = sorted(rs, key=lambda x: x["records_per_sec"])[len(rs) // 2]
    print(f"| {mode} {fmt} × {n} | {rate[0]:,.0f} / {statistics.median(rate):,.0f} / {rate[-1]:,.0f} "
          f"| {med['payload_mib_per_sec']:,.0f} | {med['latency_ms']['p50']:.2f} / {med['latency_ms']['p99']:.2f} |")
PY
