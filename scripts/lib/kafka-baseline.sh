# Sourced by the benchmark scripts: finds Apache Kafka's jars for ../shared/kafka-baseline and
# exports KB_LIB and KAFKA_BASELINE_DIR. Expects $repo (the repository root) to be set.
baseline="${KAFKA_BASELINE_DIR:-$repo/../shared/kafka-baseline}"
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
# e.g. 4.3.1, from the clients jar's name.
kafka_version="$(ls "$KB_LIB"/kafka-clients-[0-9]*.jar | head -1 | sed -E 's/.*kafka-clients-(.*)\.jar/\1/')"
