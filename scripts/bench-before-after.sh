#!/usr/bin/env bash
# Before/after: the same `sluice bench` workloads against two builds of Sluice, on this machine,
# in one run, alternating (base, head, base, head, ...) so that machine noise falls on both.
# Each run gets a fresh broker and data directory; the broker's own CPU seconds (utime + stime
# from /proc) are read at the end of each run and reported per million records produced.
#
#   scripts/bench-before-after.sh BASE_REV                       # max-100b and fixed-20mbps, 3 rounds
#   ROUNDS=5 WORKLOADS="max-100b" scripts/bench-before-after.sh ddcea0c
#   SERVE_ARGS="--memory-limit 256MiB" scripts/bench-before-after.sh ddcea0c   # head only
#
# BASE_REV is built in a git worktree under target/bench-before-after/base (its own target
# directory, kept between runs); head is this work tree. Each workload file is run with
# `repeats = 1` per round. Results: target/bench-before-after/<timestamp>/summary.txt, plus
# every campaign directory. Environment: ROUNDS (3), WORKLOADS, SERVE_ARGS (extra `serve`
# flags for head), BASE_SERVE_ARGS (for base), OUT.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
base_rev="${1:?usage: scripts/bench-before-after.sh BASE_REV}"
rounds="${ROUNDS:-3}"
workloads="${WORKLOADS:-max-100b fixed-20mbps}"
root="$repo/target/bench-before-after"
out="${OUT:-$root/$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out"

cargo build --release --bin sluice
head_bin="$repo/target/release/sluice"
base_dir="$root/base"
if [ ! -d "$base_dir" ]; then
  git worktree add --detach "$base_dir" "$base_rev" >/dev/null
else
  git -C "$base_dir" checkout --quiet --detach "$base_rev"
fi
(cd "$base_dir" && CARGO_TARGET_DIR="$base_dir/target" cargo build --release --bin sluice)
base_bin="$base_dir/target/release/sluice"

{
  echo "base: $base_rev ($(git rev-parse --short "$base_rev")); head: $(git rev-parse --short HEAD)$(git diff --quiet || echo '+dirty')"
  echo "machine: nproc=$(nproc); memory=$(free -g | awk '/^Mem:/{print $2}') GiB;$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
  echo "rounds: $rounds; workloads: $workloads; head serve args: ${SERVE_ARGS:-none}"
} | tee "$out/machine.txt" >&2

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
broker_pid=""; data_dir=""
cleanup() {
  if [ -n "$broker_pid" ] && kill -0 "$broker_pid" 2>/dev/null; then
    kill -TERM "$broker_pid" 2>/dev/null || true
    wait "$broker_pid" 2>/dev/null || true
  fi
  [ -z "$data_dir" ] || rm -rf "$data_dir"
}
trap cleanup EXIT

# cpu_seconds PID: utime + stime of a live process, in seconds.
cpu_seconds() {
  awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"
}

echo "label,workload,round,produce_rps,consume_rps,e2e_p50_ms,e2e_p99_ms,broker_cpu_s,cpu_s_per_million" > "$out/results.csv"
for round in $(seq 1 "$rounds"); do
  for workload in $workloads; do
    file="$repo/bench/workloads/$workload.toml"
    once="$out/$workload.once.toml"
    sed -E 's/^repeats *=.*$/repeats = 1/' "$file" > "$once"
    grep -q '^repeats' "$once" || echo 'repeats = 1' >> "$once"
    for label in base head; do
      bin="$head_bin"; args="${SERVE_ARGS:-}"
      if [ "$label" = base ]; then bin="$base_bin"; args="${BASE_SERVE_ARGS:-}"; fi
      port="$(free_port)"
      data_dir="$(mktemp -d)"
      # shellcheck disable=SC2086
      "$bin" serve --data-dir "$data_dir" --kafka-addr "127.0.0.1:$port" --http-addr off $args \
        > "$out/broker-$label-$workload-$round.log" 2>&1 &
      broker_pid=$!
      for _ in $(seq 1 100); do
        grep -q "kafka listening on" "$out/broker-$label-$workload-$round.log" && break
        sleep 0.1
      done
      campaign_parent="$out/campaigns/$label-$workload-$round"
      "$head_bin" bench run "$once" --bootstrap "127.0.0.1:$port" --broker-label "$label" \
        --out "$campaign_parent" --quiet
      cpu="$(cpu_seconds "$broker_pid")"
      kill -TERM "$broker_pid"; wait "$broker_pid" 2>/dev/null || true; broker_pid=""
      rm -rf "$data_dir"; data_dir=""
      csv="$(find "$campaign_parent" -name results.csv | head -1)"
      python3 - "$csv" "$label" "$workload" "$round" "$cpu" "$once" >> "$out/results.csv" <<'EOF'
import csv, sys, tomllib
path, label, workload, rnd, cpu, workload_file = sys.argv[1:]
row = next(csv.DictReader(open(path)))
spec = tomllib.load(open(workload_file, "rb"))
# The broker's CPU covers warm-up and measured window alike; records produced in both are
# about the measured rate times their length.
seconds = float(spec.get("warmup_s", 0)) + float(spec.get("duration_s", 0))
records = float(row["produce_rps"]) * seconds
cpu = float(cpu)
per_million = cpu / (records / 1e6) if records else float("nan")
print(",".join([label, workload, rnd, row["produce_rps"], row["consume_rps"], row.get("e2e_p50_ms", ""),
                row.get("e2e_p99_ms", ""), f"{cpu:.2f}", f"{per_million:.2f}"]))
EOF
    done
  done
done

python3 - "$out/results.csv" <<'EOF' | tee "$out/summary.txt"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")
print(f"{'workload':<14} {'metric':<18} {'base min/med/max':>28} {'head min/med/max':>28} {'head/base (medians)':>20}")
for workload in dict.fromkeys(r["workload"] for r in rows):
    for metric in ["produce_rps", "consume_rps", "e2e_p50_ms", "e2e_p99_ms", "broker_cpu_s", "cpu_s_per_million"]:
        cells = {}
        for label in ("base", "head"):
            vals = [num(r[metric]) for r in rows if r["workload"] == workload and r["label"] == label]
            vals = [v for v in vals if v == v]
            cells[label] = vals
        if not cells["base"] or not cells["head"]:
            continue
        fmt = lambda vs: f"{min(vs):.1f} / {statistics.median(vs):.1f} / {max(vs):.1f}"
        ratio = statistics.median(cells["head"]) / statistics.median(cells["base"]) if statistics.median(cells["base"]) else float("nan")
        print(f"{workload:<14} {metric:<18} {fmt(cells['base']):>28} {fmt(cells['head']):>28} {ratio:>20.3f}")
EOF
echo "results in $out" >&2
