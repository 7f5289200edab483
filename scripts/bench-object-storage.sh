#!/usr/bin/env bash
# Object-storage mode, measured on this machine against a MinIO that this script starts itself
# (docs/benchmarks.md, "Object-storage mode"). Five parts, all in one run:
#   throughput  produce throughput, 1 KiB, acks=all, closed loop: local mode, object mode
#               (default linger) and Apache Kafka 4.3.1 (../shared/kafka-baseline), ROUNDS
#               rounds in rotating order; broker CPU s per million records next to each
#   latency     ack latency at a fixed 20 MB/s of 1 KiB for each --object-linger-ms in LINGERS
#               (and local mode), each followed by MinIO's own PUT latency for objects of the
#               size the broker wrote (crates/objstore/examples/put_latency.rs)
#   puts        PUTs per second (sluice_object_puts_total) at a fixed moderate rate for each
#               partition count in PARTITION_COUNTS, default linger
#   drain       a backlog of BACKLOG_MIB written with kcat, the broker stopped, then consumed
#               from the start by kcat: object mode restarted on an EMPTY data directory (cold
#               caches, index rebuilt from the bucket) vs local mode restarted on its data
#   (cost)      computed from these results in docs/benchmarks.md
#
#   scripts/bench-object-storage.sh                                   # everything, ~20 min
#   CASES="latency" LINGERS="25 250" scripts/bench-object-storage.sh
#   QUICK=1 scripts/bench-object-storage.sh                           # a dry run, ~4 min
#
# MinIO: $SLUICE_MINIO_BIN, else ~/.cache/sluice/tools/minio (scripts/lib/minio.sh builds it).
# Everything binds 127.0.0.1 on free ports, lives in one temporary directory, and is stopped
# by PID on exit. Results: $OUT (target/bench-object-storage/<time>): summary.txt, *.csv, the
# campaign directories of `sluice bench`, broker and MinIO logs.
#
# Environment (defaults in brackets):
#   OUT, CASES [throughput latency puts drain], ROUNDS [3], QUICK [0; 1 = short everything]
#   BROKERS [local object kafka local-pipelined object-pipelined]: "-pipelined" runs the same
#     load with idempotence off and 32 requests in flight per connection
#   WARMUP_S [5], DURATION_S [15: throughput], LAT_DURATION_S [20: latency and puts]
#   TP_PRODUCERS [2], TP_OBJECT_ARGS [none: extra `serve` flags for object mode, throughput]
#   LINGERS [25 100 250], LAT_CLIENTS [idempotent pipelined], LAT_BATCH [1048576],
#   LAT_CLIENT_LINGER_MS [1: the producers' linger.ms in the latency part]
#   PARTITION_COUNTS [1 100 1000], PUTS_RATE [5MB/s], BACKLOG_MIB [2048]
#   PUT_COUNT [200: PUTs per put_latency run], KAFKA_BASELINE_DIR
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

if [ "${QUICK:-0}" = 1 ]; then
  : "${ROUNDS:=1}" "${WARMUP_S:=2}" "${DURATION_S:=5}" "${LAT_DURATION_S:=5}"
  : "${BACKLOG_MIB:=128}" "${PUT_COUNT:=30}" "${PARTITION_COUNTS:=1 100}"
fi
cases="${CASES:-throughput latency puts drain}"
rounds="${ROUNDS:-3}"
brokers="${BROKERS:-local object kafka local-pipelined object-pipelined}"
warmup_s="${WARMUP_S:-5}"
duration_s="${DURATION_S:-15}"
lat_duration_s="${LAT_DURATION_S:-20}"
lingers="${LINGERS:-25 100 250}"
partition_counts="${PARTITION_COUNTS:-1 100 1000}"
puts_rate="${PUTS_RATE:-5MB/s}"
backlog_mib="${BACKLOG_MIB:-2048}"
put_count="${PUT_COUNT:-200}"
lat_batch="${LAT_BATCH:-1048576}"
lat_client_linger="${LAT_CLIENT_LINGER_MS:-1}"
tp_producers="${TP_PRODUCERS:-2}"
lat_clients="${LAT_CLIENTS:-idempotent pipelined}"
tp_object_args="${TP_OBJECT_ARGS:-}"
out="${OUT:-$repo/target/bench-object-storage/$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

minio_bin="${SLUICE_MINIO_BIN:-$HOME/.cache/sluice/tools/minio}"
if ! [ -x "$minio_bin" ]; then
  echo "error: no MinIO at $minio_bin: set SLUICE_MINIO_BIN, or run scripts/test.sh once (it builds one)" >&2
  exit 1
fi
for tool in kcat curl python3; do
  command -v "$tool" >/dev/null || { echo "error: $tool is needed and not on PATH" >&2; exit 1; }
done
case " $cases " in
  *" throughput "*) case " $brokers " in *" kafka"*) source "$repo/scripts/lib/kafka-baseline.sh" ;; esac ;;
esac

cargo build --release --bin sluice
cargo build --release -p sluice-objstore --example put_latency

{
  echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates Cargo.toml Cargo.lock || echo ' (work tree differs in crates/: see git-diff-stat.txt)')"
  echo "machine: nproc=$(nproc); memory=$(free -g | awk '/^Mem:/{print $2}') GiB;$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); kernel $(uname -r)"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ); load: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "minio: $("$minio_bin" --version 2>/dev/null | head -1)"
  echo "cases: $cases; rounds: $rounds; brokers: $brokers; warmup ${warmup_s}s; throughput ${duration_s}s; latency/puts ${lat_duration_s}s"
  echo "throughput producers: $tp_producers; object-mode extra flags there: ${tp_object_args:-none}; latency batch.size: $lat_batch"
  echo "lingers: $lingers; partitions: $partition_counts at $puts_rate; backlog ${backlog_mib} MiB; PUTs per put_latency run: $put_count"
} | tee "$out/machine.txt" >&2
git diff --stat HEAD -- crates Cargo.toml Cargo.lock > "$out/git-diff-stat.txt" || true

tmp="$(mktemp -d "${TMPDIR:-/tmp}/sluice-bench-objstore.XXXXXX")"
# Copies of the binaries: the shared target directory may be rebuilt by someone else while
# this runs, and every broker of one run must be the same build.
cp "$repo/target/release/sluice" "$tmp/sluice"
cp "$repo/target/release/examples/put_latency" "$tmp/put_latency"
sluice="$tmp/sluice"
put_latency="$tmp/put_latency"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

minio_pid=""; sluice_pid=""; sampler_pid=""; kafka_home=""
stop_pid() { # PID: TERM, wait up to 30 s, then KILL
  local pid="$1"
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
stop_sampler() { [ -z "$sampler_pid" ] || { kill "$sampler_pid" 2>/dev/null || true; wait "$sampler_pid" 2>/dev/null || true; }; sampler_pid=""; }
stop_sluice() { stop_pid "$sluice_pid"; sluice_pid=""; }
stop_kafka() {
  if [ -n "$kafka_home" ]; then
    KB_HOME="$kafka_home" "$KAFKA_BASELINE_DIR/stop.sh" --clean >/dev/null 2>&1 || true
    rm -rf "$kafka_home"; kafka_home=""
  fi
}
cleanup() {
  stop_sampler
  stop_sluice
  stop_kafka
  stop_pid "$minio_pid"; minio_pid=""
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- MinIO ------------------------------------------------------------------------------------
minio_port="$(free_port)"
export MINIO_ROOT_USER="bench-admin" MINIO_ROOT_PASSWORD="bench-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
MINIO_BROWSER=off "$minio_bin" server "$tmp/minio" --address "127.0.0.1:$minio_port" \
  --console-address "127.0.0.1:$(free_port)" --quiet > "$out/minio.log" 2>&1 &
minio_pid=$!
for _ in $(seq 1 200); do
  curl -sf "http://127.0.0.1:$minio_port/minio/health/live" >/dev/null 2>&1 && break
  kill -0 "$minio_pid" 2>/dev/null || { echo "error: MinIO exited; see $out/minio.log" >&2; exit 1; }
  sleep 0.1
done
bucket="bench"
curl -sf --aws-sigv4 "aws:amz:us-east-1:s3" --user "$MINIO_ROOT_USER:$MINIO_ROOT_PASSWORD" \
  -X PUT "http://127.0.0.1:$minio_port/$bucket" >/dev/null
export AWS_ENDPOINT_URL="http://127.0.0.1:$minio_port" AWS_REGION="us-east-1"
export AWS_ACCESS_KEY_ID="$MINIO_ROOT_USER" AWS_SECRET_ACCESS_KEY="$MINIO_ROOT_PASSWORD"
echo "MinIO on 127.0.0.1:$minio_port (pid $minio_pid), data in $tmp/minio" >&2

# --- helpers ----------------------------------------------------------------------------------
cpu_seconds() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"; }
# The whole machine's CPU jiffies as "busy total" (busy = all but idle and iowait).
machine_jiffies() { awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t }' /proc/stat; }
prefix_seq=0
# start_sluice MODE(local|object) DATA_DIR LOG [extra serve args...]; sets sluice_pid, kport, hport.
# Object mode writes under a new prefix unless PREFIX is set.
start_sluice() {
  local mode="$1" dir="$2" log="$3"; shift 3
  kport="$(free_port)"; hport="$(free_port)"
  local storage=()
  if [ "$mode" = object ]; then
    if [ -z "${PREFIX:-}" ]; then prefix_seq=$((prefix_seq + 1)); prefix="run$prefix_seq"; else prefix="$PREFIX"; fi
    storage=(--storage "s3://$bucket/$prefix")
  fi
  mkdir -p "$dir"
  "$sluice" serve --data-dir "$dir" --kafka-addr "127.0.0.1:$kport" --http-addr "127.0.0.1:$hport" \
    --group-initial-rebalance-delay-ms 0 "${storage[@]}" "$@" > "$log" 2>&1 &
  sluice_pid=$!
  for _ in $(seq 1 600); do
    grep -q "kafka listening on" "$log" 2>/dev/null && return 0
    kill -0 "$sluice_pid" 2>/dev/null || { echo "error: sluice exited; see $log" >&2; tail -5 "$log" >&2; exit 1; }
    sleep 0.1
  done
  echo "error: sluice did not start within 60 s; see $log" >&2; exit 1
}
start_kafka() {
  kafka_home="$(mktemp -d "$tmp/kafka.XXXX")"
  kport="$(free_port)"
  KB_HOME="$kafka_home" KAFKA_PORT="$kport" KAFKA_CONTROLLER_PORT="$(free_port)" \
    "$KAFKA_BASELINE_DIR/start.sh" --fresh >/dev/null
  kafka_pid="$(cat "$kafka_home/kafka.pid")"
}
# The object-mode counters, one line: puts put_bytes gets get_bytes hits_memory hits_disk misses.
object_counters() {
  curl -sf "http://127.0.0.1:$hport/metrics" | awk '
    function v(name) { return (name in m) ? m[name] : 0 }
    /^sluice_object_/ { split($1, a, "{"); m[a[1]] += $NF }
    END { printf "%.0f %.0f %.0f %.0f %.0f %.0f %.0f\n", v("sluice_object_puts_total"), v("sluice_object_put_bytes_total"),
            v("sluice_object_gets_total"), v("sluice_object_get_bytes_total"),
            v("sluice_object_cache_hits_memory_total"), v("sluice_object_cache_hits_disk_total"),
            v("sluice_object_cache_misses_total") }'
}
# Samples the counters once a second into FILE (time puts put_bytes gets ...), in the background.
start_sampler() {
  local file="$1"
  ( while true; do echo "$(date +%s.%N) $(object_counters || echo '0 0 0 0 0 0 0')"; sleep 1; done ) > "$file" &
  sampler_pid=$!
}
# write_workload FILE NAME PARTITIONS PRODUCERS CONSUMERS RATE LINGER BATCH WARMUP DURATION
write_workload() {
  cat > "$1" <<EOF
name = "$2"
topics = 1
partitions = $3
producers = $4
consumers = $5
record_size = 1024
producer_rate = "$6"
acks = "all"
linger_ms = $7
batch_size = $8
warmup_s = $9
duration_s = ${10}
repeats = 1
EOF
}
# bench_run WORKLOAD LABEL DIR: runs `sluice bench run` against 127.0.0.1:$kport; prints the
# results.csv path.
bench_run() {
  mkdir -p "$(dirname "$3")"
  "$sluice" bench run "$1" --bootstrap "127.0.0.1:$kport" --broker-label "$2" --out "$3" --quiet \
    > "$3.txt" 2>&1 || { echo "error: sluice bench failed; see $3.txt" >&2; tail -5 "$3.txt" >&2; exit 1; }
  find "$3" -name results.csv | head -1
}

# --- 1. throughput ----------------------------------------------------------------------------
if [[ " $cases " == *" throughput "* ]]; then
  wl="$out/throughput.toml"
  # 1 MiB producer batches for all three: with acks after a PUT, a producer's bytes in flight
  # (5 requests per connection under idempotence) must cover the linger.
  write_workload "$wl" produce-1kib-max 6 "$tp_producers" 2 max 5 1048576 "$warmup_s" "$duration_s"
  # BROKER-pipelined: the same load with idempotence off and 32 requests in flight per
  # connection (the broker's limit) instead of librdkafka's 5 under idempotence.
  wl_pipelined="$out/throughput-pipelined.toml"
  write_workload "$wl_pipelined" produce-1kib-max-pipelined 6 "$tp_producers" 2 max 5 1048576 "$warmup_s" "$duration_s"
  sed -i 's/^repeats = 1$/repeats = 1\nidempotence = false/' "$wl_pipelined"
  printf '\n[producer_config]\n"max.in.flight.requests.per.connection" = "32"\n' >> "$wl_pipelined"
  echo "round,broker,produce_rps,produce_mbps,consume_rps,ack_p50_ms,ack_p99_ms,broker_cpu_s,cpu_s_per_million,puts,put_bytes,gets,steal_pct,minio_cpu_s,machine_busy_pct" \
    > "$out/throughput.csv"
  read -r -a order <<< "$brokers"
  for round in $(seq 1 "$rounds"); do
    for i in "${!order[@]}"; do
      broker="${order[$(( (i + round - 1) % ${#order[@]} ))]}"
      echo "== throughput round $round: $broker" >&2
      counters="0 0 0 0 0 0 0"
      mode="${broker%-pipelined}"; this_wl="$wl"
      [ "$mode" = "$broker" ] || this_wl="$wl_pipelined"
      case "$mode" in
        kafka) start_kafka; pid="$kafka_pid" ;;
        local) start_sluice local "$tmp/data-tp" "$out/broker-throughput-$broker-$round.log"; pid="$sluice_pid" ;;
        # shellcheck disable=SC2086
        object) start_sluice object "$tmp/data-tp" "$out/broker-throughput-$broker-$round.log" $tp_object_args; pid="$sluice_pid" ;;
        *) echo "error: unknown broker $broker in BROKERS" >&2; exit 1 ;;
      esac
      cpu0="$(cpu_seconds "$pid")"; mcpu0="$(cpu_seconds "$minio_pid")"; jiffies0="$(machine_jiffies)"
      csv="$(bench_run "$this_wl" "$broker" "$out/campaigns/throughput-$broker-$round")"
      cpu1="$(cpu_seconds "$pid")"; mcpu1="$(cpu_seconds "$minio_pid")"; jiffies1="$(machine_jiffies)"
      [ "$mode" = object ] && counters="$(object_counters)"
      if [ "$mode" = kafka ]; then stop_kafka; else stop_sluice; rm -rf "$tmp/data-tp"; fi
      [ "$mode" = object ] && rm -rf "$tmp/minio/$bucket/$prefix"
      python3 - "$csv" "$round" "$broker" "$cpu0" "$cpu1" "$warmup_s" "$duration_s" "$counters" \
        "$(awk -v a="$mcpu0" -v b="$mcpu1" 'BEGIN { printf "%.2f", b - a }')" "$jiffies0" "$jiffies1" \
        >> "$out/throughput.csv" <<'EOF'
import csv, os, sys
path, rnd, broker, cpu0, cpu1, warm, dur, counters, minio_cpu, j0, j1 = sys.argv[1:]
(b0, t0), (b1, t1) = ([int(x) for x in j.split()] for j in (j0, j1))
busy = f"{100 * (b1 - b0) / max(1, t1 - t0):.0f}"
row = next(csv.DictReader(open(path)))
iv = list(csv.DictReader(open(os.path.join(os.path.dirname(path), "intervals.csv"))))
steal = [float(r["steal"]) for r in iv if r.get("steal")]
cpu = float(cpu1) - float(cpu0)
records = float(row["produce_rps"]) * (float(warm) + float(dur))
c = counters.split()
print(",".join([rnd, broker, row["produce_rps"], row["produce_mbps"], row["consume_rps"], row["ack_p50_ms"],
                row["ack_p99_ms"], f"{cpu:.2f}", f"{cpu / (records / 1e6):.2f}", c[0], c[1], c[2],
                f"{100 * sum(steal) / len(steal):.1f}" if steal else "", minio_cpu, busy]))
EOF
      tail -1 "$out/throughput.csv" >&2
    done
  done
fi

# --- 2. ack latency at 20 MB/s vs linger, next to MinIO's PUT latency ---------------------------
# Two client settings: `idempotent` (the bench default: librdkafka keeps at most 5 requests in
# flight per connection, and each request holds one partition's batch) and `pipelined`
# (idempotence off, 32 requests in flight: the broker's per-connection limit), which shows what
# the broker itself adds once the client does not queue records behind full request slots.
if [[ " $cases " == *" latency "* ]]; then
  echo "client,linger_ms,produce_rps,ack_p50_ms,ack_p99_ms,ack_max_ms,e2e_p99_ms,broker_cpu_s,cpu_s_per_million,puts,puts_per_s,object_bytes,gets,gb_read,put_p50_ms,put_p99_ms,put_max_ms,steal_pct,broker_produce_p50_le_ms,broker_produce_p99_le_ms,broker_produce_mean_ms" \
    > "$out/latency.csv"
  for client in $lat_clients; do
    wl="$out/latency-$client.toml"
    # 1 MiB batches: an idempotent producer can have at most 5 x batch_size waiting for PUTs; at
    # 10 MB/s per producer and a 250 ms linger the default 128 KiB batches are too small.
    write_workload "$wl" "fixed-20mbps-$client" 6 2 2 "20MB/s" "$lat_client_linger" "$lat_batch" "$warmup_s" "$lat_duration_s"
    if [ "$client" = pipelined ]; then
      sed -i 's/^repeats = 1$/repeats = 1\nidempotence = false/' "$wl"
      printf '\n[producer_config]\n"max.in.flight.requests.per.connection" = "32"\n' >> "$wl"
    fi
    points="$lingers"
    [ "$client" = idempotent ] && points="$lingers local"
    for linger in $points; do
      echo "== latency ($client): linger $linger" >&2
      if [ "$linger" = local ]; then
        start_sluice local "$tmp/data-lat" "$out/broker-latency-$client-local.log"
      else
        start_sluice object "$tmp/data-lat" "$out/broker-latency-$client-$linger.log" --object-linger-ms "$linger"
      fi
      start_sampler "$out/latency-$client-$linger.samples"
      cpu0="$(cpu_seconds "$sluice_pid")"
      csv="$(bench_run "$wl" "$client-linger-$linger" "$out/campaigns/latency-$client-$linger")"
      cpu1="$(cpu_seconds "$sluice_pid")"
      stop_sampler
      counters="$(object_counters || echo '0 0 0 0 0 0 0')"
      # The broker's own Produce time (decode to response, the wait for the PUT included).
      curl -sf "http://127.0.0.1:$hport/metrics" > "$out/metrics-latency-$client-$linger.txt" || true
      stop_sluice; rm -rf "$tmp/data-lat"
      put="0 0 0"
      if [ "$linger" != local ]; then
        rm -rf "$tmp/minio/$bucket/$prefix"
        # Objects of the size this broker wrote: put bytes / puts over the run.
        size="$(echo "$counters" | awk '{ print ($1 > 0) ? int($2 / $1) : 1048576 }')"
        "$put_latency" --storage "s3://$bucket/put-latency" --count "$put_count" --bytes "$size" \
          --in-flight 1 | tee "$out/put-latency-$client-$linger.txt" >&2
        put="$(sed -n 's/.*p50_ms=\([0-9.]*\) p99_ms=\([0-9.]*\) max_ms=\([0-9.]*\).*/\1 \2 \3/p' "$out/put-latency-$client-$linger.txt")"
      fi
      python3 - "$csv" "$client" "$linger" "$cpu0" "$cpu1" "$warmup_s" "$lat_duration_s" "$counters" "$put" \
        "$out/latency-$client-$linger.samples" "$out/metrics-latency-$client-$linger.txt" >> "$out/latency.csv" <<'EOF'
import csv, os, re, sys
path, client, linger, cpu0, cpu1, warm, dur, counters, put, samples, metrics = sys.argv[1:]
buckets = []
for line in open(metrics):
    m = re.match(r'sluice_kafka_request_duration_seconds_bucket\{api="Produce",le="([^"]+)"\} (\d+)', line)
    if m:
        buckets.append((float(m.group(1)), int(m.group(2))))
sums = {}
for line in open(metrics):
    for k in ("sum", "count"):
        if line.startswith(f'sluice_kafka_request_duration_seconds_{k}{{api="Produce"}}'):
            sums[k] = float(line.split()[-1])
mean_ms = f"{1000 * sums['sum'] / sums['count']:.1f}" if sums.get("count") else ""
def bucket_ms(q):
    if not buckets or buckets[-1][1] == 0:
        return ""
    total = buckets[-1][1]
    return f"{1000 * next(le for le, c in buckets if c >= q * total):g}"
row = next(csv.DictReader(open(path)))
iv = list(csv.DictReader(open(os.path.join(os.path.dirname(path), "intervals.csv"))))
steal = [float(r["steal"]) for r in iv if r.get("steal")]
cpu = float(cpu1) - float(cpu0)
seconds = float(warm) + float(dur)
records = float(row["produce_rps"]) * seconds
c = [int(x) for x in counters.split()]
# PUTs per second while producing: the sampled counter's busiest stretch of `dur` seconds.
pts = [tuple(float(x) for x in l.split()[:2]) for l in open(samples) if len(l.split()) >= 2]
rate = 0.0
for i, (t0, p0) in enumerate(pts):
    for t1, p1 in pts[i + 1:]:
        if t1 - t0 >= float(dur):
            rate = max(rate, (p1 - p0) / (t1 - t0))
            break
gb_read = records * 1024 / 1e9
obj = c[1] / c[0] if c[0] else 0
p = put.split()
print(",".join([client, linger, row["produce_rps"], row["ack_p50_ms"], row["ack_p99_ms"], row["ack_max_ms"], row["e2e_p99_ms"],
                f"{cpu:.2f}", f"{cpu / (records / 1e6):.2f}", str(c[0]), f"{rate:.2f}", f"{obj:.0f}", str(c[2]),
                f"{gb_read:.2f}", p[0], p[1], p[2], f"{100 * sum(steal) / len(steal):.1f}" if steal else "",
                bucket_ms(0.5), bucket_ms(0.99), mean_ms]))
EOF
      tail -1 "$out/latency.csv" >&2
    done
  done
fi

# --- 3. PUTs per second vs partition count ------------------------------------------------------
if [[ " $cases " == *" puts "* ]]; then
  echo "partitions,produce_rps,ack_p50_ms,ack_p99_ms,broker_cpu_s,cpu_s_per_million,puts_per_s,object_bytes,puts_total" > "$out/puts.csv"
  for parts in $partition_counts; do
    echo "== puts: $parts partitions at $puts_rate" >&2
    wl="$out/puts-$parts.toml"
    write_workload "$wl" "puts-$parts-partitions" "$parts" 2 1 "$puts_rate" 5 1048576 "$warmup_s" "$lat_duration_s"
    start_sluice object "$tmp/data-puts" "$out/broker-puts-$parts.log"
    start_sampler "$out/puts-$parts.samples"
    cpu0="$(cpu_seconds "$sluice_pid")"
    csv="$(bench_run "$wl" "partitions-$parts" "$out/campaigns/puts-$parts")"
    cpu1="$(cpu_seconds "$sluice_pid")"
    stop_sampler
    counters="$(object_counters)"
    stop_sluice; rm -rf "$tmp/data-puts" "$tmp/minio/$bucket/$prefix"
    python3 - "$csv" "$parts" "$cpu0" "$cpu1" "$warmup_s" "$lat_duration_s" "$counters" \
      "$out/puts-$parts.samples" >> "$out/puts.csv" <<'EOF'
import csv, sys
path, parts, cpu0, cpu1, warm, dur, counters, samples = sys.argv[1:]
row = next(csv.DictReader(open(path)))
cpu = float(cpu1) - float(cpu0)
records = float(row["produce_rps"]) * (float(warm) + float(dur))
c = [int(x) for x in counters.split()]
pts = [tuple(float(x) for x in l.split()[:3]) for l in open(samples) if len(l.split()) >= 3]
best = (0.0, 0.0)
for i, (t0, p0, b0) in enumerate(pts):
    for t1, p1, b1 in pts[i + 1:]:
        if t1 - t0 >= float(dur):
            r = (p1 - p0) / (t1 - t0)
            if r > best[0]:
                best = (r, (b1 - b0) / (p1 - p0) if p1 > p0 else 0)
            break
print(",".join([parts, row["produce_rps"], row["ack_p50_ms"], row["ack_p99_ms"], f"{cpu:.2f}",
                f"{cpu / (records / 1e6):.2f}", f"{best[0]:.2f}", f"{best[1]:.0f}", str(c[0])]))
EOF
    tail -1 "$out/puts.csv" >&2
  done
fi

# --- 4. drain a backlog: object mode with cold caches vs local mode -----------------------------
if [[ " $cases " == *" drain "* ]]; then
  records=$((backlog_mib * 1024))
  echo "mode,records,fill_s,fill_mbps,restart_s,drain_s,drain_mbps,broker_cpu_s,cpu_s_per_million,gets,get_bytes,gets_per_gb,objects_in_bucket" > "$out/drain.csv"
  value="$(head -c 1024 /dev/zero | tr '\0' 'v')"   # kcat splits its input on newlines
  for mode in object local; do
    echo "== drain: $mode, $backlog_mib MiB" >&2
    start_sluice "$mode" "$tmp/data-drain" "$out/broker-drain-$mode-fill.log"
    "$sluice" topic create drain --partitions 6 --bootstrap "127.0.0.1:$kport" >/dev/null
    t0="$(date +%s.%N)"
    # The fill is not what is measured: without idempotence kcat may keep 32 requests in flight
    # (the broker's per-connection limit) instead of 5, so acknowledgements that wait for a
    # PUT do not throttle it to a few MB/s.
    (yes "$value" || true) | head -n "$records" | kcat -P -b "127.0.0.1:$kport" -t drain -X acks=all \
      -X linger.ms=5 -X batch.size=1048576 -X enable.idempotence=false \
      -X max.in.flight.requests.per.connection=32 2> "$out/kcat-fill-$mode.log"
    t1="$(date +%s.%N)"
    puts="$( [ "$mode" = object ] && object_counters | awk '{print $1}' || echo 0)"
    stop_sluice
    t_restart="$(date +%s.%N)"
    if [ "$mode" = object ]; then
      # Cold: a new, empty data directory; the broker rebuilds its index from the bucket.
      rm -rf "$tmp/data-drain"
      PREFIX="$prefix" start_sluice object "$tmp/data-drain" "$out/broker-drain-$mode-read.log"
    else
      # Local mode keeps its data; the page cache may still hold part of it.
      start_sluice local "$tmp/data-drain" "$out/broker-drain-$mode-read.log"
    fi
    t2="$(date +%s.%N)"
    before="$(object_counters || echo '0 0 0 0 0 0 0')"
    cpu0="$(cpu_seconds "$sluice_pid")"
    got="$(kcat -C -b "127.0.0.1:$kport" -t drain -o beginning -e -q -f '\n' 2> "$out/kcat-drain-$mode.log" | wc -l)"
    t3="$(date +%s.%N)"
    cpu1="$(cpu_seconds "$sluice_pid")"
    after="$(object_counters || echo '0 0 0 0 0 0 0')"
    stop_sluice
    [ "$mode" = object ] && rm -rf "$tmp/minio/$bucket/$prefix"
    rm -rf "$tmp/data-drain"
    python3 - "$mode" "$records" "$got" "$t0" "$t1" "$t2" "$t3" "$cpu0" "$cpu1" "$before" "$after" "$puts" "$t_restart" \
      >> "$out/drain.csv" <<'EOF'
import sys
mode, records, got, t0, t1, t2, t3, cpu0, cpu1, before, after, puts, tr = sys.argv[1:]
records, got = int(records), int(got)
if got != records:
    print(f"drain {mode}: read {got} of {records} records", file=sys.stderr)
t0, t1, t2, t3 = map(float, (t0, t1, t2, t3))
b = [int(x) for x in before.split()]; a = [int(x) for x in after.split()]
gets, get_bytes = a[2] - b[2], a[3] - b[3]
gb = got * 1024 / 1e9
cpu = float(cpu1) - float(cpu0)
print(",".join([mode, str(got), f"{t1 - t0:.1f}", f"{records * 1024 / 1e6 / (t1 - t0):.0f}", f"{t2 - float(tr):.2f}", f"{t3 - t2:.2f}",
                f"{got * 1024 / 1e6 / (t3 - t2):.0f}", f"{cpu:.2f}", f"{cpu / (got / 1e6):.2f}", str(gets),
                str(get_bytes), f"{gets / gb:.0f}" if gb else "", puts]))
EOF
    tail -1 "$out/drain.csv" >&2
  done
fi

# --- summary ------------------------------------------------------------------------------------
python3 - "$out" "$lat_duration_s" <<'EOF' | tee "$out/summary.txt"
import csv, os, statistics, sys
out, window_s = sys.argv[1], float(sys.argv[2])
def rows(name):
    p = os.path.join(out, name)
    return list(csv.DictReader(open(p))) if os.path.exists(p) else []
def mmm(vals, fmt="{:.1f}"):
    return " / ".join(fmt.format(v) for v in (min(vals), statistics.median(vals), max(vals)))
tp = rows("throughput.csv")
if tp:
    print("1. produce throughput, 1 KiB, acks=all, closed loop (min / median / max)")
    med = {}
    for b in dict.fromkeys(r["broker"] for r in tp):
        rs = [r for r in tp if r["broker"] == b]
        mb = [float(r["produce_mbps"]) for r in rs]
        med[b] = statistics.median(mb)
        print(f"  {b:<7} MB/s {mmm(mb)}   records/s {mmm([float(r['produce_rps']) for r in rs], '{:.0f}')}"
              f"   ack p99 ms {mmm([float(r['ack_p99_ms']) for r in rs])}"
              f"   broker CPU s/M records {mmm([float(r['cpu_s_per_million']) for r in rs], '{:.2f}')}"
              f"   steal % {mmm([float(r['steal_pct'] or 0) for r in rs])}"
              f"   MinIO CPU s {mmm([float(r['minio_cpu_s']) for r in rs])}")
    if "local" in med and "object" in med:
        ratio = med["object"] / med["local"]
        print(f"  object / local (medians) = {ratio:.2f}  target >= 0.80: {'met' if ratio >= 0.8 else 'NOT met'}")
    if "kafka" in med and "object" in med:
        print(f"  object / kafka (medians) = {med['object'] / med['kafka']:.2f}")
    if "local-pipelined" in med and "object-pipelined" in med:
        ratio = med["object-pipelined"] / med["local-pipelined"]
        print(f"  object-pipelined / local-pipelined (medians) = {ratio:.2f}")
lat = rows("latency.csv")
if lat:
    print("2. ack latency at 20 MB/s vs --object-linger-ms, with MinIO PUT latency for objects of that size")
    for r in lat:
        line = (f"  {r['client']:<10} linger {r['linger_ms']:>5}: ack p50 {float(r['ack_p50_ms']):.1f} p99 {float(r['ack_p99_ms']):.1f} ms;"
                f" broker Produce mean {r['broker_produce_mean_ms']} ms, p50/p99 <= {r['broker_produce_p50_le_ms']}/{r['broker_produce_p99_le_ms']} ms;"
                f" CPU s/M {r['cpu_s_per_million']}")
        if r["linger_ms"] != "local":
            bound = float(r["linger_ms"]) + 2 * float(r["put_p99_ms"])
            ok = float(r["ack_p99_ms"]) <= bound
            line += (f"; object {int(float(r['object_bytes']))} B, {r['puts_per_s']} PUTs/s;"
                     f" PUT p50 {r['put_p50_ms']} p99 {r['put_p99_ms']} ms; bound linger + 2 x PUT p99 = {bound:.1f} ms:"
                     f" {'met' if ok else 'NOT met'}; GETs {r['gets']} for {r['gb_read']} GB read")
        print(line)
pu = rows("puts.csv")
if pu:
    print("3. PUTs per second at the default linger (250 ms: target <= 4)")
    for r in pu:
        # A window of window_s seconds can hold 4 * window_s + 1 PUTs spaced 250 ms apart
        # (both ends), and is at least window_s long: one PUT of slack.
        ok = float(r["puts_per_s"]) <= 4.0 + 1.0 / window_s
        print(f"  {r['partitions']:>5} partitions: {r['puts_per_s']} PUTs/s, {r['object_bytes']} B per object,"
              f" {float(r['produce_rps']):.0f} records/s, CPU s/M {r['cpu_s_per_million']}: {'met' if ok else 'NOT met'}")
dr = rows("drain.csv")
if dr:
    print("4. drain a backlog after a restart (object: empty data dir, cold caches)")
    for r in dr:
        print(f"  {r['mode']:<6} {r['records']} records: fill {r['fill_s']} s ({r['fill_mbps']} MB/s);"
              f" restart {r['restart_s']} s; drain {r['drain_s']} s ({r['drain_mbps']} MB/s); CPU s/M {r['cpu_s_per_million']};"
              f" GETs {r['gets']} ({r['gets_per_gb']} per GB); PUTs while filling {r['objects_in_bucket']}")
EOF
echo "results in $out" >&2
