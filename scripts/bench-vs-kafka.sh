#!/usr/bin/env bash
# Sluice vs Apache Kafka on this machine, with Kafka's own perf tools; see
# scripts/bench_vs_kafka.py for what is measured. Takes ~10 min with the defaults.
#
# Environment: RUNS (3), N_SMALL (3000000), N_LARGE (1000000), FIXED_SECONDS (20), CASES (all), OUT
# (target/bench-vs-kafka), KAFKA_BASELINE_DIR (../shared/kafka-baseline).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
command -v kcat >/dev/null || { apt-get install -y -qq kcat >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq kcat >/dev/null; }; }
source "$repo/scripts/lib/kafka-baseline.sh"
cargo build --release --bin sluice
echo "commit: $(git rev-parse --short HEAD); nproc=$(nproc); memory=$(free -g | awk '/^Mem:/{print $2}') GiB; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)" >&2
exec python3 scripts/bench_vs_kafka.py "$@"
