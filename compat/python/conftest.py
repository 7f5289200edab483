"""The broker under test for the compatibility suite, as one session-scoped fixture.

Three ways to get a broker (pytest options):

  --target sluice          (default) build/start `sluice serve` on free ports, stop it at the end
  --target kafka-baseline  start a fresh Apache Kafka from ../shared/kafka-baseline on free ports,
                           to check the suite itself against the reference implementation
  --bootstrap HOST:PORT    use a broker that is already running; start nothing

and, for the brokers it starts (`--target sluice`), where they keep their data:

  --storage local          (default; or env SLUICE_COMPAT_STORAGE) the data directory on disk
  --storage object         `sluice serve --storage s3://BUCKET/compat` on a MinIO this file starts
                           once per session (free loopback ports, a temporary directory, random
                           root credentials), each SluiceBroker with a bucket of its own; the
                           data directory is then only a cache. MinIO is stopped by its PID at
                           the end of the session (also on failure) and its directory removed
  --storage cluster        THREE brokers in cluster mode (`sluice serve --storage s3://BUCKET/compat
                           --metadata postgres://...`) on one bucket of that MinIO and one database
                           of a PostgreSQL this file also starts once per session (free loopback
                           port, a temporary directory, a random password; as the `postgres`
                           user when run as root). `bootstrap` then lists all three brokers
                           ("127.0.0.1:A,127.0.0.1:B,127.0.0.1:C"), `http_url` is broker A's.
                           Tests that start brokers of their own start a SluiceCluster (a bucket
                           and a database of its own). PostgreSQL is stopped by its PID at the
                           end of the session (also on failure) and its directory removed

Tests ask for `bootstrap` ("127.0.0.1:NNNNN"), and the HTTP API tests for `http_url`
("http://127.0.0.1:NNNNN", Sluice only: they skip against Kafka); test_crash.py instead starts,
kills and restarts a SluiceBroker of its own. A broker this file started is always stopped
by its own PID (SIGTERM, then SIGKILL after 10 s) and its temporary directory removed, also
when tests fail or time out. Its output is kept in compat/.logs/ for reading after a failure.
"""

from __future__ import annotations

import atexit
import ctypes
import datetime
import hashlib
import hmac
import http.client
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

COMPAT_DIR = Path(__file__).resolve().parent.parent
REPO_ROOT = COMPAT_DIR.parent
LOG_DIR = COMPAT_DIR / ".logs"
CACHE_DIR = COMPAT_DIR / ".cache"

SLUICE_READY_S = 30  # how long `sluice serve` may take to print its listening line
SLUICE_STOP_S = 10  # SIGTERM grace period before SIGKILL
CARGO_BUILD_S = 1800  # a cold debug build of the workspace on 2 cores
MAVEN_FETCH_S = 900  # first download of Kafka's jars into ~/.m2
KAFKA_START_S = 120  # start.sh itself gives up after 60 s
# Environment for every `sluice serve` the suite starts: like the Kafka baseline
# (group.initial.rebalance.delay.ms=0), the first rebalance of a new group is not delayed.
SLUICE_ENV = {"SLUICE_GROUP_INITIAL_REBALANCE_DELAY_MS": "0"}
# Object mode: how long a produce waits for its object to be sealed. The default (250 ms)
# would make every acks=all produce round trip take a quarter second and the suite several
# times slower; 5 ms keeps it about as fast as local mode and still batches concurrent
# produces into one PUT.
OBJECT_LINGER_MS = 5
OBJECT_PREFIX = "compat"  # s3://BUCKET/compat
MINIO_READY_S = 30  # MinIO's start until /minio/health/ready answers 200 and a bucket can be made
MINIO_STOP_S = 10  # SIGTERM grace period before SIGKILL
MINIO_HTTP_S = 5  # bound on each readiness probe and CreateBucket request
MINIO_REGION = "us-east-1"  # MinIO's default region; what requests are signed for
CLUSTER_BROKERS = 3  # brokers of a cluster (--storage cluster)
# A started cluster's brokers must all list each other within this (a broker learns of the
# others at its next heartbeat, every second; a broker restarted on an address still listed
# under its old id makes the list differ until that id's lease (5 s) expires).
CLUSTER_AGREE_S = 20
PG_READY_S = 30  # PostgreSQL's start until it accepts connections (about a second)
PG_STOP_S = 15  # SIGINT (fast shutdown) grace period before SIGKILL
PG_USER = "sluice"  # the superuser of the PostgreSQL the suite starts

# "local", "object" or "cluster", set from --storage in pytest_configure (before any broker starts).
STORAGE = "local"


def cluster_mode() -> bool:
    """Whether this run is against a cluster of brokers (--storage cluster)."""
    return STORAGE == "cluster"


def pytest_addoption(parser):
    group = parser.getgroup("sluice-compat", "Sluice compatibility suite")
    group.addoption(
        "--target",
        choices=("sluice", "kafka-baseline"),
        default="sluice",
        help="broker to start for the tests (default: sluice)",
    )
    group.addoption(
        "--bootstrap",
        metavar="HOST:PORT",
        default=None,
        help="use this already running broker instead of starting one",
    )
    group.addoption(
        "--http-url",
        metavar="URL",
        default=None,
        help="with --bootstrap: the running broker's HTTP API (e.g. http://127.0.0.1:8080); "
        "without it the HTTP API tests are skipped",
    )
    group.addoption(
        "--storage",
        choices=("local", "object", "cluster"),
        default=os.environ.get("SLUICE_COMPAT_STORAGE") or "local",
        help="where the `sluice serve` the suite starts keeps its data: local (the data directory), "
        "object (a bucket on a MinIO the suite starts; the data directory is only a cache) or "
        "cluster (three brokers in cluster mode on one bucket of that MinIO and one database of a "
        "PostgreSQL the suite starts; the bootstrap string lists all three). "
        "Default: $SLUICE_COMPAT_STORAGE, else local",
    )
    group.addoption(
        "--scorecard-json",
        metavar="PATH",
        default=None,
        help="write every test's outcome, labelled (client, feature), and the client versions to PATH "
        "(JSON) for compat/scorecard.py; compat/run.sh --scorecard passes it",
    )
    group.addoption(
        "--kafka-request-log",
        action="store_true",
        help="kafka-baseline only: have Kafka log every request and write the API keys and "
        "versions each client used to compat/.logs/kafka-api-usage.txt",
    )


def pytest_configure(config):
    global STORAGE
    STORAGE = config.getoption("--storage")
    config.addinivalue_line(
        "markers",
        "scorecard(client, feature): the row of compat/SCORECARD.md this test is (default: derived "
        "from its file and name, see scorecard_label)",
    )
    # SIGTERM/SIGHUP end the session like Ctrl-C, so that fixture teardown and atexit stop
    # every broker and MinIO this process started (also those a test starts of its own).
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_keyboard_interrupt)
    if STORAGE in ("object", "cluster") and config.getoption("--target") == "sluice" and not config.getoption("--bootstrap"):
        try:
            minio_bin()
            if STORAGE == "cluster":
                pg_bin_dir()
        except RuntimeError as e:
            raise pytest.UsageError(str(e))


def pytest_unconfigure(config):
    # After the session's fixtures (the brokers) are gone: they stop while their bucket and
    # database are still there.
    stop_postgres()
    stop_minio()


def pytest_report_header(config):
    bootstrap = config.getoption("--bootstrap")
    target = config.getoption("--target")
    if bootstrap:
        lines = [f"compat target: already running broker at {bootstrap} (--target {target})"]
    else:
        lines = [f"compat target: {target} (started by the suite; logs in {LOG_DIR})"]
        if target == "sluice":
            lines.append(
                "compat storage: "
                + (
                    f"object (sluice serve --storage s3://<bucket>/{OBJECT_PREFIX} on MinIO {minio_bin()}, "
                    f"--object-linger-ms {OBJECT_LINGER_MS})"
                    if STORAGE == "object"
                    else (
                        f"cluster ({CLUSTER_BROKERS} x sluice serve --storage s3://<bucket>/{OBJECT_PREFIX} "
                        f"--metadata postgres://...; MinIO {minio_bin()}, PostgreSQL {pg_bin_dir()}, "
                        f"--object-linger-ms {OBJECT_LINGER_MS})"
                        if STORAGE == "cluster"
                        else "local (the data directory)"
                    )
                )
            )
    return lines + [f"compat clients: {client_versions()}"]


# Lines a test wants shown at the end of the run, passed or not (the crash test's summary).
TERMINAL_NOTES: list[str] = []


def pytest_terminal_summary(terminalreporter):
    if TERMINAL_NOTES:
        terminalreporter.section("compat notes")
        for line in TERMINAL_NOTES:
            terminalreporter.write_line(line)


def client_versions() -> str:
    found = []
    try:
        out = subprocess.run(["kcat", "-V"], capture_output=True, text=True, timeout=10).stdout
        m = re.search(r"Version (\S+).*?librdkafka (\S+)", out, re.S)
        found.append(f"kcat {m.group(1)} (librdkafka {m.group(2)})" if m else "kcat ?")
    except (OSError, subprocess.TimeoutExpired):
        found.append("kcat missing")
    try:
        import confluent_kafka

        found.append(f"confluent-kafka {confluent_kafka.__version__} (librdkafka {confluent_kafka.libversion()[0]})")
    except ImportError:
        found.append("confluent-kafka missing")
    try:
        import kafka

        found.append(f"kafka-python {kafka.__version__}")
    except ImportError:
        found.append("kafka-python missing")
    pom = (COMPAT_DIR / "java" / "pom.xml").read_text()
    m = re.search(r"<kafka.version>([^<]+)</kafka.version>", pom)
    found.append(f"kafka-clients {m.group(1) if m else '?'} (Java)")
    found += [f"{name} {version}" for name, version in pinned_go_node_versions().items()]
    return ", ".join(found)


def pinned_go_node_versions() -> dict[str, str]:
    """The Go and Node.js clients' versions, as pinned in compat/go/go.mod and
    compat/node/package-lock.json (what `go build` and `npm ci` install)."""
    found = {}
    try:
        gomod = (COMPAT_DIR / "go" / "go.mod").read_text()
        for name, module in (("franz-go", "github.com/twmb/franz-go"), ("kadm", "github.com/twmb/franz-go/pkg/kadm"),
                             ("sarama", "github.com/IBM/sarama")):
            m = re.search(rf"^\s*{re.escape(module)} (v\S+)", gomod, re.M)
            found[name] = m.group(1) if m else "?"
    except OSError:
        pass
    try:
        lock = json.loads((COMPAT_DIR / "node" / "package-lock.json").read_text())
        found["kafkajs"] = lock["packages"]["node_modules/kafkajs"]["version"]
    except (OSError, KeyError, ValueError):
        pass
    return found


def client_version_table() -> dict[str, str]:
    """client -> version, for the scorecard's header (compat/scorecard.py)."""
    table = {}
    try:
        out = subprocess.run(["kcat", "-V"], capture_output=True, text=True, timeout=10).stdout
        m = re.search(r"Version (\S+).*?librdkafka (\S+)", out, re.S)
        table["kcat"] = f"{m.group(1)} (librdkafka {m.group(2)})" if m else "?"
    except (OSError, subprocess.TimeoutExpired):
        table["kcat"] = "missing"
    try:
        import confluent_kafka

        table["confluent-kafka (Python)"] = f"{confluent_kafka.__version__} (librdkafka {confluent_kafka.libversion()[0]})"
    except ImportError:
        table["confluent-kafka (Python)"] = "missing"
    try:
        import kafka

        table["kafka-python"] = kafka.__version__
    except ImportError:
        table["kafka-python"] = "missing"
    m = re.search(r"<kafka.version>([^<]+)</kafka.version>", (COMPAT_DIR / "java" / "pom.xml").read_text())
    table["Java kafka-clients"] = m.group(1) if m else "?"
    go_node = pinned_go_node_versions()
    if "franz-go" in go_node:
        table["franz-go"] = f"{go_node['franz-go']} (kadm {go_node.get('kadm', '?')})"
    for name in ("sarama", "kafkajs"):
        if name in go_node:
            table[name] = go_node[name]
    baseline = Path(os.environ.get("KAFKA_BASELINE_DIR", REPO_ROOT.parent / "shared" / "kafka-baseline"))
    try:
        m = re.search(r"<kafka.version>([^<]+)</kafka.version>", (baseline / "pom.xml").read_text())
        table["Kafka CLI tools (kafka-tools)"] = m.group(1) if m else "?"
    except OSError:
        pass
    return table


# --------------------------------------------------------------------------- scorecard results
#
# With --scorecard-json PATH, every test's outcome is recorded under a (client, feature) label
# and written to PATH at the end of the session; compat/scorecard.py merges the files of a
# Sluice run and a Kafka run into compat/SCORECARD.md.

# Files whose tests are all one client's steps: file -> client.
SCORECARD_FILE_CLIENTS = {
    "test_kcat.py": "kcat",
    "test_confluent_kafka.py": "confluent-kafka (Python)",
    "test_kafka_python.py": "kafka-python",
}
# Test functions that are one client's steps, parametrized by the step: function -> client.
SCORECARD_FUNCTION_CLIENTS = {
    "test_franz_go": "franz-go",
    "test_sarama": "sarama",
    "test_kafkajs": "kafkajs",
}
# Files that check one area with several clients or tools: file -> the row group's name.
SCORECARD_AREAS = {
    "test_groups.py": "consumer groups (several clients)",
    "test_admin_records.py": "DeleteRecords (confluent-kafka, Kafka CLI tools)",
    "test_share.py": "share groups (Kafka CLI tools, confluent-kafka)",
    "test_transactions.py": "transactions (confluent-kafka, Java)",
    "test_quotas.py": "client quotas (Kafka CLI tools, clients)",
    "test_kafka_tools.py": "Kafka CLI tools",
    "test_security.py": "TLS, SASL and ACLs (every client; Sluice's own brokers)",
    "test_http.py": "Sluice HTTP API (with Kafka clients)",
    "test_http_fuzz.py": "Sluice HTTP API (with Kafka clients)",
    "test_cluster.py": "cluster mode (several clients)",
    "test_object_storage.py": "object storage (confluent-kafka)",
    "test_compaction.py": "log compaction (confluent-kafka, Java console consumer)",
    "test_connect.py": "Kafka Connect",
    "test_streams.py": "Kafka Streams",
    "test_crash.py": "crash tests",
    "test_groups_crash.py": "crash tests",
    "test_share_crash.py": "crash tests",
}
JAVA_CLASS_CLIENTS = {"AdminClientTest": "Java AdminClient", "AdminToolCallsTest": "Java AdminClient"}

_scorecard: dict[str, dict] = {}  # nodeid -> {"client", "feature", "outcome", "reason"}
_scorecard_labels: dict[str, tuple[str, str]] = {}


def scorecard_label(item) -> tuple[str, str]:
    """(client, feature) of a test: its `scorecard` marker, else derived from file and name."""
    marker = item.get_closest_marker("scorecard")
    if marker is not None:
        return marker.kwargs.get("client") or marker.args[0], marker.kwargs.get("feature") or marker.args[1]
    file = Path(str(item.fspath)).name
    func = item.originalname if hasattr(item, "originalname") else item.name.split("[")[0]
    params = getattr(getattr(item, "callspec", None), "params", {})
    if func in SCORECARD_FUNCTION_CLIENTS:
        return SCORECARD_FUNCTION_CLIENTS[func], str(params.get("step", item.name))
    if func == "test_java" and "cls" in params:
        cls = params["cls"].rsplit(".", 1)[-1]
        return JAVA_CLASS_CLIENTS.get(cls, "Java kafka-clients"), f"{cls}.{params['method']}"
    feature = item.name.removeprefix("test_")
    if file in SCORECARD_FILE_CLIENTS:
        return SCORECARD_FILE_CLIENTS[file], feature
    return SCORECARD_AREAS.get(file, file.removeprefix("test_").removesuffix(".py").replace("_", " ")), feature


def pytest_collection_modifyitems(session, config, items):
    for item in items:
        _scorecard_labels[item.nodeid] = scorecard_label(item)


def _short_reason(report) -> str:
    """One line saying why a test failed or was skipped."""
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    text = getattr(report, "longreprtext", "") or ""
    errors = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
    lines = errors or [line.strip() for line in text.splitlines() if line.strip()]
    reason = " ".join(lines[:3]) if errors else (lines[0] if lines else "")
    return reason[:400]


def pytest_runtest_logreport(report):
    label = _scorecard_labels.get(report.nodeid)
    if label is None:
        return
    entry = _scorecard.setdefault(report.nodeid, {"client": label[0], "feature": label[1], "outcome": None, "reason": ""})
    if hasattr(report, "wasxfail"):
        if report.skipped:
            entry.update(outcome="xfailed", reason=str(report.wasxfail))
        elif report.passed and report.when == "call":
            entry.update(outcome="xpassed", reason=str(report.wasxfail))
        return
    if report.failed:
        if entry["outcome"] != "failed":
            entry.update(outcome="failed", reason=("(in teardown) " if report.when == "teardown" else "") + _short_reason(report))
    elif report.skipped:
        entry.update(outcome="skipped", reason=_short_reason(report))
    elif report.passed and report.when == "call" and entry["outcome"] is None:
        entry.update(outcome="passed")


def pytest_sessionfinish(session, exitstatus):
    path = session.config.getoption("--scorecard-json")
    if not path:
        return
    config = session.config
    target = config.getoption("--target")
    if target == "kafka-baseline":
        version = client_version_table().get("Kafka CLI tools (kafka-tools)", "?")
        label = f"Apache Kafka {version}"
    else:
        label = f"Sluice ({STORAGE})"
    data = {
        "label": label,
        "target": target,
        "storage": STORAGE if target == "sluice" else None,
        "bootstrap": config.getoption("--bootstrap"),
        "finished": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "clients": client_version_table(),
        "results": [dict(nodeid=nodeid, **entry) for nodeid, entry in _scorecard.items() if entry["outcome"]],
    }
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(data, indent=1) + "\n")


# --------------------------------------------------------------------------- helpers


def free_ports(n: int) -> list[int]:
    """n distinct free TCP ports on 127.0.0.1 (held open together so they differ)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def wait_for_port(host: str, port: int, deadline: float) -> bool:
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=1):
                return True
        except OSError:
            time.sleep(0.1)
    return False


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"


def _die_with_parent():
    """preexec_fn: the kernel sends SIGTERM to the broker if pytest itself dies (even SIGKILL)."""
    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_PDEATHSIG = 1
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


# --------------------------------------------------------------------------- MinIO (--storage object)


def minio_bin() -> Path:
    """SLUICE_MINIO_BIN, else minio in $SLUICE_TOOLS_DIR or ~/.cache/sluice/tools (where
    scripts/test.sh installs it). RuntimeError saying how to get it when it is missing."""
    explicit = os.environ.get("SLUICE_MINIO_BIN")
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise RuntimeError(
                f"SLUICE_MINIO_BIN={explicit} does not exist; run scripts/test.sh (it installs MinIO) "
                "or point SLUICE_MINIO_BIN at a MinIO server binary"
            )
        return path
    tools = Path(os.environ.get("SLUICE_TOOLS_DIR") or Path.home() / ".cache" / "sluice" / "tools")
    path = tools / "minio"
    if not path.is_file():
        raise RuntimeError(
            f"--storage object needs MinIO, and {path} does not exist: run scripts/test.sh once "
            "(it builds MinIO there with `go install`) or set SLUICE_MINIO_BIN to a MinIO server binary"
        )
    return path


def _hmac(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


class MinioServer:
    """`minio server` on free 127.0.0.1 ports with a temporary directory and random root
    credentials. Its log goes to compat/.logs/minio.log; stop() ends it by PID and removes
    the directory."""

    def __init__(self):
        self.bin = minio_bin()
        self.root: str | None = None
        self.port: int | None = None
        self.access_key = "compat-" + secrets.token_hex(6)
        self.secret_key = secrets.token_hex(20)
        self.proc: subprocess.Popen | None = None
        self.log_path = LOG_DIR / "minio.log"

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict:
        """What `sluice serve` needs to reach it (the standard AWS variables)."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": MINIO_REGION,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
        }

    def start(self):
        self.root = tempfile.mkdtemp(prefix="sluice-compat-minio-")
        self.port, console_port = free_ports(2)
        with open(self.log_path, "wb") as log:
            log.write(f"$ {self.bin} server {self.root}/data --address 127.0.0.1:{self.port}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                [
                    str(self.bin), "server", os.path.join(self.root, "data"),
                    "--address", f"127.0.0.1:{self.port}",
                    "--console-address", f"127.0.0.1:{console_port}",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.root,
                env=dict(
                    os.environ,
                    MINIO_ROOT_USER=self.access_key,
                    MINIO_ROOT_PASSWORD=self.secret_key,
                    MINIO_UPDATE="off",  # no update checks: nothing leaves loopback
                ),
                preexec_fn=_die_with_parent,
            )
        deadline = time.monotonic() + MINIO_READY_S
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"MinIO exited during start (status {self.proc.returncode}):\n{tail(self.log_path)}")
            try:
                if self._request("GET", "/minio/health/ready", sign=False)[0] == 200:
                    return
            except OSError:
                pass
            if time.monotonic() >= deadline:
                raise RuntimeError(f"MinIO was not ready within {MINIO_READY_S} s:\n{tail(self.log_path)}")
            time.sleep(0.05)

    def _request(self, method: str, path: str, sign: bool = True) -> tuple[int, str]:
        """One HTTP request to MinIO; signed with AWS SigV4 (empty body) when sign is set."""
        headers = {}
        if sign:
            now = datetime.datetime.now(datetime.timezone.utc)
            amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
            empty = hashlib.sha256(b"").hexdigest()
            host = f"127.0.0.1:{self.port}"
            signed = "host;x-amz-content-sha256;x-amz-date"
            canonical = "\n".join(
                [method, path, "", f"host:{host}", f"x-amz-content-sha256:{empty}", f"x-amz-date:{amz_date}", "", signed, empty]
            )
            scope = f"{day}/{MINIO_REGION}/s3/aws4_request"
            to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
            key = _hmac(_hmac(_hmac(_hmac(("AWS4" + self.secret_key).encode(), day), MINIO_REGION), "s3"), "aws4_request")
            signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
            headers = {
                "Host": host,
                "x-amz-content-sha256": empty,
                "x-amz-date": amz_date,
                "Authorization": f"AWS4-HMAC-SHA256 Credential={self.access_key}/{scope}, "
                f"SignedHeaders={signed}, Signature={signature}",
            }
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=MINIO_HTTP_S)
        try:
            conn.request(method, path, body=b"" if method == "PUT" else None, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read().decode(errors="replace")
        finally:
            conn.close()

    def create_bucket(self, bucket: str):
        """S3 CreateBucket. MinIO may say it is ready a moment before it takes bucket operations
        (503 XMinioServerNotInitialized, or 403 InvalidAccessKeyId while its root user is not
        loaded yet): those, and connection errors, are retried until MINIO_READY_S has passed."""
        deadline = time.monotonic() + MINIO_READY_S
        while True:
            try:
                status, body = self._request("PUT", f"/{bucket}")
                if status == 200:
                    return
                not_ready = status == 503 or (status == 403 and "<Code>InvalidAccessKeyId</Code>" in body)
                if not not_ready:
                    raise RuntimeError(f"MinIO refused CreateBucket {bucket}: HTTP {status}: {body}")
                why = f"HTTP {status}: {body}"
            except OSError as e:
                why = repr(e)
            if time.monotonic() >= deadline:
                raise RuntimeError(f"CreateBucket {bucket} failed for {MINIO_READY_S} s: {why}\n{tail(self.log_path)}")
            time.sleep(0.1)

    def stop(self):
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(MINIO_STOP_S)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(10)
            self.proc = None
        if self.root:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None


_minio: MinioServer | None = None  # the session's MinIO, started by the first broker that needs it
_minio_lock = threading.Lock()


def session_minio() -> MinioServer:
    """The MinIO of this session, started on first use; stopped by stop_minio() (pytest_unconfigure,
    and atexit for a pytest that ends otherwise)."""
    global _minio
    with _minio_lock:
        if _minio is None:
            m = MinioServer()
            try:
                m.start()
            except Exception:
                m.stop()
                raise
            _minio = m
        return _minio


def stop_minio():
    global _minio
    with _minio_lock:
        if _minio is not None:
            _minio.stop()
            _minio = None


# Registered at import, so it runs after every broker's atexit stop (atexit is last in, first
# out): the brokers shut down while their bucket is still there.
atexit.register(stop_minio)


# --------------------------------------------------------------------------- PostgreSQL (--storage cluster)


def pg_bin_dir() -> Path:
    """SLUICE_PG_BIN_DIR, else the newest /usr/lib/postgresql/<version>/bin with initdb (Debian's
    layout; scripts/lib/postgres.sh installs it, and compat/run.sh calls that in cluster mode).
    RuntimeError saying how to get it when it is missing."""
    explicit = os.environ.get("SLUICE_PG_BIN_DIR")
    if explicit:
        path = Path(explicit)
        if not (path / "initdb").is_file():
            raise RuntimeError(f"SLUICE_PG_BIN_DIR={explicit} has no initdb; point it at PostgreSQL's bin directory")
        return path
    found = []
    for d in Path("/usr/lib/postgresql").glob("*/bin"):
        if d.parent.name.isdigit() and (d / "initdb").is_file():
            found.append((int(d.parent.name), d))
    if not found:
        raise RuntimeError(
            "--storage cluster needs PostgreSQL, and there is no /usr/lib/postgresql/*/bin/initdb: run "
            "compat/run.sh (it installs Debian's postgresql package) or set SLUICE_PG_BIN_DIR to its bin directory"
        )
    return max(found)[1]


def _postgres_ids() -> tuple[int, int] | None:
    """(uid, gid) of the `postgres` user when this process runs as root (PostgreSQL refuses to
    run as root); None otherwise."""
    if os.geteuid() != 0:
        return None
    import pwd

    try:
        entry = pwd.getpwnam("postgres")
    except KeyError:
        raise RuntimeError(
            "running as root, and there is no `postgres` user to run PostgreSQL as (it refuses root): "
            "install Debian's postgresql package, which creates it"
        )
    return entry.pw_uid, entry.pw_gid


class PostgresServer:
    """A PostgreSQL server on a free 127.0.0.1 port, in a temporary directory, as in
    crates/testkit/src/postgres.rs: `initdb` with one superuser (`sluice`) and a random password
    (SCRAM-SHA-256), then `postgres` itself started directly (no pg_ctl), so the PID held here
    is the postmaster's own. fsync, synchronous_commit and full_page_writes are off (a test
    database: commits are cheap, a crash of the machine is not a concern here). As root, initdb
    and the server run as the `postgres` user (uid and gid switched in the child, the directory
    handed to it). Its log goes to compat/.logs/postgres.log; stop() ends it by PID (SIGINT,
    a fast shutdown, then SIGKILL) and removes the directory."""

    def __init__(self):
        self.bin_dir = pg_bin_dir()
        self.run_as = _postgres_ids()
        self.root: str | None = None
        self.port: int | None = None
        self.password = secrets.token_hex(16)
        self.proc: subprocess.Popen | None = None
        self.log_path = LOG_DIR / "postgres.log"

    def url_for(self, database: str) -> str:
        return f"postgres://{PG_USER}:{self.password}@127.0.0.1:{self.port}/{database}"

    def _as_server_user(self) -> dict:
        """Popen arguments that run a child as the user the server runs as."""
        if self.run_as is None:
            return {}
        uid, gid = self.run_as
        return dict(user=uid, group=gid, extra_groups=[])

    def _env(self) -> dict:
        # The server user's HOME is the temporary directory, so nothing looks for root's.
        return dict(os.environ, HOME=self.root, LC_ALL="C")

    def start(self):
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        self.root = tempfile.mkdtemp(prefix="sluice-compat-pg-")
        if self.run_as is not None:
            os.chown(self.root, *self.run_as)
        (self.port,) = free_ports(1)
        pwfile = os.path.join(self.root, "pwfile")
        with open(pwfile, "w") as f:
            f.write(self.password + "\n")
        if self.run_as is not None:
            os.chown(pwfile, *self.run_as)
        with open(self.log_path, "wb") as log:
            r = subprocess.run(
                [
                    str(self.bin_dir / "initdb"), "-D", os.path.join(self.root, "data"), "-U", PG_USER,
                    "--auth=scram-sha-256", "--no-sync", "--encoding=UTF8", "--locale=C", f"--pwfile={pwfile}",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.root,
                env=self._env(),
                timeout=120,
                **self._as_server_user(),
            )
        os.unlink(pwfile)
        if r.returncode != 0:
            raise RuntimeError(f"initdb failed (status {r.returncode}):\n{tail(self.log_path)}")
        log = open(self.log_path, "ab")
        log.write(f"$ postgres -D {self.root}/data -p {self.port} (listen_addresses=127.0.0.1)\n".encode())
        log.flush()
        try:
            self.proc = subprocess.Popen(
                [
                    str(self.bin_dir / "postgres"), "-D", os.path.join(self.root, "data"), "-p", str(self.port),
                    "-c", "listen_addresses=127.0.0.1",
                    # The socket directory is the server's own (the default may not be writable).
                    "-c", f"unix_socket_directories={self.root}",
                    "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                    "-c", "max_connections=200", "-c", "shared_buffers=32MB",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.root,
                env=self._env(),
                preexec_fn=_die_with_parent,  # (runs after the switch of user: the setting survives)
                **self._as_server_user(),
            )
        finally:
            log.close()
        deadline = time.monotonic() + PG_READY_S
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited during start (status {self.proc.returncode}):\n{tail(self.log_path)}")
            ready = subprocess.run(
                [str(self.bin_dir / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port), "-t", "2"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            if ready.returncode == 0:
                return
            if time.monotonic() >= deadline:
                raise RuntimeError(f"postgres did not accept connections within {PG_READY_S} s:\n{tail(self.log_path)}")
            time.sleep(0.1)

    def psql(self, database: str, sql: str) -> str:
        """One SQL command with psql (as the superuser over TCP); its output, unaligned."""
        r = subprocess.run(
            [
                str(self.bin_dir / "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                "-h", "127.0.0.1", "-p", str(self.port), "-U", PG_USER, "-d", database, "-c", sql,
            ],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env=dict(os.environ, PGPASSWORD=self.password, PGCONNECT_TIMEOUT="5"),
            timeout=60,
        )
        if r.returncode != 0:
            raise RuntimeError(f"psql -c {sql!r} failed: {r.stderr.strip()}")
        return r.stdout

    def create_database(self, name: str):
        self.psql("postgres", f"CREATE DATABASE {name}")

    def stop(self):
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGINT)  # fast shutdown: ends the brokers' sessions
                try:
                    self.proc.wait(PG_STOP_S)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(10)
            self.proc = None
        if self.root:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None


_postgres: PostgresServer | None = None  # the session's PostgreSQL, started by the first cluster
_postgres_lock = threading.Lock()


def session_postgres() -> PostgresServer:
    """The PostgreSQL of this session, started on first use; stopped by stop_postgres()
    (pytest_unconfigure, and atexit for a pytest that ends otherwise)."""
    global _postgres
    with _postgres_lock:
        if _postgres is None:
            pg = PostgresServer()
            try:
                pg.start()
            except Exception:
                pg.stop()
                raise
            _postgres = pg
        return _postgres


def stop_postgres():
    global _postgres
    with _postgres_lock:
        if _postgres is not None:
            _postgres.stop()
            _postgres = None


# Registered at import (after stop_minio, so it runs before it), and so after every broker's
# atexit stop: the brokers shut down while their database is still there.
atexit.register(stop_postgres)


# --------------------------------------------------------------------------- brokers


class ExternalBroker:
    """A broker someone else started (--bootstrap). Nothing to start or stop."""

    def __init__(self, bootstrap: str, target: str, http_url: str | None = None):
        self.bootstrap = bootstrap
        self.target = target
        self.http_url = http_url

    def exit_problem(self) -> str | None:
        return None

    def stop(self):
        pass


class SluiceBroker:
    """`sluice serve` on free ports with a temporary data directory.

    kafka_addr: the listener address (default: a free port). A fixed address and `kill()`
    followed by `start()` give a crash and a restart on the same data directory and port
    (test_crash.py). The log file is appended to by every start after the first.

    With --storage object (storage="object", the default then) the broker runs with
    `--storage s3://BUCKET/compat` on the session's MinIO, in a bucket of its own made at its
    first start (so brokers the tests start next to the session's never share a prefix), and
    keeps that bucket over restarts; `new_data_dir()` gives a restart an empty data directory.

    With storage="cluster" the broker is one of a SluiceCluster, which sets `storage_url` (the
    cluster's bucket and prefix) and `metadata_url` (its database) before the first start; the
    broker runs with `--storage ... --metadata ...`, and a restart registers it anew (a new
    broker id) at the same address.
    """

    target = "sluice"

    def __init__(
        self,
        kafka_addr: str = "127.0.0.1:0",
        log_name: str = "sluice-serve.log",
        storage: str | None = None,
        extra_args: tuple[str, ...] = (),
        extra_env: dict | None = None,
    ):
        self.kafka_addr = kafka_addr
        # More `serve` arguments, after the suite's own, and environment (test_security.py:
        # listeners, TLS, SASL, ACLs; SLUICE_LOG).
        self.extra_args = list(extra_args)
        self.extra_env = dict(extra_env or {})
        self.storage = storage or STORAGE
        self.storage_url: str | None = None  # s3://BUCKET/compat once started in object mode
        self.metadata_url: str | None = None  # postgres://... in cluster mode (set by SluiceCluster)
        self.proc: subprocess.Popen | None = None
        self.data_dir: str | None = None
        self.bootstrap: str | None = None
        # "http://127.0.0.1:PORT" once serve logged its HTTP listener (None: no HTTP API).
        self.http_url: str | None = None
        self.log_path = LOG_DIR / log_name
        self.starts = 0
        self._binary: Path | None = None
        self._reader: threading.Thread | None = None
        self._stopped = False

    @staticmethod
    def binary() -> Path:
        """SLUICE_BIN if set; else target/debug/sluice, (re)built with cargo so it is never stale."""
        explicit = os.environ.get("SLUICE_BIN")
        if explicit:
            path = Path(explicit)
            path = path if path.is_absolute() else REPO_ROOT / path
            if not path.exists():
                raise RuntimeError(f"SLUICE_BIN={explicit} does not exist")
            return path
        path = REPO_ROOT / "target" / "debug" / "sluice"
        build_log = LOG_DIR / "cargo-build.log"
        # A no-op taking about a second when the binary is up to date.
        with open(build_log, "wb") as out:
            try:
                rc = subprocess.run(
                    ["cargo", "build", "--bin", "sluice"],
                    cwd=REPO_ROOT,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    timeout=CARGO_BUILD_S,
                ).returncode
            except (OSError, subprocess.TimeoutExpired) as e:
                rc = repr(e)
        if rc != 0 or not path.exists():
            raise RuntimeError(
                f"`cargo build --bin sluice` failed ({rc}); no broker to test. "
                f"Last lines of {build_log}:\n{tail(build_log, 30)}"
            )
        return path

    def start(self):
        if self._binary is None:
            self._binary = self.binary()
        binary = self._binary
        if self.data_dir is None:
            self.data_dir = tempfile.mkdtemp(prefix="sluice-compat-")
        cmd = [str(binary), "serve", "--data-dir", self.data_dir, "--kafka-addr", self.kafka_addr]
        env = dict(SLUICE_ENV)
        if self.storage == "object":
            minio = session_minio()
            if self.storage_url is None:
                bucket = "compat-" + secrets.token_hex(6)
                minio.create_bucket(bucket)
                self.storage_url = f"s3://{bucket}/{OBJECT_PREFIX}"
            # A short linger keeps the suite fast (see OBJECT_LINGER_MS).
            cmd += ["--storage", self.storage_url, "--object-linger-ms", str(OBJECT_LINGER_MS)]
            env.update(minio.env())
        elif self.storage == "cluster":
            assert self.storage_url and self.metadata_url, "a cluster broker is started by its SluiceCluster"
            cmd += ["--storage", self.storage_url, "--metadata", self.metadata_url, "--object-linger-ms", str(OBJECT_LINGER_MS)]
            env.update(session_minio().env())
        cmd += self.extra_args
        env.update(self.extra_env)
        # The HTTP API may come later than the Kafka listener; pass its flag once serve has it.
        try:
            usage = subprocess.run([str(binary), "serve", "--help"], capture_output=True, text=True, timeout=30)
            if "--http-addr" in usage.stdout + usage.stderr:
                cmd += ["--http-addr", "127.0.0.1:0"]
        except (OSError, subprocess.TimeoutExpired):
            pass  # starting it below reports the problem
        log = open(self.log_path, "ab" if self.starts else "wb")
        self.starts += 1
        shown = {k: ("***" if k == "AWS_SECRET_ACCESS_KEY" else v) for k, v in env.items()}
        shown_cmd = " ".join(re.sub(r"^(postgres://[^:/@]+:)[^@]*@", r"\1***@", arg) for arg in cmd)
        log.write(("$ " + "".join(f"{k}={v} " for k, v in shown.items()) + shown_cmd + "\n").encode())
        log.flush()
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=self.data_dir,
            env=dict(os.environ, **env),
            preexec_fn=_die_with_parent,
        )
        found = threading.Event()
        pattern = re.compile(rb"kafka listening on (127\.0\.0\.1:\d+)")
        # Logged before the Kafka line, so it is known by the time `found` is set.
        http_pattern = re.compile(rb"http listening on (127\.0\.0\.1:\d+)")

        def read_output():
            # Drain the broker's output for its whole life (so it never blocks on a full pipe).
            for line in self.proc.stdout:
                log.write(line)
                log.flush()
                h = http_pattern.search(line)
                if h:
                    self.http_url = "http://" + h.group(1).decode()
                m = pattern.search(line)
                if m and not found.is_set():
                    self.bootstrap = m.group(1).decode()
                    found.set()
            log.close()

        self._reader = threading.Thread(target=read_output, name="sluice-output", daemon=True)
        self._reader.start()
        deadline = time.monotonic() + SLUICE_READY_S
        while not found.is_set() and time.monotonic() < deadline and self.proc.poll() is None:
            found.wait(0.1)
        if not found.is_set():
            why = (
                f"exited with status {self.proc.returncode}"
                if self.proc.poll() is not None
                else f"printed no 'kafka listening on 127.0.0.1:PORT' line within {SLUICE_READY_S} s"
            )
            self._end_process()
            raise RuntimeError(f"sluice serve {why}. Output:\n{tail(self.log_path)}")
        host, port = self.bootstrap.rsplit(":", 1)
        if not wait_for_port(host, int(port), time.monotonic() + 10):
            self._end_process()
            raise RuntimeError(f"sluice said it listens on {self.bootstrap} but it does not accept connections")

    def _end_process(self):
        """After a failed start: end the process (SIGTERM, then SIGKILL), keep the data directory
        (stop() removes it; a failed restart must not lose the data under test)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(SLUICE_STOP_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self._reader is not None:
            self._reader.join(5)

    def kill(self):
        """A crash: SIGKILL by PID, wait until it is gone. The data directory stays; start() again
        to restart the broker on it."""
        if self.proc is None or self.proc.poll() is not None:
            return
        pid = self.proc.pid
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        if self._reader is not None:
            self._reader.join(5)  # it closes the log at the end of the broker's output
        with open(self.log_path, "ab") as log:
            log.write(f"# killed with SIGKILL (pid {pid}) at {time.strftime('%H:%M:%S')}\n".encode())

    def new_data_dir(self) -> str:
        """Object mode, with the broker not running: delete the data directory (only a cache
        there) and use a new, empty one at the next start(). Returns the new path."""
        assert self.proc is None or self.proc.poll() is not None, "the broker still runs"
        if self.data_dir:
            shutil.rmtree(self.data_dir)
        self.data_dir = tempfile.mkdtemp(prefix="sluice-compat-")
        return self.data_dir

    def exit_problem(self) -> str | None:
        if self.proc is not None and not self._stopped and self.proc.poll() is not None:
            return f"sluice serve exited with status {self.proc.returncode}:\n{tail(self.log_path)}"
        return None

    def stop(self):
        if self._stopped:
            return
        self._stopped = True
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(SLUICE_STOP_S)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(10)
            if self._reader is not None:
                self._reader.join(5)
        if self.data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)


class SluiceCluster:
    """`n` brokers in cluster mode (`sluice serve --storage s3://BUCKET/compat --metadata
    postgres://...`) on one bucket of the session's MinIO and one database of the session's
    PostgreSQL, both made for this cluster alone (so clusters the tests start next to the
    session's never share anything).

    It looks like one SluiceBroker to the tests: `bootstrap` lists every broker
    ("127.0.0.1:A,127.0.0.1:B,127.0.0.1:C"), `http_url` is the first broker's, start(), kill()
    (all of them), new_data_dir() (all of them), stop(). `brokers[i]` is one broker, to kill
    and start() again on its own. fixed_ports: each broker gets a free port picked now and
    keeps it over restarts (crash tests); otherwise port 0 (the session's cluster). The logs
    are compat/.logs/<log_prefix>-a.log, -b.log, ...
    """

    target = "sluice"
    storage = "cluster"

    def __init__(self, n: int = CLUSTER_BROKERS, log_prefix: str = "sluice-serve", fixed_ports: bool = False):
        addrs = [f"127.0.0.1:{p}" for p in free_ports(n)] if fixed_ports else ["127.0.0.1:0"] * n
        self.brokers = [
            SluiceBroker(kafka_addr=addr, log_name=f"{log_prefix}-{chr(ord('a') + i)}.log", storage="cluster")
            for i, addr in enumerate(addrs)
        ]
        self.storage_url: str | None = None
        self.metadata_url: str | None = None
        self.database: str | None = None

    @property
    def bootstrap(self) -> str | None:
        if any(b.bootstrap is None for b in self.brokers):
            return None
        return ",".join(b.bootstrap for b in self.brokers)

    @property
    def http_url(self) -> str | None:
        return self.brokers[0].http_url

    @property
    def data_dir(self) -> tuple:
        return tuple(b.data_dir for b in self.brokers)

    def _setup(self):
        """The cluster's bucket and database, once."""
        if self.storage_url is not None:
            return
        name = "compat-" + secrets.token_hex(6)
        session_minio().create_bucket(name)
        pg = session_postgres()
        database = name.replace("-", "_")
        pg.create_database(database)
        self.database = database
        self.metadata_url = pg.url_for(database)
        self.storage_url = f"s3://{name}/{OBJECT_PREFIX}"
        for b in self.brokers:
            b.storage_url, b.metadata_url = self.storage_url, self.metadata_url

    def start(self):
        """Start every broker that does not run, one after the other (the first one brings the
        schema up and binds the database to the bucket); then wait until Metadata through
        every broker lists every broker (each learns of the others at its next heartbeat, 1 s),
        so tests start from a cluster that agrees on its members."""
        self._setup()
        for b in self.brokers:
            if b.proc is None or b.proc.poll() is not None:
                b.start()
        self.wait_agreed()

    def wait_agreed(self, timeout_s: float = CLUSTER_AGREE_S):
        """Wait until Metadata through each broker lists exactly the brokers' addresses."""
        from confluent_kafka.admin import AdminClient

        want = sorted(b.bootstrap for b in self.brokers)
        deadline = time.monotonic() + timeout_s
        for b in self.brokers:
            admin = AdminClient({"bootstrap.servers": b.bootstrap, "client.id": "compat-cluster-ready"})
            while True:
                try:
                    md = admin.list_topics(timeout=5)
                    listed = sorted(f"{x.host}:{x.port}" for x in md.brokers.values())
                except Exception as e:  # (KafkaException: not answering yet)
                    listed = repr(e)
                if listed == want:
                    break
                if time.monotonic() >= deadline:
                    raise RuntimeError(f"Metadata through {b.bootstrap} lists {listed}, not the cluster's {want}, after {timeout_s} s")
                time.sleep(0.1)

    def kill(self):
        """SIGKILL every broker (by PID); their data directories stay."""
        for b in self.brokers:
            b.kill()

    def new_data_dir(self) -> tuple:
        """With every broker down: new, empty data directories for all of them."""
        return tuple(b.new_data_dir() for b in self.brokers)

    def exit_problem(self) -> str | None:
        for i, b in enumerate(self.brokers):
            problem = b.exit_problem()
            if problem:
                return f"broker {chr(ord('A') + i)} of the cluster: {problem}"
        return None

    def stop(self):
        # SIGTERM to all first, so they shut down together; then each stop() waits for its own
        # (SIGKILL after SLUICE_STOP_S) and removes its data directory.
        for b in self.brokers:
            if not b._stopped and b.proc is not None and b.proc.poll() is None:
                b.proc.send_signal(signal.SIGTERM)
        for b in self.brokers:
            b.stop()


class KafkaBaselineBroker:
    """A fresh Apache Kafka started with ../shared/kafka-baseline/start.sh in a temporary KB_HOME.

    The baseline directory may be read-only, so its jars are fetched into compat/.cache/ from a
    copy of its pom.xml unless the baseline already has a lib/ of its own.
    """

    target = "kafka-baseline"
    http_url = None  # Kafka has no HTTP API

    def __init__(self, request_log: bool):
        self.kb_dir = Path(os.environ.get("KAFKA_BASELINE_DIR", REPO_ROOT.parent / "shared" / "kafka-baseline"))
        self.request_log = request_log
        self.kb_home: str | None = None
        self.env: dict | None = None
        self.bootstrap: str | None = None
        self.pid: int | None = None
        self._stopped = False

    def lib_dir(self) -> Path:
        own = self.kb_dir / "lib"
        if list(own.glob("kafka_2.13-*.jar")) and list(own.glob("kafka-tools-[0-9]*.jar")):
            return own
        cache = CACHE_DIR / "kafka-baseline"
        cache.mkdir(parents=True, exist_ok=True)
        pom = (self.kb_dir / "pom.xml").read_bytes()
        if not (cache / "pom.xml").exists() or (cache / "pom.xml").read_bytes() != pom:
            (cache / "pom.xml").write_bytes(pom)
            shutil.rmtree(cache / "lib", ignore_errors=True)
        if not list((cache / "lib").glob("kafka-tools-[0-9]*.jar")):
            r = subprocess.run(
                ["mvn", "-B", "-q", "-Dstyle.color=never", "dependency:copy-dependencies"],
                cwd=cache,
                capture_output=True,
                text=True,
                timeout=MAVEN_FETCH_S,
            )
            if r.returncode != 0:
                raise RuntimeError(f"fetching Kafka's jars failed:\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
        return cache / "lib"

    def _script(self, name: str, *args: str, timeout: float) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", str(self.kb_dir / name), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start(self):
        if not (self.kb_dir / "start.sh").exists():
            raise RuntimeError(f"no Kafka baseline at {self.kb_dir} (set KAFKA_BASELINE_DIR)")
        lib = self.lib_dir()
        self.kb_home = tempfile.mkdtemp(prefix="compat-kafka-")
        port, controller_port = free_ports(2)
        self.env = dict(
            os.environ,
            KB_HOME=self.kb_home,
            KB_LIB=str(lib),
            KAFKA_PORT=str(port),
            KAFKA_CONTROLLER_PORT=str(controller_port),
        )
        try:
            r = self._script("start.sh", "--fresh", timeout=KAFKA_START_S)
        except subprocess.TimeoutExpired:
            self.stop()
            raise RuntimeError("Kafka did not start in time")
        if r.returncode != 0:
            self.stop()
            raise RuntimeError(f"Kafka did not start:\n{r.stdout}\n{r.stderr}")
        self.pid = int((Path(self.kb_home) / "kafka.pid").read_text().strip())
        self.bootstrap = f"127.0.0.1:{port}"
        if self.request_log:
            self._set_request_logger("DEBUG", lib)

    def _set_request_logger(self, level: str, lib: Path):
        r = subprocess.run(
            [
                "java",
                "-Xmx256m",
                f"-Dlog4j2.configurationFile={self.kb_dir / 'config' / 'tools-log4j2.xml'}",
                "-cp",
                f"{lib}/*",
                "kafka.admin.ConfigCommand",
                "--bootstrap-server",
                self.bootstrap,
                "--entity-type",
                "broker-loggers",
                "--entity-name",
                "1",
                "--alter",
                "--add-config",
                f"kafka.request.logger={level}",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if r.returncode != 0:
            raise RuntimeError(f"could not enable Kafka's request log:\n{r.stdout}{r.stderr}")

    def exit_problem(self) -> str | None:
        if self.pid is None or self._stopped:
            return None
        try:
            os.kill(self.pid, 0)
            return None
        except ProcessLookupError:
            return f"Kafka (pid {self.pid}) is no longer running; see {LOG_DIR / 'kafka-server.log'}"

    def stop(self):
        if self._stopped or self.kb_home is None:
            return
        self._stopped = True
        try:
            self._script("stop.sh", "--clean", timeout=60)
        except subprocess.TimeoutExpired:
            if self.pid is not None:
                try:
                    os.kill(self.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        logs = Path(self.kb_home) / "logs"
        server_log = logs / "server.log"
        if server_log.exists():
            shutil.copy(server_log, LOG_DIR / "kafka-server.log")
            if self.request_log:
                summarize_request_log(sorted(logs.glob("server.log*")), LOG_DIR / "kafka-api-usage.txt")
        shutil.rmtree(self.kb_home, ignore_errors=True)


# Names of the API keys a client may send (Kafka protocol numbering).
API_NAMES = {
    0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 8: "OffsetCommit", 9: "OffsetFetch",
    10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat", 13: "LeaveGroup", 14: "SyncGroup",
    15: "DescribeGroups", 16: "ListGroups", 17: "SaslHandshake", 18: "ApiVersions",
    19: "CreateTopics", 20: "DeleteTopics", 21: "DeleteRecords", 22: "InitProducerId",
    23: "OffsetForLeaderEpoch", 24: "AddPartitionsToTxn", 25: "AddOffsetsToTxn", 26: "EndTxn",
    28: "TxnOffsetCommit", 32: "DescribeConfigs", 33: "AlterConfigs", 35: "DescribeLogDirs",
    36: "SaslAuthenticate", 37: "CreatePartitions", 42: "DeleteGroups",
    44: "IncrementalAlterConfigs", 47: "OffsetDelete", 48: "DescribeClientQuotas",
    50: "DescribeUserScramCredentials", 60: "DescribeCluster", 61: "DescribeProducers",
    65: "DescribeTransactions", 66: "ListTransactions", 68: "ConsumerGroupHeartbeat",
    69: "ConsumerGroupDescribe", 71: "GetTelemetrySubscriptions", 72: "PushTelemetry",
    75: "DescribeTopicPartitions", 76: "ShareGroupHeartbeat", 77: "ShareGroupDescribe",
    78: "ShareFetch", 79: "ShareAcknowledge", 90: "DescribeShareGroupOffsets",
    91: "AlterShareGroupOffsets", 92: "DeleteShareGroupOffsets",
}


def summarize_request_log(paths: list[Path], out: Path):
    """Write, per client.id prefix, each API key and the versions Kafka saw in requests."""
    header = re.compile(r'"requestApiKey":(\d+),"requestApiVersion":(\d+),"correlationId":-?\d+,"clientId":"([^"]*)"')
    seen: dict[str, dict[int, set[int]]] = defaultdict(lambda: defaultdict(set))
    for path in paths:
        with open(path, errors="replace") as f:
            for line in f:
                if "Completed request" not in line:
                    continue
                m = header.search(line)
                if m and m.group(3).startswith("compat-"):  # the suite's clients, not Kafka's own
                    key, version, client = int(m.group(1)), int(m.group(2)), m.group(3)
                    # Tests name their clients compat-<client>-<role>-<run>; group by client and role.
                    client = re.sub(r"-[0-9a-f]{8}$", "", client)
                    seen[client][key].add(version)
    with open(out, "w") as f:
        f.write("API keys and versions Apache Kafka received, by client.id (from its request log)\n")
        for client in sorted(seen):
            f.write(f"\n{client}\n")
            for key in sorted(seen[client]):
                versions = ",".join(str(v) for v in sorted(seen[client][key]))
                f.write(f"  {key:3d} {API_NAMES.get(key, '?'):24s} v{versions}\n")
    (out.with_suffix(".json")).write_text(
        json.dumps({c: {str(k): sorted(v) for k, v in ks.items()} for c, ks in seen.items()}, indent=1)
    )


# --------------------------------------------------------------------------- fixtures

_started = None  # the broker of this session, once started
_died_during = None  # node id of the test during which the broker process exited


def _raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.fixture(scope="session")
def broker(request):
    """The broker under test (started once per session unless --bootstrap is given)."""
    global _started
    config = request.config
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    bootstrap = config.getoption("--bootstrap")
    target = config.getoption("--target")
    if bootstrap:
        b = ExternalBroker(bootstrap, target, config.getoption("--http-url"))
    elif target == "kafka-baseline":
        b = KafkaBaselineBroker(request_log=config.getoption("--kafka-request-log"))
    elif STORAGE == "cluster":
        b = SluiceCluster()
    else:
        b = SluiceBroker()
    # Stop the broker however this process ends: normal teardown, atexit, or SIGTERM/SIGHUP
    # (turned into KeyboardInterrupt so that teardown and atexit run).
    atexit.register(b.stop)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_keyboard_interrupt)
    if not isinstance(b, ExternalBroker):
        try:
            b.start()
        except Exception:
            b.stop()
            raise
    _started = b
    yield b
    _started = None
    b.stop()


@pytest.fixture(scope="session")
def bootstrap(broker) -> str:
    return broker.bootstrap


@pytest.fixture(scope="session")
def http_url(broker) -> str:
    """Base URL of the broker's HTTP API; skips the test when the broker has none (Kafka)."""
    if broker.http_url is None:
        why = "Apache Kafka has no HTTP API" if broker.target == "kafka-baseline" else "no HTTP API address known"
        pytest.skip(f"{why} (the HTTP API is Sluice's own)")
    return broker.http_url


@pytest.fixture(autouse=True)
def _broker_survived_the_test(request):
    """Fail the test during which the broker process died (with its last output), and every
    test after it at once, instead of letting each one time out against a dead port."""
    global _died_during
    if _died_during:
        pytest.fail(f"the broker exited during {_died_during}; nothing to test against", pytrace=False)
    yield
    if _started is not None:
        problem = _started.exit_problem()
        if problem:
            _died_during = request.node.nodeid
            pytest.fail(problem, pytrace=False)
