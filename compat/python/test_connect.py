"""Kafka Connect 4.3.1 in distributed mode, unchanged, against the broker under test.

One worker (org.apache.kafka.connect.cli.ConnectDistributed, connect-runtime and connect-file
4.3.1 from compat/.cache/connect/lib, fetched by compat/run.sh from compat/connect/pom.xml)
keeps its connector configs, source offsets and statuses in three topics it creates itself:
compacted (cleanup.policy=compact, which the worker checks with DescribeConfigs), replication
factor 1. It joins a group of its own with the classic protocol (protocol type `connect`).

Through the worker's REST API the test creates a FileStreamSource connector (a temporary input
file into a topic) and a FileStreamSink connector (that topic into a temporary output file),
appends lines to the input, kills the worker with SIGKILL while lines are in flight, appends
more while it is down, restarts it (the connectors come back from the config topic, the source
resumes from its stored offset, the sink from its group's committed offset), appends more, and
waits until the output file holds every input line. Connect is at-least-once here: nothing may
be lost; duplicates are allowed and counted (shown in the run's "compat notes").

Skipped in object-storage and cluster mode, which refuse compacted topics (INVALID_CONFIG).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

import conftest
from conftest import CACHE_DIR, COMPAT_DIR, LOG_DIR, MAVEN_FETCH_S, TERMINAL_NOTES, free_ports, tail

CONNECT_POM = COMPAT_DIR / "connect" / "pom.xml"
CONNECT_LIB = CACHE_DIR / "connect" / "lib"
CONNECT_STAMP = CACHE_DIR / "connect.sha256"  # sha256 of the pom the jars in CONNECT_LIB came from
WORKER_LOG = LOG_DIR / "connect-worker.log"
WAIT_S = 90  # bound on every wait: the REST API, a connector running, the output complete
WORKER_STOP_S = 15  # SIGTERM grace period before SIGKILL at the end
LINES_PER_BATCH = 250


def compaction_unavailable(config) -> str | None:
    """Why the broker this run tests has no compacted topics, or None (decided before it starts)."""
    if config.getoption("--target") == "sluice" and conftest.STORAGE in ("object", "cluster"):
        return (f"--storage {conftest.STORAGE}: Sluice refuses cleanup.policy=compact outside local-disk mode "
                "(INVALID_CONFIG), and Connect's config, offset and status topics must be compacted")
    return None


def connect_lib() -> Path:
    """The worker's jars; fetched with Maven when compat/run.sh has not (or the pom changed)."""
    want = hashlib.sha256(CONNECT_POM.read_bytes()).hexdigest()
    have = CONNECT_STAMP.read_text().strip() if CONNECT_STAMP.exists() else ""
    if have != want or not list(CONNECT_LIB.glob("connect-file-*.jar")):
        shutil.rmtree(CONNECT_LIB, ignore_errors=True)  # no jars of an older version left beside the new
        r = subprocess.run(
            ["mvn", "-B", "-q", "-Dstyle.color=never", "dependency:copy-dependencies"],
            cwd=CONNECT_POM.parent, capture_output=True, text=True, timeout=MAVEN_FETCH_S,
        )
        if r.returncode != 0:
            pytest.fail(f"fetching Kafka Connect's jars failed:\n{r.stdout[-3000:]}{r.stderr[-3000:]}", pytrace=False)
        CONNECT_STAMP.parent.mkdir(parents=True, exist_ok=True)
        CONNECT_STAMP.write_text(want + "\n")
    return CONNECT_LIB


class Worker:
    """One ConnectDistributed process; always ended by its PID."""

    def __init__(self, lib: Path, workdir: Path, base_props: dict):
        self.lib = lib
        self.workdir = workdir
        self.base_props = base_props
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.starts = 0

    def start(self):
        self.starts += 1
        (port,) = free_ports(1)  # a new port each start: the old one may linger in TIME_WAIT
        self.url = f"http://127.0.0.1:{port}"
        props = dict(self.base_props, listeners=f"http://127.0.0.1:{port}",
                     **{"rest.advertised.host.name": "127.0.0.1", "rest.advertised.port": str(port)})
        path = self.workdir / f"worker-{self.starts}.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        log4j = self.workdir / "log4j2.xml"
        log4j.write_text(
            '<?xml version="1.0" encoding="UTF-8"?>\n<Configuration status="WARN"><Appenders>'
            '<Console name="out" target="SYSTEM_OUT"><PatternLayout pattern="[%d] %p %m (%c)%n"/></Console>'
            '</Appenders><Loggers><Root level="info"><AppenderRef ref="out"/></Root>'
            '<Logger name="org.apache.kafka.clients" level="warn"/>'
            '<Logger name="org.reflections" level="error"/></Loggers></Configuration>\n'
        )
        cmd = ["java", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               f"-Dlog4j2.configurationFile={log4j}", "-cp", f"{self.lib}/*",
               "org.apache.kafka.connect.cli.ConnectDistributed", str(path)]
        with open(WORKER_LOG, "ab") as log:
            log.write(f"\n===== worker start {self.starts}: {' '.join(cmd)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         cwd=self.workdir, preexec_fn=conftest._die_with_parent)

    def kill(self):
        """SIGKILL, as a machine or container dies: no shutdown, no final commit or flush."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        with open(WORKER_LOG, "ab") as log:
            log.write(b"\n===== worker killed with SIGKILL\n")

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(WORKER_STOP_S)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def check_alive(self):
        if self.proc is not None and self.proc.poll() is not None:
            pytest.fail(f"the Connect worker exited with status {self.proc.returncode}:\n{tail(WORKER_LOG, 60)}",
                        pytrace=False)

    def rest(self, method: str, path: str, body: dict | None = None) -> tuple[int, object]:
        """One REST call: (HTTP status, decoded JSON or text); status 0 when nothing answered."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                status, text = resp.status, resp.read().decode()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read().decode(errors="replace")
        except (OSError, urllib.error.URLError) as e:
            return 0, repr(e)
        try:
            return status, json.loads(text) if text else None
        except ValueError:
            return status, text

    def wait(self, what: str, predicate, timeout_s: float = WAIT_S):
        deadline = time.monotonic() + timeout_s
        last = None
        while True:
            self.check_alive()
            last = predicate()
            if last is True:
                return
            if time.monotonic() >= deadline:
                pytest.fail(f"timed out after {timeout_s} s waiting for {what} (last: {last!r}); worker log:\n"
                            f"{tail(WORKER_LOG, 60)}", pytrace=False)
            time.sleep(0.5)

    def wait_ready(self):
        """Until the REST API answers and the worker has joined its group (GET /connectors
        answers 200 only then; before, it answers 409 or nothing)."""
        def ready():
            status, body = self.rest("GET", "/connectors")
            return True if status == 200 else (status, body)

        self.wait("the Connect worker's REST API", ready)

    def create_connector(self, name: str, config: dict):
        def created():
            status, body = self.rest("POST", "/connectors", {"name": name, "config": config})
            # 409: a rebalance is under way (retry), or the connector exists (an earlier try went through).
            if status == 201 or (status == 409 and "already exists" in str(body)):
                return True
            return status, body

        self.wait(f"connector {name} created", created)

    def wait_running(self, name: str, tasks: int = 1):
        def running():
            status, body = self.rest("GET", f"/connectors/{name}/status")
            if status != 200:
                return status, body
            states = [body["connector"]["state"]] + [t["state"] for t in body.get("tasks", [])]
            if "FAILED" in states:
                pytest.fail(f"connector {name} failed: {json.dumps(body)[:3000]}", pytrace=False)
            return True if len(body.get("tasks", [])) == tasks and set(states) == {"RUNNING"} else body

        self.wait(f"connector {name} and its task RUNNING", running)


def append_lines(path: Path, lines: list[str]):
    with open(path, "a") as f:
        for line in lines:
            f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_output(path: Path) -> list[str]:
    """The complete lines of the sink's file (a line being written may lack its newline)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return text.split("\n")[:-1]


@pytest.mark.timeout(300)
def test_connect_distributed_file_pipeline_survives_worker_kill(request, tmp_path):
    why = compaction_unavailable(request.config)
    if why:
        pytest.skip(why)
    broker = request.getfixturevalue("broker")
    bootstrap = broker.bootstrap
    lib = connect_lib()
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    WORKER_LOG.write_text("")
    run = uuid.uuid4().hex[:8]
    topic = f"compat-connect-lines-{run}"
    internal = {kind: f"compat-connect-{kind}-{run}" for kind in ("configs", "offsets", "status")}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])[topic].result(30)

    input_file, output_file = tmp_path / "input.txt", tmp_path / "output.txt"
    input_file.write_text("")
    worker = Worker(lib, tmp_path, {
        "bootstrap.servers": bootstrap,
        "group.id": f"compat-connect-{run}",
        "config.storage.topic": internal["configs"],
        "offset.storage.topic": internal["offsets"],
        "status.storage.topic": internal["status"],
        "config.storage.replication.factor": "1",
        "offset.storage.replication.factor": "1",
        "status.storage.replication.factor": "1",
        "offset.storage.partitions": "3",
        "status.storage.partitions": "1",
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "org.apache.kafka.connect.storage.StringConverter",
        # Source offsets and sink commits every second (default 60 s), so a kill loses little.
        "offset.flush.interval.ms": "1000",
        # The killed worker never leaves the group: the restarted one waits for the session
        # timeout (10 s by default) to drop it, and then must get the tasks at once rather than
        # after the cooperative assignor's delay for lost tasks (5 min by default).
        "session.timeout.ms": "6000",
        "heartbeat.interval.ms": "1000",
        "scheduled.rebalance.max.delay.ms": "0",
        # Likewise the sink task's consumer, a member of group connect-<connector>: without this
        # its restart waits 45 s (the consumer's default session timeout) for the dead member.
        "consumer.session.timeout.ms": "6000",
        "consumer.heartbeat.interval.ms": "1000",
        "plugin.discovery": "hybrid_warn",
    })
    lines: list[str] = []

    def batch(label: str) -> list[str]:
        new = [f"{label} line {len(lines) + i:05d} {run}" for i in range(LINES_PER_BATCH)]
        lines.extend(new)
        return new

    t0 = time.monotonic()
    try:
        worker.start()
        worker.wait_ready()
        worker.create_connector("compat-file-source", {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
            "tasks.max": "1",
            "file": str(input_file),
            "topic": topic,
        })
        worker.create_connector("compat-file-sink", {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
            "tasks.max": "1",
            "file": str(output_file),
            "topics": topic,
        })
        worker.wait_running("compat-file-source")
        worker.wait_running("compat-file-sink")

        # Connect created its three topics compacted (and checked that they are).
        for name in internal.values():
            resource = ConfigResource(ConfigResource.Type.TOPIC, name)
            configs = admin.describe_configs([resource])[resource].result(30)
            assert configs["cleanup.policy"].value == "compact", (name, configs["cleanup.policy"].value)

        append_lines(input_file, batch("before"))
        worker.wait("the first lines in the output file",
                    lambda: True if set(lines) <= set(read_output(output_file)) else len(read_output(output_file)))

        # Give both connectors time to commit what they did (source offsets, the sink group's
        # offsets: every offset.flush.interval.ms), so that the kill below interrupts lines in
        # flight rather than a pipeline that never committed.
        time.sleep(3)

        # Lines in flight when the worker dies: kill it as soon as the first of them reach the output.
        in_flight = batch("in-flight")
        append_lines(input_file, in_flight)
        worker.wait("the in-flight lines starting to arrive",
                    lambda: True if set(in_flight) & set(read_output(output_file)) else False, timeout_s=30)
        worker.kill()
        killed_at = time.monotonic()
        append_lines(input_file, batch("while-down"))

        worker.start()
        worker.wait_ready()
        worker.wait_running("compat-file-source")
        worker.wait_running("compat-file-sink")
        append_lines(input_file, batch("after"))

        def complete():
            got = set(read_output(output_file))
            missing = [line for line in lines if line not in got]
            return True if not missing else f"{len(missing)} lines missing, e.g. {missing[:3]}"

        worker.wait("every input line in the output file", complete)
        recovered_s = time.monotonic() - killed_at
        out = read_output(output_file)
        counts = Counter(out)
        assert set(counts) == set(lines), sorted(set(counts) - set(lines))[:5]
        duplicates = sum(n - 1 for n in counts.values())
        by_batch = Counter(line.split(" ", 1)[0] for line, n in counts.items() for _ in range(n - 1))
        TERMINAL_NOTES.append(
            f"test_connect ({broker.target}): {len(lines)} lines through FileStreamSource -> {topic} -> "
            f"FileStreamSink, worker SIGKILLed once; none lost, {duplicates} duplicated (at-least-once; by batch "
            f"{dict(by_batch) or 'none'}); "
            f"{recovered_s:.1f} s from the kill to a complete output, {time.monotonic() - t0:.1f} s in all"
        )
    finally:
        worker.stop()
