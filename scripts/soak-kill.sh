#!/usr/bin/env bash
# A long kill soak: CYCLES (default 100) times, idempotent acks=all producers and a consumer
# group under load, then a SIGKILL of the broker at a random moment and a restart. Not part of
# scripts/test.sh (it takes ~15-25 min). It is one `sluice bench correctness` run, which starts
# the broker itself, checks every record and every committed offset of the group, and exits
# non-zero if anything acknowledged was lost, duplicated, reordered or corrupted, or a
# committed offset went back.
#
#   scripts/soak-kill.sh            # 100 cycles
#   scripts/soak-kill.sh 5          # a short one
#   SEED=123 scripts/soak-kill.sh   # the same kill moments again
#
# Each cycle: a uniformly drawn 0.5x-1.5x of LOAD_S seconds of load, SIGKILL, RESTART_DELAY_S,
# restart, wait until the broker listens again. After the last kill one more LOAD_S of load,
# then everything is read back through the group up to the high watermarks.
# Prints the final report (acknowledged, lost, duplicated, reordered, corrupted; per restart the
# seconds until throughput was full again, min/median/max) and writes it as markdown to
# $OUT/report.md.
# Environment: OUT (target/soak-kill), SEED (drawn from the clock and printed), LOAD_S (6),
# RATE (records/s over all producers, 5000), RECORD_SIZE (256), PARTITIONS (6),
# RESTART_DELAY_S (0.5), RECONNECT_BACKOFF_MAX_MS (1000: librdkafka's reconnect.backoff.max.ms
# for every client; its default, 10000, lets a client whose connects were refused during a
# restart stay away for up to ~10 s, which measures the client rather than the broker), NO_BUILD=1 (use target/release/sluice as it is), SLUICE (another
# sluice binary to run, e.g. one built from a clean checkout; nothing is built then).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
cycles="${1:-100}"
case "$cycles" in '' | *[!0-9]*) echo "usage: $0 [CYCLES]" >&2; exit 2 ;; esac
load_s="${LOAD_S:-6}"
rate="${RATE:-5000}"
record_size="${RECORD_SIZE:-256}"
partitions="${PARTITIONS:-6}"
restart_delay_s="${RESTART_DELAY_S:-0.5}"
reconnect_backoff_max_ms="${RECONNECT_BACKOFF_MAX_MS:-1000}"
out="${OUT:-$repo/target/soak-kill}"

if [ -z "${SLUICE:-}" ] && [ "${NO_BUILD:-0}" != 1 ]; then
  cargo build --release --bin sluice
fi
sluice="${SLUICE:-$repo/target/release/sluice}"
mkdir -p "$out"
home="$(mktemp -d "$repo/target/soak-kill-broker-XXXX")"
bench_pid=""
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  if [ -n "$bench_pid" ] && kill -0 "$bench_pid" 2>/dev/null; then
    # The benchmark stops the brokers it started when it exits; on Linux they also die with
    # it (PR_SET_PDEATHSIG). Its own children, by PID, in case neither happened.
    children="$(pgrep -P "$bench_pid" || true)"
    kill -TERM "$bench_pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$bench_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$bench_pid" 2>/dev/null || true
    for pid in $children; do kill -KILL "$pid" 2>/dev/null || true; done
  fi
  rm -rf "$home"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
seed="${SEED:-$(python3 -c 'import random; print(random.getrandbits(63))')}"
duration_s="$(python3 -c "print(($cycles + 1) * $load_s)")"
workload="$out/soak-kill.toml"
cat >"$workload" <<EOF
# Written by scripts/soak-kill.sh: $cycles kill cycles of ~$load_s s of load each.
name = "soak-kill"
topics = 1
partitions = $partitions
producers = 2
consumers = 2
consumer_groups = 1
record_size = $record_size
keys = true
producer_rate = $rate
acks = "all"
idempotence = true
linger_ms = 5
warmup_s = 0
duration_s = $duration_s
interval_s = 0.5

[producer_config]
"reconnect.backoff.max.ms" = "$reconnect_backoff_max_ms"

[consumer_config]
# Commit often, so that every cycle has commits for the offset check to see.
"auto.commit.interval.ms" = "1000"
"reconnect.backoff.max.ms" = "$reconnect_backoff_max_ms"

[correctness]
kills = $cycles
restart_delay_s = $restart_delay_s
settle_timeout_s = 300
group = true
random_kills = true
seed = $seed
full_fraction = 0.9
EOF

echo "soak-kill: $cycles cycles, seed $seed, $("$sluice" --version), nproc=$(nproc), broker 127.0.0.1:$port" | tee "$out/machine.txt" >&2
# In the background so that this shell's traps run on Ctrl-C; `wait` returns its status.
"$sluice" bench correctness "$workload" --bootstrap "127.0.0.1:$port" --out "$out" \
  --broker-label sluice \
  --broker-cmd "$sluice serve --data-dir $home/data --kafka-addr 127.0.0.1:$port --http-addr off --group-initial-rebalance-delay-ms 0" \
  >"$out/bench.txt" &
bench_pid=$!
status=0
wait "$bench_pid" || status=$?
bench_pid=""
cat "$out/bench.txt"
dir="$(sed -n 's/^results: //p' "$out/bench.txt")"
if [ -n "$dir" ] && [ -f "$dir/campaign.json" ]; then
  python3 - "$dir/campaign.json" "$cycles" "$seed" "$load_s" "$rate" "$record_size" \
    "$partitions" "$restart_delay_s" "$reconnect_backoff_max_ms" <<'PY' | tee "$out/report.md"
import json, statistics, sys
path, cycles, seed, load_s, rate, size, partitions, delay, backoff = sys.argv[1:]
c = json.load(open(path))
# The commit the binary was built from (`-dirty`: with uncommitted changes).
commit = c["git_commit"]
commit = commit[:7] + ("-dirty" if commit.endswith("-dirty") else "")
r = c["points"][0]["repeats"][0]
k = r["correctness"]
rec = k.get("recovery") or {}
def mmm(values):
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    return f"{min(values):.1f} / {statistics.median(values):.1f} / {max(values):.1f}"
print(f"commit `{commit}`, {cycles} cycles, seed {seed}: {load_s} s of load per cycle "
      f"(0.5x-1.5x, random), {rate} records/s of {size} B over 2 idempotent acks=all producers, "
      f"{partitions} partitions, one consumer group of 2, restart delay {delay} s, "
      f"clients' reconnect.backoff.max.ms {backoff}")
print()
print("| | |")
print("|---|---|")
print(f"| verdict | **{'PASSED' if k['passed'] else 'FAILED'}** |")
print(f"| kills (SIGKILL + restart) | {k['kills']} |")
print(f"| acknowledged | {k['acked']:,} |")
print(f"| lost | {k['lost']} |")
print(f"| duplicated | {k['duplicated']} |")
print(f"| reordered | {k['out_of_order']} |")
print(f"| corrupted | {k['corrupted']} |")
print(f"| read back (distinct) / of them never acknowledged | {k['seen']:,} / {k['unacked_present']} |")
print(f"| committed offsets read / went back | {k.get('offset_samples', 0)} / {k.get('offset_regressions', 0)} |")
print(f"| broker listening again after the SIGKILL, s (min / median / max) | {mmm([x['down_s'] for x in k['kill_log']])} |")
if rec:
    print(f"| full throughput again after the SIGKILL, s (min / median / max) | {mmm(rec['per_kill_s'])} |")
    print(f"| \u2026 \"full\": both \u2265 {rec['full_fraction']*100:.0f}% of the median acked / consumed records/s | "
          f"{rec['baseline_acked_rps']:.0f} / {rec['baseline_consumed_rps']:.0f} |")
    print(f"| restarts not back to full before the next kill | {rec['not_recovered']} |")
print(f"| load phase | {r['measured_s']:.0f} s |")
for e in k.get("examples", [])[:10]:
    print(f"\n- {e}")
PY
fi
echo "soak-kill: results in $out (seed $seed)" >&2
exit "$status"
