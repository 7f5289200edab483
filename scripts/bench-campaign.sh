#!/usr/bin/env bash
# The published `sluice bench` campaign: Sluice and Apache Kafka (../shared/kafka-baseline) on
# this machine, one after the other on fresh data directories, with the same workload files
# (bench/workloads/) and the same client (librdkafka, built into `sluice bench`):
#   1. explore   explore-1kib.toml     highest rate with e2e p99 <= 50 ms (1 KiB, 6 partitions)
#   2. run       fixed-20mbps.toml     a fixed 20 MB/s: e2e p50/p99/p99.9/max
#   3. run       max-100b.toml         maximum throughput with 100-byte records
#   4. drain     drain-2gib.toml       time to read a 2 GiB backlog
#   5. correctness correctness-kills.toml (Sluice only: 3 SIGKILLs of a Sluice it starts itself)
#   6. storm     storm-2x.toml         a retry storm at 2x the probed capacity for 30 s, then
#                                      0.5x: goodput, p99 and recovery time per second
# Then `sluice bench compare` for each of 1-4 and 6. Takes ~35 min with the defaults.
#
#   scripts/bench-campaign.sh                 # everything
#   CASES="fixed-20mbps max-100b" scripts/bench-campaign.sh
#   BROKERS="sluice" scripts/bench-campaign.sh
# Environment: OUT (target/bench-campaign), CASES, BROKERS (kafka sluice), KAFKA_BASELINE_DIR,
# BROKER_CPUS and CLIENT_CPUS (taskset CPU lists, e.g. BROKER_CPUS=1 CLIENT_CPUS=0: the broker
# and the load generator on separate cores, so that overloading the broker does not first
# starve the generator; default: no pinning).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
source "$repo/scripts/lib/kafka-baseline.sh"
cargo build --release --bin sluice
sluice="$repo/target/release/sluice"
out="${OUT:-$repo/target/bench-campaign}"
cases="${CASES:-explore-1kib fixed-20mbps max-100b drain-2gib correctness-kills storm-2x}"
brokers="${BROKERS:-kafka sluice}"
mkdir -p "$out"
echo "commit: $(git rev-parse --short HEAD); nproc=$(nproc); memory=$(free -g | awk '/^Mem:/{print $2}') GiB;$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)" | tee "$out/machine.txt" >&2

# Prefixes that run a command on BROKER_CPUS / CLIENT_CPUS when given (taskset execs the command,
# so a PID taken with $! is the broker's; children inherit the affinity).
on_broker_cpus=(); [ -n "${BROKER_CPUS:-}" ] && on_broker_cpus=(taskset -c "$BROKER_CPUS")
on_client_cpus=(); [ -n "${CLIENT_CPUS:-}" ] && on_client_cpus=(taskset -c "$CLIENT_CPUS")
echo "broker CPUs: ${BROKER_CPUS:-any}; load generator CPUs: ${CLIENT_CPUS:-any}" | tee -a "$out/machine.txt" >&2

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
mode_of() {
  case "$1" in
    explore-*) echo explore ;;
    drain-*) echo drain ;;
    correctness-*) echo correctness ;;
    storm-*) echo storm ;;
    *) echo run ;;
  esac
}

kafka_home=""; sluice_pid=""; sluice_home=""
cleanup() {
  if [ -n "$kafka_home" ]; then
    KB_HOME="$kafka_home" "$KAFKA_BASELINE_DIR/stop.sh" --clean >/dev/null 2>&1 || true
    rm -rf "$kafka_home"; kafka_home=""
  fi
  if [ -n "$sluice_pid" ]; then
    kill -TERM "$sluice_pid" 2>/dev/null || true
    wait "$sluice_pid" 2>/dev/null || true
    sluice_pid=""
  fi
  [ -n "$sluice_home" ] && rm -rf "$sluice_home"; sluice_home=""
}
trap cleanup EXIT

start_kafka() {
  kafka_home="$(mktemp -d "$repo/target/campaign-kafka-XXXX")"
  port="$(free_port)"
  KB_HOME="$kafka_home" KAFKA_PORT="$port" KAFKA_CONTROLLER_PORT="$(free_port)" \
    "${on_broker_cpus[@]}" "$KAFKA_BASELINE_DIR/start.sh" --fresh >/dev/null
  bootstrap="127.0.0.1:$port"
}
start_sluice() {
  sluice_home="$(mktemp -d "$repo/target/campaign-sluice-XXXX")"
  port="$(free_port)"
  "${on_broker_cpus[@]}" "$sluice" serve --data-dir "$sluice_home/data" --kafka-addr "127.0.0.1:$port" --http-addr off \
    --group-initial-rebalance-delay-ms 0 >"$sluice_home/sluice.log" 2>&1 &
  sluice_pid=$!
  for _ in $(seq 1 300); do grep -q "kafka listening on" "$sluice_home/sluice.log" && break; sleep 0.1; done
  bootstrap="127.0.0.1:$port"
}

for case in $cases; do
  mode="$(mode_of "$case")"
  file="bench/workloads/$case.toml"
  dirs=()
  for broker in $brokers; do
    if [ "$mode" = correctness ]; then
      [ "$broker" = sluice ] || continue
      # A Sluice the benchmark starts, kills and restarts itself.
      sluice_home="$(mktemp -d "$repo/target/campaign-sluice-XXXX")"
      port="$(free_port)"
      "$sluice" bench correctness "$file" --bootstrap "127.0.0.1:$port" --out "$out/sluice" \
        --broker-label sluice \
        --broker-cmd "$sluice serve --data-dir $sluice_home/data --kafka-addr 127.0.0.1:$port --http-addr off" \
        | tee "$out/$case-sluice.txt"
      rm -rf "$sluice_home"; sluice_home=""
      continue
    fi
    if [ "$broker" = kafka ]; then
      start_kafka; label="kafka"; version="$kafka_version"
    else
      start_sluice; label="sluice"; version="$("$sluice" --version)"
    fi
    "${on_client_cpus[@]}" "$sluice" bench "$mode" "$file" --bootstrap "$bootstrap" --out "$out/$broker" \
      --broker-label "$label" --broker-version "$version" | tee "$out/$case-$broker.txt"
    dirs+=("$(sed -n 's/^results: //p' "$out/$case-$broker.txt")")
    cleanup
  done
  if [ "${#dirs[@]}" -ge 2 ]; then
    "$sluice" bench compare "${dirs[@]}" --out "$out/compare-$case" | tee "$out/compare-$case.txt"
  fi
done
echo "campaign results in $out" >&2
