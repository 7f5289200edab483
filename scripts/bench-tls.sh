#!/usr/bin/env bash
# What SASL_SSL costs over PLAINTEXT, for Sluice and for Apache Kafka (../shared/kafka-baseline),
# with the same certificate and key, the same SCRAM-SHA-512 user and the same client (librdkafka,
# built into `sluice bench`), interleaved in one run.
#
# Each round starts a fresh Sluice and a fresh Kafka, one after the other, each with a PLAINTEXT
# and a SASL_SSL listener, warms each listener up for a few seconds (tls-warmup.toml, not
# measured: Kafka's JVM compiles its hot paths), and runs three cases against each listener:
#   run   bench/workloads/tls-produce-max.toml    closed-loop produce throughput (1 KiB)
#   run   bench/workloads/tls-fixed-20mbps.toml   ack and e2e latency at a fixed 20 MB/s
#   drain bench/workloads/tls-drain-2gib.toml     consume throughput (a 2 GiB backlog)
# recording the broker's own CPU time (--broker-pid). The order of the brokers and of the two
# listeners changes from round to round. scripts/bench_tls.py then prints min / median / max
# per configuration, and the ratios paired within each round (summary.md).
#
# The certificate (a CA and a server certificate for 127.0.0.1 and localhost, RSA 2048) and the
# user's random password are made fresh under OUT/certs; SASL_SSL clients read them from
# OUT/sasl-ssl.properties (--client-config). Sluice gets the user with `sluice user add`, Kafka
# when its storage is formatted (kafka-storage format --add-scram). Both use 4096 iterations.
#
# Kafka deletes a deleted topic's files 5 s later instead of 60 s (file.delete.delay.ms), so
# that the cases of one broker do not pile up ~10 GB on a disk other jobs share.
#
#   scripts/bench-tls.sh                          # 4 rounds: ~28 min of measuring, plus the build
#   ROUNDS=1 CASES=tls-produce-max scripts/bench-tls.sh
# Environment: OUT (target/bench-tls), ROUNDS (4: each broker then sees each listener first
# twice), CASES (all three), KAFKA_BASELINE_DIR,
# CARGO_TARGET_DIR (where the release build goes; target/ by default).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
source "$repo/scripts/lib/kafka-baseline.sh"
# JVM flags as the baseline's start.sh uses them, and kb_tool (Kafka's command-line classes).
source "$KAFKA_BASELINE_DIR/env.sh"
cargo build --release --bin sluice
sluice="${CARGO_TARGET_DIR:-$repo/target}/release/sluice"
out="${OUT:-$repo/target/bench-tls}"
rounds="${ROUNDS:-4}"
cases="${CASES:-tls-produce-max tls-fixed-20mbps tls-drain-2gib}"
mkdir -p "$out"
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

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
mode_of() {
  case "$1" in
    *drain*) echo drain ;;
    *) echo run ;;
  esac
}

# --- Certificates, user, client settings ---------------------------------------------------
certs="$out/certs"
rm -rf "$certs"
mkdir -p "$certs"
(
  cd "$certs"
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=sluice bench CA" \
    -keyout ca.key -out ca.crt 2>/dev/null
  # `req -newkey` writes a PKCS#8 key (BEGIN PRIVATE KEY): both brokers' PEM loaders read it.
  openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout server.key -out server.csr \
    2>/dev/null
  printf "subjectAltName=DNS:localhost,IP:127.0.0.1\n" >server.ext
  openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
    -extfile server.ext -out server.crt 2>/dev/null
  # Kafka's PEM keystore: the key and the certificate chain in one file.
  cat server.key server.crt >server.pem
  chmod 600 ca.key server.key server.pem
)
user="bench"
password="$(openssl rand -hex 16)"
umask_was="$(umask)"; umask 077
cat >"$out/sasl-ssl.properties" <<EOF
security.protocol=SASL_SSL
sasl.mechanisms=SCRAM-SHA-512
sasl.username=$user
sasl.password=$password
ssl.ca.location=$certs/ca.crt
EOF
umask "$umask_was"

# --- Brokers ------------------------------------------------------------------------------------
# The broker of the current round: its PID, home, and the bootstrap of each listener.
broker_pid=""; broker_home=""; plaintext_bootstrap=""; sasl_ssl_bootstrap=""
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
  local pport sport
  pport="$(free_port)"; sport="$(free_port)"
  printf '%s' "$password" | "$sluice" user add "$user" --mechanism SCRAM-SHA-512 \
    --password-stdin --data-dir "$broker_home/data" >/dev/null
  "$sluice" serve --data-dir "$broker_home/data" --http-addr off \
    --listeners "PLAINTEXT://127.0.0.1:$pport,SASL_SSL://127.0.0.1:$sport" \
    --tls-cert "$certs/server.crt" --tls-key "$certs/server.key" \
    --sasl-mechanisms SCRAM-SHA-512 --group-initial-rebalance-delay-ms 0 \
    >"$broker_home/sluice.log" 2>&1 &
  broker_pid=$!
  for _ in $(seq 1 300); do
    grep -q "kafka listening on .*(SASL_SSL)" "$broker_home/sluice.log" && break
    kill -0 "$broker_pid" 2>/dev/null || { cat "$broker_home/sluice.log" >&2; exit 1; }
    sleep 0.1
  done
  plaintext_bootstrap="127.0.0.1:$pport"; sasl_ssl_bootstrap="127.0.0.1:$sport"
}

start_kafka() {
  broker_home="$(mktemp -d "$out/broker-kafka-XXXX")"
  local pport sport cport
  pport="$(free_port)"; sport="$(free_port)"; cport="$(free_port)"
  mkdir -p "$broker_home/data" "$broker_home/logs"
  # The baseline's server.properties (config/server.properties.in), plus a SASL_SSL listener.
  cat >"$broker_home/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$pport,SASL_SSL://127.0.0.1:$sport,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$pport,SASL_SSL://127.0.0.1:$sport,CONTROLLER://127.0.0.1:$cport
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PEM
ssl.keystore.location=$certs/server.pem
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
    -c "$broker_home/server.properties" \
    --add-scram "SCRAM-SHA-512=[name=$user,iterations=4096,password=$password]" \
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
       && (exec 3<>"/dev/tcp/127.0.0.1/$sport") 2>/dev/null; then
      break
    fi
    sleep 0.5
  done
  plaintext_bootstrap="127.0.0.1:$pport"; sasl_ssl_bootstrap="127.0.0.1:$sport"
}

# --- Rounds ---------------------------------------------------------------------------------------
run_listener() { # round broker protocol version
  local round="$1" broker="$2" protocol="$3" version="$4" bootstrap security=()
  if [ "$protocol" = SASL_SSL ]; then
    bootstrap="$sasl_ssl_bootstrap"; security=(--client-config "$out/sasl-ssl.properties")
  else
    bootstrap="$plaintext_bootstrap"
  fi
  for case in $cases; do
    local mode log
    mode="$(mode_of "$case")"
    log="$out/logs/r$round-$broker-$protocol-$case.txt"
    echo "== round $round: $broker $protocol $case ($(date -u +%H:%M:%S))" >&2
    # Progress lines (stderr) to their own file; the summary (stdout) to the terminal too. A
    # failed case is noted and the run goes on (the summary leaves it out and says so).
    if ! "$sluice" bench "$mode" "bench/workloads/$case.toml" --bootstrap "$bootstrap" \
      "${security[@]}" --broker-pid "$broker_pid" --out "$out/results" \
      --broker-label "$broker" --broker-version "$version" \
      2>"$out/logs/r$round-$broker-$protocol-$case.progress" | tee "$log"; then
      echo "FAILED: round $round $broker $protocol $case (see $log and its .progress)" >&2
    fi
    printf '%s\t%s\t%s\t%s\t%s\n' "$round" "$broker" "$protocol" "$case" \
      "$(sed -n 's/^results: //p' "$log")" >>"$manifest"
  done
}

warm_up() { # round broker protocol
  local security=() bootstrap="$plaintext_bootstrap"
  if [ "$3" = SASL_SSL ]; then
    bootstrap="$sasl_ssl_bootstrap"; security=(--client-config "$out/sasl-ssl.properties")
  fi
  echo "== round $1: $2 $3 warm-up, not measured ($(date -u +%H:%M:%S))" >&2
  "$sluice" bench run bench/workloads/tls-warmup.toml --bootstrap "$bootstrap" "${security[@]}" \
    --out "$out/warmup" -q --broker-label "$2" >"$out/logs/r$1-$2-$3-warmup.txt" 2>&1 \
    || echo "warm-up failed: see $out/logs/r$1-$2-$3-warmup.txt" >&2
}

mkdir -p "$out/logs"
for round in $(seq 1 "$rounds"); do
  # Sluice first in odd rounds, Kafka first in even ones; each broker's listeners in the
  # opposite order from the round before.
  if [ $((round % 2)) = 1 ]; then order="sluice kafka"; else order="kafka sluice"; fi
  for broker in $order; do
    if [ "$broker" = sluice ]; then
      start_sluice; version="$("$sluice" --version)"; first=$((round % 2))
    else
      start_kafka; version="$kafka_version"; first=$(((round + 1) % 2))
    fi
    if [ "$first" = 1 ]; then protocols="PLAINTEXT SASL_SSL"; else protocols="SASL_SSL PLAINTEXT"; fi
    for protocol in $protocols; do
      warm_up "$round" "$broker" "$protocol"
    done
    for protocol in $protocols; do
      run_listener "$round" "$broker" "$protocol" "$version"
    done
    stop_broker
  done
done
echo "finished: $(date -u +%Y-%m-%dT%H:%M:%SZ)" | tee -a "$out/machine.txt" >&2
python3 "$repo/scripts/bench_tls.py" "$manifest" | tee "$out/summary.md"
echo "results in $out (summary.md, manifest.tsv, results/)" >&2
