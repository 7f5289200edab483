#!/usr/bin/env bash
# Share groups (KIP-932) side by side: Sluice with its default fair acquisition (in the
# workload's batch_optimized acquire mode, and again in record_limit mode), Sluice with
# share.acquire.policy=greedy (Kafka's behaviour), and Apache Kafka (../shared/kafka-baseline),
# on the same workload with the same client (`sluice bench drain`'s native share consumers),
# interleaved in one run.
#
# Each round starts a fresh broker for each target in turn (the order rotates from round to
# round), runs every case against it with the broker's own CPU time recorded (--broker-pid),
# and stops it by its PID. scripts/bench_share.py then prints, per target, min / median / max
# over the rounds of msg/s, records per consumer, fairness, broker CPU seconds per million
# records, and the Sluice / Kafka ratios paired within each round (summary.md).
#
# Cases (bench/workloads/<case>.toml):
#   share-fair-2p-40c   40 consumers on 2 partitions, 5 ms per record: ~80 s per run
#   share-kill-2p-40c   the same with one consumer killed mid-run: redelivery time (~75 s)
# The Sluice-greedy target runs a copy of each workload with `policy = "greedy"` added to its
# [share] table, the Sluice-record-limit target one with `acquire_mode = "record_limit"`
# (OUT/workloads/). A fourth target, not run by default, is a diagnostic:
# sluice-fair-64k, Sluice (fair) with ShareFetch max_bytes 64 KiB instead of the Java client's
# default 50 MiB (TARGETS="sluice-fair sluice-greedy kafka sluice-fair-64k").
#
# Kafka formats its storage with --feature share.version=1 (share groups are on by default
# from 4.2; naming the feature keeps older 4.x working too) and deletes a deleted topic's files
# 5 s later instead of 60 s (file.delete.delay.ms).
#
#   scripts/bench-share.sh                     # 3 rounds x 4 targets x both cases: ~35 min
#   ROUNDS=1 CASES=share-fair-2p-40c TARGETS="sluice-fair kafka" scripts/bench-share.sh
# Environment: OUT (target/bench-share), ROUNDS (3), CASES (both), TARGETS (sluice-fair
# sluice-record-limit sluice-greedy kafka; sluice-fair-64k too on request), KAFKA_BASELINE_DIR, CARGO_TARGET_DIR
# (where the release build goes).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
source "$repo/scripts/lib/kafka-baseline.sh"
# JVM flags as the baseline's start.sh uses them, and kb_tool (Kafka's command-line classes).
source "$KAFKA_BASELINE_DIR/env.sh"
cargo build --release --bin sluice
sluice="${CARGO_TARGET_DIR:-$repo/target}/release/sluice"
out="${OUT:-$repo/target/bench-share}"
rounds="${ROUNDS:-3}"
cases="${CASES:-share-fair-2p-40c share-kill-2p-40c}"
targets="${TARGETS:-sluice-fair sluice-record-limit sluice-greedy kafka}"
mkdir -p "$out/logs" "$out/workloads"
out="$(cd "$out" && pwd)"
manifest="$out/manifest.tsv"
: >"$manifest"
{
  echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates || echo ' (with uncommitted changes)')"
  echo "nproc=$(nproc); memory=$(free -g | awk '/^Mem:/{print $2}') GiB;$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); kernel $(uname -r)"
  echo "java: $("$JAVA" -version 2>&1 | head -1); kafka $kafka_version; $("$sluice" --version)"
  echo "load before the run: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "started: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
} | tee "$out/machine.txt" >&2

# The copies of each workload that the Sluice-greedy and diagnostic targets run.
for case in $cases; do
  for variant in sluice-record-limit sluice-greedy sluice-fair-64k; do
    python3 "$repo/scripts/bench_share.py" variant "$variant" "bench/workloads/$case.toml" \
      "$out/workloads/$case-$variant.toml"
  done
done

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# --- Brokers ------------------------------------------------------------------------------------
# The broker of the current target: its PID, home and bootstrap address.
broker_pid=""; broker_home=""; bootstrap=""
stop_broker() {
  if [ -n "$broker_pid" ]; then
    kill -TERM "$broker_pid" 2>/dev/null || true
    # Up to 30 s for a clean shutdown, then SIGKILL; only ever this PID.
    for _ in $(seq 1 300); do kill -0 "$broker_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$broker_pid" 2>/dev/null || true
    wait "$broker_pid" 2>/dev/null || true
    broker_pid=""
  fi
  [ -n "$broker_home" ] && rm -rf "$broker_home"
  broker_home=""
}
trap stop_broker EXIT

start_sluice() {
  broker_home="$(mktemp -d "$out/broker-sluice-XXXX")"
  local port
  port="$(free_port)"
  "$sluice" serve --data-dir "$broker_home/data" --http-addr off \
    --kafka-addr "127.0.0.1:$port" --group-initial-rebalance-delay-ms 0 \
    >"$broker_home/sluice.log" 2>&1 &
  broker_pid=$!
  for _ in $(seq 1 300); do
    grep -q "kafka listening on" "$broker_home/sluice.log" && break
    kill -0 "$broker_pid" 2>/dev/null || { cat "$broker_home/sluice.log" >&2; exit 1; }
    sleep 0.1
  done
  bootstrap="127.0.0.1:$port"
}

start_kafka() {
  broker_home="$(mktemp -d "$out/broker-kafka-XXXX")"
  local port cport
  port="$(free_port)"; cport="$(free_port)"
  mkdir -p "$broker_home/data" "$broker_home/logs"
  # The baseline's server.properties (config/server.properties.in) on free ports.
  cat >"$broker_home/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs=$broker_home/data
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
group.initial.rebalance.delay.ms=0
file.delete.delay.ms=5000
EOF
  local cluster_id
  cluster_id="$(kb_tool kafka.tools.StorageTool random-uuid)"
  kb_tool kafka.tools.StorageTool format --standalone -t "$cluster_id" \
    -c "$broker_home/server.properties" --feature share.version=1 \
    >"$broker_home/logs/format.out" 2>&1 \
    || { cat "$broker_home/logs/format.out" >&2; exit 1; }
  # shellcheck disable=SC2086
  "$JAVA" $KAFKA_HEAP_OPTS $KAFKA_JVM_PERFORMANCE_OPTS \
    -Dkafka.logs.dir="$broker_home/logs" -Dlog4j2.configurationFile="$KB_DIR/config/log4j2.xml" \
    -cp "$KB_LIB/*" kafka.Kafka "$broker_home/server.properties" \
    >"$broker_home/logs/kafkaServer.out" 2>&1 </dev/null &
  broker_pid=$!
  for _ in $(seq 1 240); do
    kill -0 "$broker_pid" 2>/dev/null || { tail -n 40 "$broker_home/logs/"* >&2; exit 1; }
    if grep -q "Kafka Server started" "$broker_home/logs/server.log" 2>/dev/null \
       && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      break
    fi
    sleep 0.5
  done
  bootstrap="127.0.0.1:$port"
}

# --- Rounds ---------------------------------------------------------------------------------------
run_target() { # round target version
  local round="$1" target="$2" version="$3"
  for case in $cases; do
    local workload="bench/workloads/$case.toml" log
    case "$target" in
      sluice-record-limit | sluice-greedy | sluice-fair-64k) workload="$out/workloads/$case-$target.toml" ;;
    esac
    log="$out/logs/r$round-$target-$case.txt"
    echo "== round $round: $target $case ($(date -u +%H:%M:%S))" >&2
    # Progress lines (stderr) to their own file; the summary (stdout) to the terminal too. A
    # failed case is noted and the run goes on (the summary leaves it out and says so).
    if ! "$sluice" bench drain "$workload" --bootstrap "$bootstrap" --broker-pid "$broker_pid" \
      --out "$out/results" --broker-label "$target" --broker-version "$version" \
      2>"$out/logs/r$round-$target-$case.progress" | tee "$log"; then
      echo "FAILED: round $round $target $case (see $log and its .progress)" >&2
    fi
    printf '%s\t%s\t%s\t%s\n' "$round" "$target" "$case" \
      "$(sed -n 's/^results: //p' "$log")" >>"$manifest"
  done
}

read -r -a order <<<"$targets"
for round in $(seq 1 "$rounds"); do
  # Rotate the order: over as many rounds as there are targets, each target runs in each place.
  shift_by=$(((round - 1) % ${#order[@]}))
  this_round=("${order[@]:$shift_by}" "${order[@]:0:$shift_by}")
  for target in "${this_round[@]}"; do
    case "$target" in
      sluice-*) start_sluice; version="$("$sluice" --version)" ;;
      kafka) start_kafka; version="$kafka_version" ;;
      *) echo "unknown target $target" >&2; exit 1 ;;
    esac
    run_target "$round" "$target" "$version"
    stop_broker
  done
done
echo "finished: $(date -u +%Y-%m-%dT%H:%M:%SZ)" | tee -a "$out/machine.txt" >&2
python3 "$repo/scripts/bench_share.py" summary "$manifest" | tee "$out/summary.md"
echo "results in $out (summary.md, manifest.tsv, results/)" >&2
