#!/usr/bin/env bash
# Cluster mode, measured on this machine with 1, 2 and 3 brokers over one MinIO and one durable
# PostgreSQL that this script starts itself (docs/benchmarks.md, "Cluster mode"). On 2 cores
# this shows that the scaling path works and what it costs, not scaling itself: every broker,
# MinIO, PostgreSQL and the load generator share the same two cores. Three parts:
#   throughput  produce throughput, 1 KiB, acks=all, closed loop, idempotent producers, for
#               each broker count, ROUNDS rounds in rotating order; CPU seconds per million
#               records of the brokers (all together) and of PostgreSQL; commits per second
#               and all PostgreSQL transactions per second (commits, their notifications,
#               heartbeats, catalog and bounds polls); commit duration p50/p99 (from the
#               brokers' sluice_cluster_commit_duration_seconds histogram)
#   latency     ack latency at a fixed RATE (default 5 MB/s) for each broker count
#   kill        3 brokers at RATE; one is SIGKILLed after 20 s (and not restarted for 30 s): the seconds
#               until the acknowledged rate is back within 10% of RATE, from `sluice bench
#               correctness`'s per-interval rates
#
#   scripts/bench-cluster.sh                   # everything, ~12 min
#   CASES="kill" scripts/bench-cluster.sh
#
# Everything binds 127.0.0.1 on free ports, lives in one temporary directory, and is stopped
# by PID (PostgreSQL with pg_ctl) on exit. Results: $OUT (target/bench-cluster/<time>):
# summary in machine.txt, throughput.csv, latency.csv, kill.csv, campaigns, logs.
#
# Environment: OUT, CASES [throughput latency kill], ROUNDS [3], COUNTS [1 2 3], RATE [5MB/s],
# WARMUP_S [5], DURATION_S [15], LINGER_MS [250: --object-linger-ms]
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

cases="${CASES:-throughput latency kill}"
rounds="${ROUNDS:-3}"
counts="${COUNTS:-1 2 3}"
rate="${RATE:-5MB/s}"
warmup_s="${WARMUP_S:-5}"
duration_s="${DURATION_S:-15}"
linger_ms="${LINGER_MS:-250}"
out="${OUT:-$repo/target/bench-cluster/$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

minio_bin="${SLUICE_MINIO_BIN:-$HOME/.cache/sluice/tools/minio}"
[ -x "$minio_bin" ] || { echo "error: no MinIO at $minio_bin (scripts/test.sh builds one)" >&2; exit 1; }
# shellcheck source=lib/postgres.sh
. scripts/lib/postgres.sh
ensure_postgres
pg_bin="$SLUICE_PG_BIN_DIR"
for tool in curl python3; do
  command -v "$tool" >/dev/null || { echo "error: $tool is needed and not on PATH" >&2; exit 1; }
done

cargo build --release --bin sluice
{
  echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates Cargo.toml Cargo.lock || echo ' (work tree differs in crates/)')"
  echo "machine: nproc=$(nproc); memory=$(free -g | awk '/^Mem:/{print $2}') GiB;$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); kernel $(uname -r)"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ); load: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "minio: $("$minio_bin" --version 2>/dev/null | head -1); postgres: $("$pg_bin/postgres" --version) (fsync on, synchronous_commit on)"
  echo "cases: $cases; rounds: $rounds; broker counts: $counts; rate: $rate; warmup ${warmup_s}s; duration ${duration_s}s; linger ${linger_ms} ms"
} | tee "$out/machine.txt" >&2

tmp="$(mktemp -d "${TMPDIR:-/tmp}/sluice-bench-cluster.XXXXXX")"
chmod 755 "$tmp"
cp "$repo/target/release/sluice" "$tmp/sluice"
sluice="$tmp/sluice"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

minio_pid=""; broker_pids=(); pg_dir=""
stop_pid() {
  local pid="$1"
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
stop_brokers() { for p in "${broker_pids[@]}"; do stop_pid "$p"; done; broker_pids=(); }
cleanup() {
  stop_brokers
  stop_pid "$minio_pid"
  [ -z "$pg_dir" ] || as_pg "$pg_bin/pg_ctl" -D "$pg_dir" -m fast -w stop >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- MinIO and PostgreSQL ---------------------------------------------------------------------
minio_port="$(free_port)"
export MINIO_ROOT_USER="bench-admin" MINIO_ROOT_PASSWORD="bench-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
MINIO_BROWSER=off "$minio_bin" server "$tmp/minio" --address "127.0.0.1:$minio_port" \
  --console-address "127.0.0.1:$(free_port)" --quiet > "$out/minio.log" 2>&1 &
minio_pid=$!
for _ in $(seq 1 200); do
  curl -sf "http://127.0.0.1:$minio_port/minio/health/live" >/dev/null 2>&1 && break
  sleep 0.1
done
bucket="bench"
curl -sf --aws-sigv4 "aws:amz:us-east-1:s3" --user "$MINIO_ROOT_USER:$MINIO_ROOT_PASSWORD" \
  -X PUT "http://127.0.0.1:$minio_port/$bucket" >/dev/null
export AWS_ENDPOINT_URL="http://127.0.0.1:$minio_port" AWS_REGION="us-east-1"
export AWS_ACCESS_KEY_ID="$MINIO_ROOT_USER" AWS_SECRET_ACCESS_KEY="$MINIO_ROOT_PASSWORD"

pg_port="$(free_port)"
pg_dir="$tmp/pg"
mkdir -p "$pg_dir"
[ "$(id -u)" -ne 0 ] || chown postgres "$pg_dir"
pg_password="bench-$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')"
echo "$pg_password" > "$tmp/pwfile"; touch "$tmp/pg.log"
[ "$(id -u)" -ne 0 ] || chown postgres "$tmp/pwfile" "$tmp/pg.log"
as_pg "$pg_bin/initdb" -D "$pg_dir" -U sluice --auth=scram-sha-256 --pwfile="$tmp/pwfile" >/dev/null
as_pg "$pg_bin/pg_ctl" -D "$pg_dir" -l "$tmp/pg.log" -w \
  -o "-p $pg_port -c listen_addresses=127.0.0.1 -c unix_socket_directories=$pg_dir -c fsync=on -c synchronous_commit=on -c max_connections=200" \
  start >/dev/null
pg_pid="$(head -1 "$pg_dir/postmaster.pid")"
echo "MinIO on 127.0.0.1:$minio_port, PostgreSQL on 127.0.0.1:$pg_port (pid $pg_pid)" >&2

# --- helpers ----------------------------------------------------------------------------------
cpu_seconds() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat" 2>/dev/null || echo 0; }
# PostgreSQL's CPU seconds: the postmaster and every process whose parent it is.
pg_cpu() {
  local total pid
  total="$(cpu_seconds "$pg_pid")"
  for pid in $(ps -o pid= --ppid "$pg_pid"); do
    total="$(awk -v a="$total" -v b="$(cpu_seconds "$pid")" 'BEGIN { print a + b }')"
  done
  echo "$total"
}
psql_q() { PGPASSWORD="$pg_password" "$pg_bin/psql" -X -q -A -t -h 127.0.0.1 -p "$pg_port" -U sluice -d postgres -c "$1"; }
# Transactions committed in this run's database so far.
pg_xacts() { psql_q "SELECT xact_commit FROM pg_stat_database WHERE datname = 'run$run_seq'"; }
run_seq=0
# new_run: a new database and prefix (one cluster each: a database belongs to one bucket prefix).
new_run() { run_seq=$((run_seq + 1)); psql_q "CREATE DATABASE run$run_seq" >/dev/null; }
metadata_url() { echo "postgres://sluice:$pg_password@127.0.0.1:$pg_port/run$run_seq"; }
# start_brokers N: N cluster brokers of a new cluster; sets broker_pids, kports, hports.
start_brokers() {
  local n="$1" i
  new_run
  kports=(); hports=()
  for i in $(seq 1 "$n"); do
    local kp hp log="$out/broker-run$run_seq-$i.log"
    kp="$(free_port)"; hp="$(free_port)"
    "$sluice" serve --data-dir "$tmp/data-$run_seq-$i" --kafka-addr "127.0.0.1:$kp" \
      --http-addr "127.0.0.1:$hp" --storage "s3://$bucket/run$run_seq" \
      --metadata "$(metadata_url)" \
      --object-linger-ms "$linger_ms" --group-initial-rebalance-delay-ms 0 > "$log" 2>&1 &
    broker_pids+=($!)
    kports+=("$kp"); hports+=("$hp")
    for _ in $(seq 1 600); do
      grep -q "kafka listening on" "$log" 2>/dev/null && break
      kill -0 "${broker_pids[-1]}" 2>/dev/null || { echo "error: broker exited; see $log" >&2; exit 1; }
      sleep 0.1
    done
  done
  bootstrap="$(printf '127.0.0.1:%s,' "${kports[@]}")"; bootstrap="${bootstrap%,}"
}
brokers_cpu() { local t=0 p; for p in "${broker_pids[@]}"; do t="$(awk -v a="$t" -v b="$(cpu_seconds "$p")" 'BEGIN { print a + b }')"; done; echo "$t"; }
# Sum of the brokers' commit histograms, as "commits le1 le2 le5 ... inf" (cumulative counts).
commit_histogram() {
  local hp
  for hp in "${hports[@]}"; do curl -sf "http://127.0.0.1:$hp/metrics" || true; done | awk '
    /^sluice_cluster_commit_duration_seconds_bucket/ { match($0, /le="[^"]*"/); le = substr($0, RSTART + 4, RLENGTH - 5); b[le] += $NF; if (!(le in seen)) { seen[le] = 1; order[n++] = le } }
    /^sluice_cluster_commits_total/ { c += $NF }
    END { printf "%d", c; for (i = 0; i < n; i++) printf " %s:%d", order[i], b[order[i]]; print "" }'
}
write_workload() { # FILE NAME RATE
  cat > "$1" <<EOF
name = "$2"
topics = 1
partitions = 6
producers = 2
consumers = 2
record_size = 1024
producer_rate = "$3"
acks = "all"
linger_ms = 5
batch_size = 1048576
warmup_s = $warmup_s
duration_s = $duration_s
repeats = 1
EOF
}
# measure LABEL WORKLOAD N ROUND CSV: one run with N brokers, one CSV row.
measure() {
  local label="$1" wl="$2" n="$3" round="$4" csv="$5"
  start_brokers "$n"
  local cpu0 pg0 x0 h0 cpu1 pg1 x1 h1 dir="$out/campaigns/$label-$n-$round"
  mkdir -p "$out/campaigns"
  cpu0="$(brokers_cpu)"; pg0="$(pg_cpu)"; x0="$(pg_xacts)"; h0="$(commit_histogram)"
  "$sluice" bench run "$wl" --bootstrap "$bootstrap" --broker-label "cluster-$n" --out "$dir" --quiet \
    > "$dir.txt" 2>&1 || { echo "error: sluice bench failed; see $dir.txt" >&2; exit 1; }
  cpu1="$(brokers_cpu)"; pg1="$(pg_cpu)"; x1="$(pg_xacts)"; h1="$(commit_histogram)"
  stop_brokers
  # MinIO refuses writes near a full disk: each run's objects go when it is measured.
  rm -rf "$tmp/minio/$bucket/run$run_seq" "$tmp"/data-"$run_seq"-*
  python3 - "$(find "$dir" -name results.csv | head -1)" "$n" "$round" "$cpu0" "$cpu1" "$pg0" "$pg1" \
    "$x0" "$x1" "$h0" "$h1" "$warmup_s" "$duration_s" >> "$csv" <<'EOF'
import csv, sys
path, n, rnd, cpu0, cpu1, pg0, pg1, x0, x1, h0, h1, warm, dur = sys.argv[1:]
row = next(csv.DictReader(open(path)))
records = float(row["produce_rps"]) * (float(warm) + float(dur))
per_m = lambda a, b: f"{(float(b) - float(a)) / max(records / 1e6, 1e-9):.2f}"
def hist(h):
    parts = h.split()
    return int(parts[0]), [(p.split(":")[0], int(p.split(":")[1])) for p in parts[1:]]
c0, b0 = hist(h0); c1, b1 = hist(h1)
commits = c1 - c0
start = dict(b0)
buckets = [(le, cnt - start.get(le, 0)) for le, cnt in b1]
def quantile(q):
    total = buckets[-1][1] if buckets else 0
    for le, cnt in buckets:
        if total and cnt >= q * total:
            return "+Inf" if le == "+Inf" else f"{float(le) * 1000:g}"
    return ""
xacts = int(x1) - int(x0)
seconds = float(warm) + float(dur)
print(",".join([n, rnd, f"{float(row['produce_rps']):.0f}", f"{float(row['produce_mbps']):.1f}",
                row["ack_p50_ms"], row["ack_p99_ms"], per_m(cpu0, cpu1), per_m(pg0, pg1),
                f"{commits / seconds:.1f}", f"{xacts / seconds:.1f}", quantile(0.5), quantile(0.99)]))
EOF
  tail -1 "$csv" >&2
}
header="brokers,round,produce_rps,produce_mbps,ack_p50_ms,ack_p99_ms,brokers_cpu_s_per_million,pg_cpu_s_per_million,commits_per_s,pg_xacts_per_s,commit_p50_le_ms,commit_p99_le_ms"

# --- 1. throughput, 2. latency ------------------------------------------------------------------
read -r -a order <<< "$counts"
for part in throughput latency; do
  [[ " $cases " == *" $part "* ]] || continue
  wl="$out/$part.toml"
  if [ "$part" = throughput ]; then write_workload "$wl" cluster-1kib-max max; else write_workload "$wl" cluster-1kib-fixed "$rate"; fi
  echo "$header" > "$out/$part.csv"
  for round in $(seq 1 "$rounds"); do
    for i in "${!order[@]}"; do
      n="${order[$(( (i + round - 1) % ${#order[@]} ))]}"
      echo "== $part round $round: $n broker(s)" >&2
      measure "$part" "$wl" "$n" "$round" "$out/$part.csv"
    done
  done
done

# --- 3. a broker killed at a fixed rate ----------------------------------------------------------
if [[ " $cases " == *" kill "* ]]; then
  echo "round,target_rps,killed_broker,recovery_s,min_rps_after_kill" > "$out/kill.csv"
  for round in $(seq 1 "$rounds"); do
    echo "== kill round $round" >&2
    new_run
    cmds=(); addrs=()
    for i in 1 2 3; do
      kp="$(free_port)"
      addrs+=("127.0.0.1:$kp")
      cmds+=(--broker-cmd "$sluice serve --data-dir $tmp/data-kill-$run_seq-$i --kafka-addr 127.0.0.1:$kp --http-addr off --storage s3://$bucket/kill$run_seq --metadata $(metadata_url) --object-linger-ms $linger_ms")
    done
    wl="$out/kill.toml"
    cat > "$wl" <<EOF
name = "cluster-kill"
partitions = 6
producers = 2
consumers = 1
record_size = 1024
keys = true
producer_rate = "$rate"
warmup_s = 0
duration_s = 40
interval_s = 0.5

[correctness]
kills = 1
restart_delay_s = 30
settle_timeout_s = 120
EOF
    dir="$out/campaigns/kill-$round"; mkdir -p "$out/campaigns"
    bootstrap="$(IFS=,; echo "${addrs[*]}")"
    "$sluice" bench correctness "$wl" --out "$dir" --quiet -b "$bootstrap" "${cmds[@]}" > "$dir.txt" 2>&1 \
      || { echo "error: bench correctness failed; see $dir.txt" >&2; tail -5 "$dir.txt" >&2; }
    campaign="$(find "$dir" -name campaign.json | head -1)"
    [ -n "$campaign" ] || continue
    python3 - "$campaign" "$round" >> "$out/kill.csv" <<'EOF'
import csv, json, os, sys
campaign, rnd = sys.argv[1:]
c = json.load(open(campaign))
rep = c["points"][0]["repeats"][0]
kill = rep["correctness"]["kill_log"][0]
iv = list(csv.DictReader(open(os.path.join(os.path.dirname(campaign), "intervals.csv"))))
target = float(rep.get("target_rps") or c["points"][0].get("target_rps") or 0)
t_kill = float(kill["t_s"])
after = [(float(r["t_s"]), float(r["acked_rps"] or 0)) for r in iv if float(r["t_s"]) >= t_kill]
low = min((r for _, r in after), default=0)
back = next((t for t, r in after if t > t_kill + 0.5 and r >= 0.9 * target), None)
print(",".join([rnd, f"{target:.0f}", str(kill.get("broker")), f"{back - t_kill:.1f}" if back else "", f"{low:.0f}"]))
EOF
    tail -1 "$out/kill.csv" >&2
    rm -rf "$tmp/minio/$bucket/kill$run_seq" "$tmp"/data-kill-"$run_seq"-*
  done
fi
echo "results: $out" >&2
