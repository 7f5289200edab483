#!/usr/bin/env bash
# Produce latency at a fixed 50,000 records/s (100 B, 6 partitions, acks=all, linger.ms=5) for
# several `sluice serve --sync-threads` settings, with Kafka's ProducerPerformance; a fresh
# broker per point after a 300,000-record warm-up. Prints one ProducerPerformance summary line
# per point. Takes ~1 min per point.
#
# Environment: THREADS ("1 4 2"), ROUNDS (2), KAFKA_BASELINE_DIR (../shared/kafka-baseline).
# Kafka's jars come from scripts/lib/kafka-baseline.sh (the baseline's lib/, or fetched by Maven).
#
# Usage: scripts/bench-sync-threads.sh [--help]
set -euo pipefail
case "${1:-}" in
  "") ;;
  -h | --help) sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "bench-sync-threads: unknown argument: $1 (try --help)" >&2; exit 2 ;;
esac
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
# Sets KB_LIB (Kafka's jars) and KAFKA_BASELINE_DIR.
source "$repo/scripts/lib/kafka-baseline.sh"
cargo build --release --bin sluice
java_tool() {
  java -Xmx512m "-Dlog4j2.configurationFile=$KAFKA_BASELINE_DIR/config/tools-log4j2.xml" \
    -cp "$KB_LIB/*" "$@"
}
echo "commit: $(git rev-parse --short HEAD); nproc=$(nproc); memory=$(free -g | awk '/^Mem:/{print $2}') GiB" >&2
pid=""
dir=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; [ -n "$dir" ] && rm -rf "$dir"; return 0; }
trap cleanup EXIT
for round in $(seq 1 "${ROUNDS:-2}"); do
  for threads in ${THREADS:-1 4 2}; do
    dir="$(mktemp -d "$repo/target/bench-sync-threads.XXXX")"
    target/release/sluice serve --data-dir "$dir/data" --kafka-addr 127.0.0.1:0 --http-addr off --sync-threads "$threads" >"$dir/log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do grep -q 'kafka listening' "$dir/log" && break; sleep 0.1; done
    port="$(grep -o 'kafka listening on 127.0.0.1:[0-9]*' "$dir/log" | cut -d: -f2)"
    bootstrap="127.0.0.1:$port"
    java_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$bootstrap" --create --topic lat \
      --partitions 6 --replication-factor 1 >/dev/null
    java_tool org.apache.kafka.tools.ProducerPerformance --bootstrap-server "$bootstrap" --topic warm \
      --num-records 300000 --record-size 100 --throughput -1 --command-property acks=all linger.ms=5 >/dev/null
    sync
    line="$(java_tool org.apache.kafka.tools.ProducerPerformance --bootstrap-server "$bootstrap" --topic lat \
      --num-records 750000 --record-size 100 --throughput 50000 --command-property acks=all linger.ms=5 | tail -1)"
    echo "round $round, sync threads $threads: $line"
    cleanup
    pid=""
    dir=""
  done
done
