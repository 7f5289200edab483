#!/usr/bin/env bash
# Log compaction, Sluice and Apache Kafka (../shared/kafka-baseline) on this machine, one after
# the other on fresh data directories: `sluice bench run bench/workloads/compact-20mbps.toml`
# (a delete-policy topic, then a compacted one, on the same broker), then the log cleaner's
# throughput as each broker counts it:
#   Sluice  /metrics: sluice_log_cleaner_cleaned_bytes_total / sluice_log_cleaner_busy_seconds_total
#   Kafka   server.log: the LogCleaner's "MB of log processed in S seconds" lines, summed
# and `sluice bench compare` of the two brokers' results. ~20 min with the defaults.
#
#   scripts/bench-compaction.sh
#   BROKERS=sluice scripts/bench-compaction.sh
# Environment: OUT (target/bench-compaction), BROKERS (kafka sluice), WORKLOAD
# (bench/workloads/compact-20mbps.toml), KAFKA_BASELINE_DIR.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
source "$repo/scripts/lib/kafka-baseline.sh"
cargo build --release --bin sluice
sluice="$repo/target/release/sluice"
out="${OUT:-$repo/target/bench-compaction}"
brokers="${BROKERS:-kafka sluice}"
workload="${WORKLOAD:-bench/workloads/compact-20mbps.toml}"
mkdir -p "$out"
echo "commit: $(git rev-parse --short HEAD); nproc=$(nproc); memory=$(free -g | awk '/^Mem:/{print $2}') GiB;$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)" | tee "$out/machine.txt" >&2

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

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

# The cleaner's totals: "cleaned_bytes busy_seconds passes" on one line.
sluice_cleaner() {
  curl -sf "http://127.0.0.1:$http_port/metrics" | awk '
    /^sluice_log_cleaner_cleaned_bytes_total /{b=$2}
    /^sluice_log_cleaner_busy_seconds_total /{s=$2}
    /^sluice_log_cleaner_passes_total /{p=$2}
    END{printf "%.0f %.3f %d\n", b, s, p}'
}
kafka_cleaner() {
  # Kafka logs one block per cleaning: "\t1,234.5 MB of log processed in 6.7 seconds (...)".
  cat "$kafka_home"/logs/server.log* 2>/dev/null | tr -d ',' | awk '
    /MB of log processed in/{for(i=1;i<=NF;i++){if($i=="MB")mb+=$(i-1); if($i=="seconds")s+=$(i-1)}; p++}
    END{printf "%.0f %.3f %d\n", mb*1048576, s, p}'
}

for broker in $brokers; do
  port="$(free_port)"
  if [ "$broker" = kafka ]; then
    kafka_home="$(mktemp -d "$repo/target/compaction-kafka-XXXX")"
    KB_HOME="$kafka_home" KAFKA_PORT="$port" KAFKA_CONTROLLER_PORT="$(free_port)" \
      "$KAFKA_BASELINE_DIR/start.sh" --fresh >/dev/null
    label="kafka"; version="$kafka_version"
  else
    sluice_home="$(mktemp -d "$repo/target/compaction-sluice-XXXX")"
    http_port="$(free_port)"
    "$sluice" serve --data-dir "$sluice_home/data" --kafka-addr "127.0.0.1:$port" \
      --http-addr "127.0.0.1:$http_port" --group-initial-rebalance-delay-ms 0 >"$sluice_home/sluice.log" 2>&1 &
    sluice_pid=$!
    for _ in $(seq 1 300); do grep -q "kafka listening on" "$sluice_home/sluice.log" && break; sleep 0.1; done
    label="sluice"; version="$("$sluice" --version)"
  fi
  "$sluice" bench run "$workload" --bootstrap "127.0.0.1:$port" --out "$out/$broker" \
    --broker-label "$label" --broker-version "$version" | tee "$out/run-$broker.txt"
  if [ "$broker" = kafka ]; then totals="$(kafka_cleaner)"; else totals="$(sluice_cleaner)"; fi
  read -r bytes seconds passes <<<"$totals"
  python3 - "$broker" "$bytes" "$seconds" "$passes" <<'PY' | tee "$out/cleaner-$broker.txt"
import sys
broker, cleaned, seconds, passes = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
rate = cleaned / 1e6 / seconds if seconds > 0 else 0.0
print(f"{broker}: log cleaner cleaned {cleaned / 1e6:.1f} MB in {passes} passes, "
      f"{seconds:.1f} s busy: {rate:.1f} MB/s")
PY
  cleanup
done
dirs=()
for broker in $brokers; do dirs+=("$(sed -n 's/^results: //p' "$out/run-$broker.txt")"); done
if [ "${#dirs[@]}" -ge 2 ]; then
  "$sluice" bench compare "${dirs[@]}" --out "$out/compare" | tee "$out/compare.txt"
fi
cat "$out"/cleaner-*.txt
echo "results in $out" >&2
