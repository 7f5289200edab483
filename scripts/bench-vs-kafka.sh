#!/usr/bin/env bash
# Sluice vs Apache Kafka on this machine, with Kafka's own perf tools; see
# scripts/bench_vs_kafka.py for what is measured. Takes ~10 min with the defaults.
#
# Environment: RUNS (3), N_SMALL (3000000), N_LARGE (1000000), FIXED_SECONDS (20), OUT
# (target/bench-vs-kafka), KAFKA_BASELINE_DIR (../shared/kafka-baseline).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
baseline="${KAFKA_BASELINE_DIR:-$repo/../shared/kafka-baseline}"
command -v kcat >/dev/null || { apt-get install -y -qq kcat >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq kcat >/dev/null; }; }
# Kafka's jars: the baseline's own lib/ if it has one, else fetched into target/ from its pom.
if ls "$baseline"/lib/kafka-tools-[0-9]*.jar >/dev/null 2>&1; then
  export KB_LIB="$baseline/lib"
else
  # The pom copies the jars to lib/ next to itself.
  export KB_LIB="$repo/target/kafka-baseline-pom/lib"
  if ! ls "$KB_LIB"/kafka-tools-[0-9]*.jar >/dev/null 2>&1; then
    mkdir -p "$repo/target/kafka-baseline-pom"
    cp "$baseline/pom.xml" "$repo/target/kafka-baseline-pom/pom.xml"
    (cd "$repo/target/kafka-baseline-pom" && mvn -B -q dependency:copy-dependencies)
  fi
fi
export KAFKA_BASELINE_DIR="$baseline"
cargo build --release --bin sluice
echo "commit: $(git rev-parse --short HEAD); nproc=$(nproc); memory=$(free -g | awk '/^Mem:/{print $2}') GiB; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)" >&2
exec python3 scripts/bench_vs_kafka.py "$@"
