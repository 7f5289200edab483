#!/usr/bin/env bash
# Real-client compatibility suite: kcat, confluent-kafka, kafka-python and the Java kafka-clients
# against one broker. Installs what it needs (idempotent, a few seconds when already installed),
# then runs pytest, which also runs the Java tests through Maven.
#
#   compat/run.sh                              # against `sluice serve`, started (and built) by the suite
#   compat/run.sh --target kafka-baseline      # against a fresh Apache Kafka: checks the suite itself
#   compat/run.sh --bootstrap 127.0.0.1:9092   # against a broker that is already running
#   compat/run.sh --storage object             # `sluice serve --storage s3://...` on a MinIO the suite starts
#   compat/run.sh --storage cluster            # three `sluice serve --storage s3://... --metadata postgres://...`
#                                              # on that MinIO and a PostgreSQL the suite starts
#   compat/run.sh -k kcat                      # any pytest arguments (paths relative to compat/python/)
#   compat/run.sh --scorecard                  # the suite (without the crash tests) against Sluice and
#                                              # against Apache Kafka, then compat/SCORECARD.md from both
#
# Environment: SLUICE_BIN (broker binary; default target/debug/sluice, built with cargo),
# SLUICE_COMPAT_STORAGE (local, object or cluster: the default of --storage), SLUICE_MINIO_BIN
# (MinIO for --storage object and cluster; default $SLUICE_TOOLS_DIR/minio or
# ~/.cache/sluice/tools/minio, which scripts/test.sh installs), SLUICE_PG_BIN_DIR (PostgreSQL's
# bin directory for --storage cluster; default the newest /usr/lib/postgresql/*/bin),
# KAFKA_BASELINE_DIR (default ../shared/kafka-baseline), PYTHON (default python3).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

# --scorecard is this script's own; everything else goes to pytest.
scorecard=0
args=()
for arg in "$@"; do
  if [ "$arg" = --scorecard ]; then scorecard=1; else args+=("$arg"); fi
done
set -- ${args[@]+"${args[@]}"}

# --storage object and cluster need a MinIO binary; say how to get one before installing anything else.
# (conftest.py reads --storage itself; this only looks for it.)
storage="${SLUICE_COMPAT_STORAGE:-local}"
prev=""
for arg in "$@"; do
  case "$arg" in
    --storage=*) storage="${arg#--storage=}" ;;
    *) [ "$prev" = "--storage" ] && storage="$arg" ;;
  esac
  prev="$arg"
done
if [ "$storage" = object ] || [ "$storage" = cluster ]; then
  minio="${SLUICE_MINIO_BIN:-${SLUICE_TOOLS_DIR:-$HOME/.cache/sluice/tools}/minio}"
  if [ ! -x "$minio" ]; then
    echo "compat: error: --storage $storage needs MinIO, and $minio does not exist." \
      "Run scripts/test.sh once (it builds MinIO into ~/.cache/sluice/tools) or set" \
      "SLUICE_MINIO_BIN to a MinIO server binary." >&2
    exit 2
  fi
fi

# --storage cluster also needs PostgreSQL's server binaries (Debian's postgresql package,
# installed if missing, as scripts/test.sh does; the suite starts its own server).
if [ "$storage" = cluster ]; then
  # shellcheck source=../scripts/lib/postgres.sh
  . "$here/../scripts/lib/postgres.sh"
  ensure_postgres >&2
fi

need() { command -v "$1" >/dev/null 2>&1; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
# Install Debian packages; refresh the package lists only if the first attempt fails.
apt_install() {
  echo "compat: installing $* (apt-get)" >&2
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get install -y -qq "$@" >/dev/null 2>&1 \
    || { as_root apt-get update -qq && as_root apt-get install -y -qq "$@" >/dev/null; }
}

need kcat || apt_install kcat
need java || apt_install openjdk-17-jdk-headless
need mvn || apt_install maven

# Python clients in compat/.venv at the versions pinned in requirements.txt.
py="${PYTHON:-python3}"
need "$py" || apt_install python3 python3-venv
want="$(sha256sum requirements.txt | cut -d' ' -f1)"
if [ ! -x .venv/bin/python ] || [ "$(cat .venv/.requirements.sha256 2>/dev/null)" != "$want" ]; then
  echo "compat: setting up compat/.venv (pip install -r requirements.txt)" >&2
  if [ ! -x .venv/bin/python ]; then
    "$py" -m venv .venv 2>/dev/null || { rm -rf .venv; apt_install python3-venv; "$py" -m venv .venv; }
  fi
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt
  echo "$want" >.venv/.requirements.sha256
fi

# Java dependencies and a compiled test tree, once per pom.xml (Maven caches them in ~/.m2).
# A failure here is not fatal: the Java tests run Maven again and report what went wrong.
want="$(sha256sum <java/pom.xml | cut -d' ' -f1)"
if [ "$(cat .cache/maven.sha256 2>/dev/null)" != "$want" ]; then
  echo "compat: fetching Java dependencies (mvn)" >&2
  mkdir -p .cache
  # (sed: Maven 3.8 prints colour resets even in batch mode)
  if (cd java && mvn -B -q -Dstyle.color=never -DskipTests test 2>&1 | sed 's/\x1b\[[0-9;]*m//g'); then
    echo "$want" >.cache/maven.sha256
  else
    echo "compat: warning: mvn could not prepare the Java tests; test_java.py will report it" >&2
  fi
fi

# Kafka Connect's jars (test_connect.py) into .cache/connect/lib once per connect/pom.xml, and the
# Kafka Streams word count (test_streams.py) built into streams/target once per its pom and
# sources. The tests do the same (with the same stamps) when this did not or failed.
want="$(sha256sum <connect/pom.xml | cut -d' ' -f1)"
if [ "$(cat .cache/connect.sha256 2>/dev/null)" != "$want" ] || ! ls .cache/connect/lib/connect-file-*.jar >/dev/null 2>&1; then
  echo "compat: fetching Kafka Connect (mvn, connect/pom.xml)" >&2
  mkdir -p .cache
  rm -rf .cache/connect/lib
  if (cd connect && mvn -B -q -Dstyle.color=never dependency:copy-dependencies 2>&1 | sed 's/\x1b\[[0-9;]*m//g'); then
    echo "$want" >.cache/connect.sha256
  else
    echo "compat: warning: mvn could not fetch Kafka Connect; test_connect.py will report it" >&2
  fi
fi
# (the pom, then each Java source in path order: what test_streams.py's build_fingerprint hashes)
want="$(cd streams && find src -name '*.java' -type f | LC_ALL=C sort | xargs cat pom.xml | sha256sum | cut -d' ' -f1)"
if [ "$(cat .cache/streams.sha256 2>/dev/null)" != "$want" ] || [ ! -f streams/target/classpath.txt ]; then
  echo "compat: building the Kafka Streams word count (mvn, streams/pom.xml)" >&2
  mkdir -p .cache
  if (cd streams && mvn -B -q -Dstyle.color=never process-classes 2>&1 | sed 's/\x1b\[[0-9;]*m//g'); then
    echo "$want" >.cache/streams.sha256
  else
    echo "compat: warning: mvn could not build compat/streams; test_streams.py will report it" >&2
  fi
fi

# Go (the franz-go and sarama programs, built by test_go_clients.py into .cache/go-bin; the
# modules come from the Go module proxy into Go's own caches) and Node.js with kafkajs, installed
# with `npm ci` into node/node_modules once per package-lock.json.
need go || apt_install golang-go
need node || apt_install nodejs
need npm || apt_install npm
want="$(sha256sum <node/package-lock.json | cut -d' ' -f1)"
if [ ! -f node/node_modules/kafkajs/package.json ] || [ "$(cat .cache/npm.sha256 2>/dev/null)" != "$want" ]; then
  echo "compat: installing kafkajs (npm ci in compat/node)" >&2
  mkdir -p .cache
  if (cd node && npm ci --no-audit --no-fund --loglevel=error >/dev/null); then
    echo "$want" >.cache/npm.sha256
  else
    echo "compat: warning: npm ci failed; test_node_client.py will report it" >&2
  fi
fi

cd python  # pytest.ini and conftest.py live here
if [ "$scorecard" = 0 ]; then
  exec ../.venv/bin/python -m pytest "$@"
fi

# --scorecard: the suite against Sluice (with --storage, if given, else local) and against a
# fresh Apache Kafka, each writing its outcomes to .results/ (git-ignored), then SCORECARD.md.
# The crash tests are left out: they take minutes, and run only against Sluice anyway.
skip_long=(--ignore=test_crash.py --ignore=test_groups_crash.py --ignore=test_share_crash.py)
mkdir -p "$here/.results"
sluice_status=0
../.venv/bin/python -m pytest "${skip_long[@]}" --scorecard-json="$here/.results/sluice.json" "$@" || sluice_status=$?
kafka_status=0
../.venv/bin/python -m pytest --target kafka-baseline "${skip_long[@]}" --scorecard-json="$here/.results/kafka-baseline.json" "$@" \
  || kafka_status=$?
../.venv/bin/python ../scorecard.py --out ../SCORECARD.md "$here/.results/sluice.json" "$here/.results/kafka-baseline.json"
echo "compat: pytest exit status against Sluice $sluice_status, against Kafka $kafka_status" >&2
[ "$sluice_status" = 0 ] && [ "$kafka_status" = 0 ]
