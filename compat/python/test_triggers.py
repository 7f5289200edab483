"""Event triggers end to end: rules over topics, fed by real producers (confluent-kafka, kcat and
the HTTP event endpoint), firing into a topic and into a webhook receiver run by the test, and a
SIGKILL of the broker in the middle with no firing lost and none duplicated.

Each test starts its own `sluice serve` (local disk, or object storage with --storage object):
a trigger's state must survive the kill. In cluster mode triggers are not offered yet; the
session's brokers must say so (HTTP 503 with the reason). Sluice-only: Kafka has no triggers.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

import conftest
from compat_util import wait_until

KCAT = shutil.which("kcat")
SIGNATURE_TOLERANCE_S = 300


@pytest.fixture(scope="module")
def own_target(request):
    if request.config.getoption("--bootstrap"):
        pytest.skip("starts its own broker; not with --bootstrap")
    if request.config.getoption("--target") != "sluice":
        pytest.skip("triggers are a Sluice feature; Kafka has none")


@pytest.fixture
def node(own_target):
    if conftest.cluster_mode():
        pytest.skip("triggers are not offered in cluster mode yet (test_cluster_mode_says_why checks the answer)")
    broker = conftest.SluiceBroker(log_name=f"sluice-triggers-{uuid.uuid4().hex[:6]}.log")
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def http(base: str, method: str, path: str, body=None) -> tuple[int, dict | list | None]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw = resp.read()
            return resp.status, (json.loads(raw) if raw else None)
    except urllib.error.HTTPError as e:
        raw = e.read()
        return e.code, (json.loads(raw) if raw else None)


def cli(broker, *args: str) -> subprocess.CompletedProcess:
    http_addr = broker.http_url.removeprefix("http://")
    return subprocess.run([str(conftest.SluiceBroker.binary()), "trigger", *args, "--http", http_addr],
                          capture_output=True, text=True, timeout=60)


def create_topic(broker, name: str, partitions: int = 1):
    status, body = http(broker.http_url, "POST", "/topics", {"name": name, "partitions": partitions})
    assert status in (200, 201), body


def produce(bootstrap: str, topic: str, events: list[tuple[str, str]]):
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for entity, event in events:
        p.produce(topic, key=entity.encode(), value=b"{}", headers=[("event", event.encode())])
    assert p.flush(30) == 0


def read_topic(bootstrap: str, topic: str, timeout_s: float = 20) -> list:
    """Every record of every partition of `topic`, from the start to the end as of now."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "check.crcs": True})
    try:
        meta = consumer.list_topics(topic, timeout=10)
        parts = list(meta.topics[topic].partitions) if topic in meta.topics else []
        got, ends = [], {}
        tps = []
        for p in parts:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high > low:
                ends[p] = high
                tps.append(TopicPartition(topic, p, low))
        if not tps:
            return []
        consumer.assign(tps)
        done: dict[int, int] = {}
        deadline = time.monotonic() + timeout_s
        while any(done.get(p, -1) < ends[p] - 1 for p in ends) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append(msg)
            done[msg.partition()] = msg.offset()
        return got
    finally:
        consumer.close()


def firing_ids(msgs) -> list[str]:
    return [dict(m.headers())["sluice-firing-id"].decode() for m in msgs]


def describe(broker, name: str) -> dict:
    status, body = http(broker.http_url, "GET", f"/triggers/{name}")
    assert status == 200, body
    return body


def test_topic_sink_with_confluent_kafka_kcat_and_http_events(node):
    create_topic(node, "signups", 3)
    out = cli(node, "create", "unpaid", "--source", "signups",
              "--rule", '"signed_up" THEN (NOT "paid" WITHIN 3s)', "--sink", "topic:unpaid")
    assert out.returncode == 0, out.stderr + out.stdout
    assert '"signed_up" THEN NOT "paid" WITHIN 3s' in out.stdout
    produce(node.bootstrap, "signups", [("u1", "signed_up"), ("u2", "signed_up"), ("u4", "browsed")])
    if KCAT:
        subprocess.run([KCAT, "-P", "-b", node.bootstrap, "-t", "signups", "-k", "u2", "-H", "event=paid"],
                       input="{}\n", text=True, check=True, timeout=30)
    else:
        produce(node.bootstrap, "signups", [("u2", "paid")])
    status, body = http(node.http_url, "POST", "/topics/signups/events",
                        {"event_name": "signed_up", "entity_id": "u3", "data": {"plan": "pro"}})
    assert status == 200, body
    wait_until(lambda: len(read_topic(node.bootstrap, "unpaid", 5)) >= 2, 30, "two firings in topic unpaid")
    time.sleep(1)
    msgs = read_topic(node.bootstrap, "unpaid")
    assert sorted(m.key().decode() for m in msgs) == ["u1", "u3"]
    for m in msgs:
        value = json.loads(m.value())
        assert value["trigger"] == "unpaid"
        assert value["entity"] == m.key().decode()
        assert [e["event"] for e in value["events"]] == ["signed_up"]
        assert dict(m.headers())["sluice-trigger"] == b"unpaid"
    info = describe(node, "unpaid")
    assert info["status"]["firings"] == 2 and info["status"]["delivered"] == 2, info
    assert info["status"]["skipped"].get("not_in_rule") == 1, info
    listed = cli(node, "list")
    assert listed.returncode == 0 and "unpaid" in listed.stdout, listed.stderr
    shown = cli(node, "describe", "unpaid", "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout)["name"] == "unpaid", shown.stderr
    bad = cli(node, "create", "bad", "--source", "signups", "--rule", '"a" THEN (NOT "b" WITHIN )',
              "--sink", "topic:x")
    assert bad.returncode != 0 and "WITHIN" in (bad.stderr + bad.stdout)
    assert cli(node, "delete", "unpaid").returncode == 0
    status, _ = http(node.http_url, "GET", "/triggers/unpaid")
    assert status == 404


class Receiver:
    """A webhook receiver on 127.0.0.1: verifies each request's signature and records it;
    answers the statuses in `script` first, then 200."""

    def __init__(self, secret: str, script: list[int]):
        self.secret = secret.encode()
        self.script = list(script)
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                sig = self.headers.get("Sluice-Signature", "")
                with receiver.lock:
                    receiver.requests.append({"body": body, "signature": sig,
                                              "key": self.headers.get("Idempotency-Key"),
                                              "valid": receiver.verify(sig, body)})
                    status = receiver.script.pop(0) if receiver.script else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def verify(self, header: str, body: bytes) -> bool:
        parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
        if "t" not in parts or "v1" not in parts:
            return False
        if abs(time.time() - int(parts["t"])) > SIGNATURE_TOLERANCE_S:
            return False
        want = hmac.new(self.secret, parts["t"].encode() + b"." + body, hashlib.sha256).hexdigest()
        return hmac.compare_digest(want, parts["v1"])

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def test_webhook_signed_retried_then_dead_lettered(node):
    create_topic(node, "orders")
    secret = "test-secret-" + uuid.uuid4().hex
    receiver = Receiver(secret, [500, 503])
    try:
        status, body = http(node.http_url, "POST", "/triggers", {
            "name": "shipped-unpaid", "sources": ["orders"], "rule": '"shipped" AND NOT "paid"',
            "sink": receiver.url, "secret": secret, "initial_backoff_ms": 50, "max_backoff_ms": 200,
        })
        assert status == 201, body
        assert "secret" not in body, "a given secret is not echoed"
        status, body = http(node.http_url, "POST", "/topics/orders/events",
                            [{"event_name": "paid", "entity_id": "o1"},
                             {"event_name": "shipped", "entity_id": "o1"},
                             {"event_name": "shipped", "entity_id": "o2"}])
        assert status == 200, body
        wait_until(lambda: len(receiver.requests) >= 3, 30, "the webhook called three times")
        time.sleep(0.5)
        reqs = receiver.requests
        assert len(reqs) == 3, reqs
        assert all(r["valid"] for r in reqs), reqs
        assert len({r["key"] for r in reqs}) == 1, "retries carry the same idempotency key"
        payload = json.loads(reqs[-1]["body"])
        assert payload["entity"] == "o2" and payload["trigger"] == "shipped-unpaid"
        assert payload["firing_id"] == reqs[-1]["key"]
        info = describe(node, "shipped-unpaid")
        assert info["status"]["delivered"] == 1 and info["status"]["delivery_failures"] == 2, info

        # A receiver that is gone: every attempt fails, then the dead-letter topic.
        status, body = http(node.http_url, "POST", "/triggers", {
            "name": "gone", "sources": ["orders"], "rule": '"refunded"',
            "sink": "http://127.0.0.1:9/never", "max_attempts": 2, "initial_backoff_ms": 20,
            "max_backoff_ms": 40,
        })
        assert status == 201, body
        assert body["secret"].startswith("whsec_"), "a generated secret is shown once"
        assert body["dead_letter_topic"] == "gone.dead-letter"
        http(node.http_url, "POST", "/topics/orders/events", {"event_name": "refunded", "entity_id": "o3"})
        wait_until(lambda: len(read_topic(node.bootstrap, "gone.dead-letter", 5)) == 1, 30,
                   "the firing in the dead-letter topic")
        [dead] = read_topic(node.bootstrap, "gone.dead-letter")
        headers = dict(dead.headers())
        assert dead.key() == b"o3" and headers["sluice-attempts"] == b"2", headers
        assert headers["sluice-error"], headers
    finally:
        receiver.stop()


def test_sigkill_loses_and_duplicates_no_firing(node):
    """2,000 users sign up, 1,000 of them pay; the broker is SIGKILLed once the events are
    evaluated and again once the trigger fires, and restarted each time: the sink holds exactly
    one firing per unpaid user."""
    create_topic(node, "signups", 4)
    status, body = http(node.http_url, "POST", "/triggers", {
        "name": "unpaid", "sources": ["signups"], "rule": '"signed_up" THEN (NOT "paid" WITHIN 2s)',
        "sink": "topic:unpaid",
    })
    assert status == 201, body
    users = [f"user-{i}" for i in range(2000)]
    produce(node.bootstrap, "signups", [(u, "signed_up") for u in users])
    produce(node.bootstrap, "signups", [(u, "paid") for u in users[::2]])
    unpaid = sorted(users[1::2])
    # First kill: the events are evaluated (state written), no window has closed yet.
    wait_until(lambda: describe(node, "unpaid")["status"]["events"] >= 3000, 30, "the events evaluated")
    node.kill()
    node.start()
    # Second kill: as soon as the first firings are made (their delivery may be under way).
    wait_until(lambda: describe(node, "unpaid")["status"]["firings"] > 0, 30, "the first firings")
    node.kill()
    node.start()
    wait_until(lambda: len(read_topic(node.bootstrap, "unpaid", 10)) >= len(unpaid), 60,
               f"{len(unpaid)} firings after the restart")
    time.sleep(2)
    msgs = read_topic(node.bootstrap, "unpaid")
    keys = sorted(m.key().decode() for m in msgs)
    ids = firing_ids(msgs)
    assert len(ids) == len(set(ids)), "no firing is written twice"
    assert keys == unpaid, f"{len(keys)} firings for {len(set(keys))} users, want {len(unpaid)}"
    info = describe(node, "unpaid")
    assert info["status"]["state"] == "running", info


def test_cluster_mode_says_why(own_target, http_url):
    if not conftest.cluster_mode():
        pytest.skip("checks the cluster-mode answer")
    status, body = http(http_url, "GET", "/triggers")
    assert status == 503 and "cluster mode" in body["error"], body
