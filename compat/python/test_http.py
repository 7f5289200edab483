"""Sluice's HTTP API against its specification and against real Kafka clients.

Sluice only: every test that needs the HTTP API skips with --target kafka-baseline (Kafka has no
HTTP API); the specification's own check runs everywhere.

- The specification: docs/openapi.yaml is a valid OpenAPI document (openapi-spec-validator) and
  names every route the server has (crates/http/src/lib.rs).
- Every route, success and error answers: each response is validated against docs/openapi.yaml
  with openapi-core (status listed for the operation, JSON body matching its schema, required
  headers such as Retry-After and WWW-Authenticate present), and its content is checked.
- Interop, HTTP -> Kafka: records produced over HTTP (JSON with keys, headers, null values,
  base64 binary, JSON values; and the binary batch format) are read by confluent-kafka and
  kafka-python consumers with the same keys, values, headers, partitions, offsets and
  timestamps the HTTP API reported.
- Interop, Kafka -> HTTP: records produced by confluent-kafka (lz4-compressed batches) and
  kafka-python (uncompressed) are read over HTTP, as JSON (auto and base64 encodings, paged) and
  in the binary format, with identical content at the partitions and offsets the producers
  were told.
- Partitioning: keyed records produced over HTTP land on the partition confluent-kafka
  (`partitioner=murmur2_random`, the Java client's murmur2) and kafka-python (murmur2 by
  default) pick for the same key.
- Offsets: committed over HTTP, they are what confluent-kafka's and kafka-python's `committed()`
  return; committed by those clients, they are what GET /groups/{group}/offsets returns, with
  the right lag; a commit over HTTP while a Kafka consumer is a member of the group is a 409.

Every test uses its own topics (compat-http-...), deleted over HTTP at the end.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import struct
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
import yaml
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition
from kafka.structs import OffsetAndMetadata
from openapi_core import OpenAPI
from openapi_core.contrib.requests import RequestsOpenAPIRequest, RequestsOpenAPIResponse
from openapi_spec_validator import validate as validate_spec

from compat_util import find_coordinator, now_ms, topic_name, wait_until
from conftest import cluster_mode

REPO_ROOT = Path(__file__).resolve().parents[2]
SPEC_PATH = REPO_ROOT / "docs" / "openapi.yaml"
ROUTER_PATH = REPO_ROOT / "crates" / "http" / "src" / "lib.rs"
BATCH_TYPE = "application/x-sluice-batch"
HTTP_TIMEOUT_S = 30  # any single HTTP request
READ_TIMEOUT_S = 30  # a Kafka consumer must have read everything within this


# --------------------------------------------------------------------------- helpers


@dataclass(frozen=True)
class Rec:
    """A record as stored: what every reader must see at (partition, offset)."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp_ms: int


def pack_batch(values: list[bytes]) -> bytes:
    """The binary batch format: uint32 BE count, the uint32 BE sizes, the values."""
    return struct.pack(f">I{len(values)}I", len(values), *(len(v) for v in values)) + b"".join(values)


def unpack_batch(body: bytes) -> list[bytes]:
    (n,) = struct.unpack_from(">I", body, 0)
    sizes = struct.unpack_from(f">{n}I", body, 4)
    pos = 4 + 4 * n
    values = []
    for size in sizes:
        values.append(body[pos : pos + size])
        pos += size
    assert pos == len(body), f"binary body: sizes add up to {pos} bytes, body has {len(body)}"
    return values


def is_utf8(b: bytes | None) -> bool:
    if b is None:
        return True
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


class Http:
    """A session on the HTTP API that checks every answer's status and validates it against
    docs/openapi.yaml (the spec's server is replaced by the broker's address)."""

    def __init__(self, base: str, spec: dict):
        self.base = base
        spec = copy.deepcopy(spec)
        spec["servers"] = [{"url": base}]
        self.openapi = OpenAPI.from_dict(spec)
        self.session = requests.Session()

    def call(self, method: str, path: str, status: int, *, validate: bool = True, **kwargs) -> requests.Response:
        kwargs.setdefault("timeout", HTTP_TIMEOUT_S)
        r = self.session.request(method, self.base + path, **kwargs)
        assert r.status_code == status, f"{method} {path}: expected {status}, got {r.status_code}: {r.text[:500]}"
        if status >= 400:
            body = r.json()
            assert isinstance(body.get("error"), str) and body["error"], f"{method} {path}: {body}"
        if validate:
            try:
                self.openapi.validate_response(RequestsOpenAPIRequest(r.request), RequestsOpenAPIResponse(r))
            except Exception as e:  # the validator's errors carry the reason in __cause__
                cause = f" ({e.__cause__})" if e.__cause__ else ""
                raise AssertionError(f"{method} {path} -> {r.status_code} does not match docs/openapi.yaml: {e}{cause}\n{r.text[:500]}") from e
        return r

    def error(self, method: str, path: str, status: int, needle: str, **kwargs) -> str:
        """An error answer whose message mentions `needle`."""
        message = self.call(method, path, status, **kwargs).json()["error"]
        assert needle.lower() in message.lower(), f"{method} {path} -> {status}: '{message}' does not mention '{needle}'"
        return message

    def create_topic(self, name: str, partitions: int) -> dict:
        return self.call("POST", "/topics", 201, json={"name": name, "partitions": partitions}).json()

    def produce(self, topic: str, records, **kwargs) -> dict:
        return self.call("POST", f"/topics/{topic}/records", 200, json=records, **kwargs).json()

    def read_json(self, topic: str, partition: int, *, encoding: str = "auto", max_records: int = 500) -> list[Rec]:
        """Every record of a partition, read as JSON page by page."""
        out: list[Rec] = []
        offset = 0
        while True:
            body = self.call(
                "GET",
                f"/topics/{topic}/partitions/{partition}/records",
                200,
                params={"offset": offset, "encoding": encoding, "max_records": max_records},
            ).json()
            assert body["topic"] == topic and body["partition"] == partition, body
            assert len(body["records"]) <= max_records
            for r in body["records"]:
                out.append(decode_json_record(partition, r, forced_base64=encoding == "base64"))
            if body["next_offset"] >= body["high_watermark"]:
                return out
            assert body["records"] and body["next_offset"] > offset, f"no progress at offset {offset}: {body}"
            offset = body["next_offset"]

    def read_binary(self, topic: str, partition: int, *, max_records: int = 500) -> list[tuple[int, bytes]]:
        """(offset, value) of every record of a partition, read in the binary format."""
        out: list[tuple[int, bytes]] = []
        offset = 0
        while True:
            r = self.call(
                "GET",
                f"/topics/{topic}/partitions/{partition}/records",
                200,
                params={"offset": offset, "max_records": max_records},
                headers={"Accept": BATCH_TYPE},
            )
            assert r.headers["Content-Type"].startswith(BATCH_TYPE), r.headers
            values = unpack_batch(r.content)
            count = int(r.headers["Sluice-Record-Count"])
            next_offset = int(r.headers["Sluice-Next-Offset"])
            high_watermark = int(r.headers["Sluice-High-Watermark"])
            assert count == len(values)
            if count:
                first = int(r.headers["Sluice-First-Offset"])
                assert first >= offset
                # Offsets are consecutive within a partition written by these tests (no
                # transactions, no compaction), so the values sit at first, first+1, ...
                out.extend((first + i, v) for i, v in enumerate(values))
            else:
                assert "Sluice-First-Offset" not in r.headers
            if next_offset >= high_watermark:
                return out
            assert count and next_offset > offset, f"no progress at offset {offset}"
            offset = next_offset

    def read_all_json(self, topic: str, partitions: int, **kwargs) -> dict[tuple[int, int], Rec]:
        return {(r.partition, r.offset): r for p in range(partitions) for r in self.read_json(topic, p, **kwargs)}


def decode_json_record(partition: int, r: dict, forced_base64: bool = False) -> Rec:
    """A record of a JSON read as bytes. `encoding` says how all its fields are given."""
    enc = r["encoding"]
    if forced_base64:
        assert enc == "base64", r

    def conv(s):
        if s is None:
            return None
        return base64.b64decode(s, validate=True) if enc == "base64" else s.encode("utf-8")

    rec = Rec(
        partition=partition,
        offset=r["offset"],
        key=conv(r["key"]),
        value=conv(r["value"]),
        headers=tuple((h["key"], conv(h["value"])) for h in r["headers"]),
        timestamp_ms=r["timestamp"],
    )
    if not forced_base64:
        # auto: utf8 exactly when every field is valid UTF-8.
        all_utf8 = all(is_utf8(x) for x in (rec.key, rec.value, *(v for _, v in rec.headers)))
        assert enc == ("utf8" if all_utf8 else "base64"), f"offset {rec.offset}: encoding {enc}: {r}"
    return rec


def compare(expected: dict[tuple[int, int], Rec], got: dict[tuple[int, int], Rec], who: str):
    missing = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected))
    assert not missing, f"{who}: {len(missing)} records missing, e.g. at (partition, offset) {missing[:5]}"
    assert not extra, f"{who}: {len(extra)} records not produced, e.g. at {extra[:5]}"
    wrong = [(at, expected[at], got[at]) for at in sorted(expected) if expected[at] != got[at]]
    assert not wrong, f"{who}: {len(wrong)} records differ, e.g.\n  produced {wrong[0][1]}\n  read     {wrong[0][2]}"


def confluent_read_all(bootstrap: str, topic: str, partitions: int) -> dict[tuple[int, int], Rec]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": f"compat-http-confluent-reader-{uuid.uuid4().hex[:8]}",
            "group.id": f"compat-unused-{topic}",  # librdkafka needs one; assign() never joins
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        got: dict[tuple[int, int], Rec] = {}
        at_end: set[int] = set()
        deadline = time.monotonic() + READ_TIMEOUT_S
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"confluent-kafka read {len(got)} records in {READ_TIMEOUT_S} s; at the end of {sorted(at_end)} only"
            for m in c.consume(num_messages=500, timeout=0.5):
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        at_end.add(m.partition())
                        continue
                    raise AssertionError(f"consumer error: {m.error()}")
                at_end.discard(m.partition())
                got[(m.partition(), m.offset())] = Rec(
                    m.partition(), m.offset(), m.key(), m.value(), tuple(m.headers() or ()), m.timestamp()[1]
                )
        return got
    finally:
        c.close()


def kafka_python_read_all(bootstrap: str, topic: str, partitions: int) -> dict[tuple[int, int], Rec]:
    c = KafkaConsumer(
        bootstrap_servers=bootstrap,
        client_id=f"compat-http-kafka-python-reader-{uuid.uuid4().hex[:8]}",
        group_id=None,
        enable_auto_commit=False,
        request_timeout_ms=30000,
    )
    try:
        tps = [KTopicPartition(topic, p) for p in range(partitions)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        end = c.end_offsets(tps)
        got: dict[tuple[int, int], Rec] = {}
        deadline = time.monotonic() + READ_TIMEOUT_S
        while any(c.position(tp) < end[tp] for tp in tps):
            assert time.monotonic() < deadline, f"kafka-python read {len(got)} records in {READ_TIMEOUT_S} s"
            for tp, msgs in c.poll(timeout_ms=500).items():
                for m in msgs:
                    got[(m.partition, m.offset)] = Rec(m.partition, m.offset, m.key, m.value, tuple(m.headers or ()), m.timestamp)
        return got
    finally:
        c.close()


def confluent_producer(bootstrap: str, **extra) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": f"compat-http-confluent-producer-{uuid.uuid4().hex[:8]}",
            "acks": "all",
            # librdkafka's default partitioner is consistent_random (CRC32 of the key); the
            # Java client's, and the HTTP API's, is murmur2.
            "partitioner": "murmur2_random",
            **extra,
        }
    )


def confluent_produce(p: Producer, topic: str, records: list[dict]) -> list[tuple[int, int]]:
    """Produce with confluent-kafka; (partition, offset) of each record in order."""
    where: list[tuple[int, int] | None] = [None] * len(records)
    errors: list[str] = []

    def report(i):
        def cb(err, msg):
            if err is not None:
                errors.append(f"record {i}: {err}")
            else:
                where[i] = (msg.partition(), msg.offset())

        return cb

    for i, r in enumerate(records):
        kwargs = {k: r[k] for k in ("key", "value", "headers", "timestamp", "partition") if r.get(k) is not None}
        if "value" in r and r["value"] is None:
            kwargs["value"] = None
        p.produce(topic, on_delivery=report(i), **kwargs)
        p.poll(0)
    assert p.flush(30) == 0, "confluent-kafka: records still undelivered after 30 s"
    assert not errors, errors[:3]
    return where  # type: ignore[return-value]


def kafka_python_producer(bootstrap: str, **extra) -> KafkaProducer:
    return KafkaProducer(
        bootstrap_servers=bootstrap,
        client_id=f"compat-http-kafka-python-producer-{uuid.uuid4().hex[:8]}",
        acks="all",
        request_timeout_ms=30000,
        **extra,
    )


def kafka_python_produce(p: KafkaProducer, topic: str, records: list[dict]) -> list[tuple[int, int]]:
    futures = [
        p.send(
            topic,
            key=r.get("key"),
            value=r.get("value"),
            headers=list(r.get("headers") or []),
            timestamp_ms=r.get("timestamp"),
            partition=r.get("partition"),
        )
        for r in records
    ]
    p.flush(30)
    return [(md.partition, md.offset) for md in (f.get(timeout=30) for f in futures)]


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def spec() -> dict:
    return yaml.safe_load(SPEC_PATH.read_text())


@pytest.fixture(scope="module")
def http(http_url, spec) -> Http:
    return Http(http_url, spec)


@pytest.fixture
def topics(http):
    """Names of the topics a test creates; deleted over HTTP afterwards."""
    made: list[str] = []
    yield made
    for t in made:
        try:
            http.session.delete(f"{http.base}/topics/{t}", timeout=HTTP_TIMEOUT_S)
        except requests.RequestException:
            pass


@pytest.fixture(scope="module")
def cluster_http(broker, spec) -> dict[str, Http]:
    """--storage cluster: every broker's HTTP API by its Kafka address ("127.0.0.1:PORT");
    otherwise empty."""
    if not cluster_mode() or not hasattr(broker, "brokers"):
        return {}
    return {b.bootstrap: Http(b.http_url, spec) for b in broker.brokers}


@pytest.fixture
def group_http(http, cluster_http, bootstrap):
    """The HTTP API to use for a group's routes: the broker's own; in cluster mode that of the
    broker FindCoordinator names for the group (its coordinator, or for a new group the broker
    that will take it): there the group routes of any other broker answer 503 ("the group
    coordinator refused the request: NotCoordinator (Kafka error code 16)")."""

    def for_group(group: str) -> Http:
        if not cluster_http:
            return http
        return cluster_http[find_coordinator(bootstrap, group)]

    return for_group


def group_name(http: Http, group_http) -> str:
    """A new group's name; in cluster mode one whose coordinator is the broker `http` is (so
    that broker's /metrics shows the group)."""
    for _ in range(100):
        group = f"compat-http-{uuid.uuid4().hex[:8]}"
        if group_http(group) is http:
            return group
    raise AssertionError(f"no group name among 100 is coordinated by {http.base}")


def new_topic(http: Http, topics: list[str], partitions: int, cluster_http: dict[str, Http] | None = None) -> str:
    name = topic_name("http")
    http.create_topic(name, partitions)
    topics.append(name)
    if cluster_http:
        # Cluster mode: every broker knows the topic before Kafka clients use it (a broker
        # learns of a topic created through another within its catalog refresh, 1 s; until
        # then ListOffsets through it answers UNKNOWN_TOPIC_OR_PARTITION; see compat/README.md).
        for other in cluster_http.values():
            wait_until(
                lambda: other.session.get(f"{other.base}/topics/{name}", timeout=HTTP_TIMEOUT_S).status_code == 200,
                10,
                f"{name} known to the broker at {other.base}",
            )
    return name


# --------------------------------------------------------------------------- the specification


def test_openapi_spec_is_valid_and_complete(spec):
    validate_spec(spec)
    router = ROUTER_PATH.read_text()
    routes = set(re.findall(r'\.route\(\s*"([^"]+)"', router))
    assert routes, f"no routes found in {ROUTER_PATH}"
    documented = set(spec["paths"])
    assert routes == documented, f"routes not documented: {sorted(routes - documented)}; documented but not served: {sorted(documented - routes)}"
    # Every route but the health checks needs a key when keys are configured.
    for path, item in spec["paths"].items():
        for method, op in item.items():
            if method == "parameters":
                continue
            if path in ("/healthz", "/readyz"):
                assert op.get("security") == [], f"{method} {path} must need no key"
            else:
                assert "security" not in op, f"{method} {path} must use the global bearer scheme"


# --------------------------------------------------------------------------- every route


def test_operational_routes(http):
    assert http.call("GET", "/healthz", 200).json() == {"status": "ok"}
    assert http.call("GET", "/readyz", 200).json() == {"status": "ready"}
    r = http.call("GET", "/metrics", 200)
    assert r.headers["Content-Type"].startswith("text/plain"), r.headers
    assert "sluice_topics" in r.text
    # No route, and a route without the method: JSON errors too (not operations of the spec).
    http.error("GET", "/no/such/route", 404, "/no/such/route", validate=False)
    http.error("PUT", "/topics", 405, "PUT", validate=False)


def test_topic_routes(http, topics):
    name = topic_name("http")
    topics.append(name)
    body = http.call(
        "POST", "/topics", 201, json={"name": name, "partitions": 2, "configs": {"retention.ms": 3600000, "segment.bytes": "1048576"}}
    ).json()
    assert body["name"] == name
    assert [p["partition"] for p in body["partitions"]] == [0, 1]
    assert all(p["log_start_offset"] == 0 and p["high_watermark"] == 0 for p in body["partitions"])
    assert body["configs"]["retention.ms"] == "3600000"
    assert body["configs"]["segment.bytes"] == "1048576"
    assert set(body["configs"]) >= {"cleanup.policy", "max.message.bytes", "retention.bytes", "retention.ms", "segment.bytes", "segment.ms"}

    assert http.call("GET", f"/topics/{name}", 200).json() == body
    listed = http.call("GET", "/topics", 200).json()["topics"]
    assert {"name": name, "partitions": 2} in listed
    assert [t["name"] for t in listed] == sorted(t["name"] for t in listed)

    http.error("POST", "/topics", 409, "already exists", json={"name": name})
    raw = {"headers": {"Content-Type": "application/json"}}
    http.error("POST", "/topics", 400, "invalid JSON", data=b"{", **raw)
    http.error("POST", "/topics", 400, "empty", data=b"", **raw)
    http.error("POST", "/topics", 400, "partitons", json={"name": "x", "partitons": 2})
    http.error("POST", "/topics", 400, "invalid topic name", json={"name": "no spaces"})
    http.error("POST", "/topics", 400, "partitions must be between", json={"name": "x", "partitions": 0})
    http.error("POST", "/topics", 400, "flush.ms", json={"name": "x", "configs": {"flush.ms": 1}})
    http.error("POST", "/topics", 400, "retention.ms", json={"name": "x", "configs": {"retention.ms": "soon"}})
    http.error("POST", "/topics", 400, "string or a number", json={"name": "x", "configs": {"retention.ms": True}})
    assert "x" not in [t["name"] for t in http.call("GET", "/topics", 200).json()["topics"]]

    http.error("GET", "/topics/compat-http-none", 404, "unknown topic")
    http.error("GET", "/topics/a%20b", 400, "invalid topic name")
    assert http.call("DELETE", f"/topics/{name}", 204).content == b""
    # (cluster mode words it "topic '...' does not exist": the catalog's own message)
    http.error("DELETE", f"/topics/{name}", 404, "does not exist" if cluster_mode() else "unknown topic")
    http.error("GET", f"/topics/{name}", 404, "unknown topic")


def test_group_offset_routes(http, topics, bootstrap, cluster_http, group_http):
    topic = new_topic(http, topics, 2, cluster_http)
    # Records to have a lag against (through a Kafka producer: this test is about offsets).
    p = confluent_producer(bootstrap)
    confluent_produce(p, topic, [{"value": b"x", "partition": i % 2} for i in range(10)])
    group = f"compat-http-{uuid.uuid4().hex[:8]}"
    path = f"/groups/{group}/offsets"
    http = group_http(group)
    if not cluster_mode():
        # (Cluster mode: a group that no broker holds yet answers 503 NotCoordinator here on
        # every broker, the one FindCoordinator names included; see compat/README.md.)
        assert http.call("GET", path, 200).json() == {"group": group, "offsets": []}
    body = http.call(
        "POST", path, 200, json={"offsets": [{"topic": topic, "partition": 0, "offset": 2, "metadata": "m"}, {"topic": topic, "partition": 1, "offset": 5}]}
    ).json()
    assert body == {"group": group, "committed": 2}
    want = [
        {"topic": topic, "partition": 0, "offset": 2, "metadata": "m", "high_watermark": 5, "lag": 3},
        {"topic": topic, "partition": 1, "offset": 5, "metadata": "", "high_watermark": 5, "lag": 0},
    ]
    assert http.call("GET", path, 200).json() == {"group": group, "offsets": want}
    assert http.call("GET", path, 200, params={"topic": topic}).json() == {"group": group, "offsets": want}

    raw = {"headers": {"Content-Type": "application/json"}}
    http.error("POST", path, 400, "invalid JSON", data=b"[", **raw)
    http.error("POST", path, 400, "offsets is empty", json={"offsets": []})
    http.error("POST", path, 400, "ofsets", json={"ofsets": []})
    http.error("POST", path, 400, "at least 0", json={"offsets": [{"topic": topic, "partition": 0, "offset": -1}]})
    http.error("POST", path, 404, "no partition 2", json={"offsets": [{"topic": topic, "partition": 2, "offset": 1}]})
    http.error("POST", path, 404, "unknown topic", json={"offsets": [{"topic": "compat-http-none", "partition": 0, "offset": 1}]})
    http.error("GET", path, 404, "unknown topic", params={"topic": "compat-http-none"})
    http.error("GET", path, 400, "topc", params={"topc": topic})
    assert http.call("GET", path, 200).json()["offsets"] == want  # nothing changed


def test_produce_and_read_routes(http, topics):
    topic = new_topic(http, topics, 3)
    records_path = f"/topics/{topic}/records"
    read_path = f"/topics/{topic}/partitions/0/records"

    one = http.produce(topic, {"key": "k", "value": "v", "partition": 0})
    assert one["partitions"] == [{"partition": 0, "base_offset": 0, "count": 1}]
    assert one["offsets"] == [{"partition": 0, "offset": 0}]
    many = http.produce(topic, [{"value": "a", "partition": 0}, {"value": {"b": 1}, "partition": 0}, {"value": None, "partition": 1}])
    assert sorted(many["partitions"], key=lambda p: p["partition"]) == [
        {"partition": 0, "base_offset": 1, "count": 2},
        {"partition": 1, "base_offset": 0, "count": 1},
    ]
    assert many["offsets"] == [{"partition": 0, "offset": 1}, {"partition": 0, "offset": 2}, {"partition": 1, "offset": 0}]
    binary = http.call("POST", records_path, 200, params={"partition": 2}, data=pack_batch([b"x", b"yy"]), headers={"Content-Type": BATCH_TYPE}).json()
    assert binary == {"partitions": [{"partition": 2, "base_offset": 0, "count": 2}]}

    raw = {"headers": {"Content-Type": "application/json"}}
    http.error("POST", records_path, 400, "no records", json=[])
    http.error("POST", records_path, 400, "invalid JSON", data=b"{", **raw)
    http.error("POST", records_path, 400, "base64", json={"value": "not base64!", "encoding": "base64"})
    http.error("POST", records_path, 404, "partition", json={"value": "v", "partition": 3})
    http.error("POST", "/topics/compat-http-none/records", 404, "compat-http-none", json={"value": "v"})
    http.error("POST", "/topics/a%20b/records", 400, "invalid topic name", json={"value": "v"})
    batch = {"headers": {"Content-Type": BATCH_TYPE}}
    http.error("POST", records_path, 400, "", data=struct.pack(">I", 0), **batch)
    http.error("POST", records_path, 400, "", data=pack_batch([b"abc"])[:-1], **batch)
    http.error("POST", records_path, 400, "", data=pack_batch([b"abc"]) + b"!", **batch)
    http.error("POST", records_path, 400, "", data=struct.pack(">II", 2, 1) + b"a", **batch)
    http.error("POST", records_path, 404, "partition", params={"partition": 9}, data=pack_batch([b"a"]), **batch)

    body = http.call("GET", read_path, 200, params={"offset": 0}).json()
    assert [r["value"] for r in body["records"]] == ["v", "a", '{"b":1}']
    assert body["records"][0]["key"] == "k" and body["records"][1]["key"] is None
    assert (body["next_offset"], body["high_watermark"], body["log_start_offset"]) == (3, 3, 0)
    assert http.call("GET", f"/topics/{topic}/partitions/1/records", 200, params={"offset": 0}).json()["records"][0]["value"] is None
    r = http.call("GET", f"/topics/{topic}/partitions/2/records", 200, params={"offset": 0}, headers={"Accept": BATCH_TYPE})
    assert unpack_batch(r.content) == [b"x", b"yy"]
    assert (r.headers["Sluice-First-Offset"], r.headers["Sluice-Next-Offset"], r.headers["Sluice-High-Watermark"], r.headers["Sluice-Record-Count"]) == ("0", "2", "2", "2")
    page = http.call("GET", read_path, 200, params={"offset": 1, "max_records": 1}).json()
    assert [r["offset"] for r in page["records"]] == [1] and page["next_offset"] == 2

    r = http.call("GET", read_path, 416, params={"offset": 4})
    assert (r.json()["log_start_offset"], r.json()["high_watermark"]) == (0, 3)
    http.error("GET", read_path, 400, "offset", params={})
    http.error("GET", read_path, 400, "offset", params={"offset": "x"})
    http.error("GET", read_path, 400, "offset", params={"offset": -1})
    http.error("GET", read_path, 400, "max_records", params={"offset": 0, "max_records": 0})
    http.error("GET", read_path, 400, "max_bytes", params={"offset": 0, "max_bytes": "lots"})
    http.error("GET", read_path, 400, "timeout_ms", params={"offset": 0, "timeout_ms": 10**9})
    http.error("GET", read_path, 400, "encoding", params={"offset": 0, "encoding": "latin1"})
    http.error("GET", f"/topics/{topic}/partitions/3/records", 404, "partition", params={"offset": 0})
    http.error("GET", "/topics/compat-http-none/partitions/0/records", 404, "compat-http-none", params={"offset": 0})

    # Long poll: at the high watermark, an empty answer after the timeout...
    started = time.monotonic()
    body = http.call("GET", read_path, 200, params={"offset": 3, "timeout_ms": 300}).json()
    assert body["records"] == [] and body["next_offset"] == 3
    assert time.monotonic() - started >= 0.25
    # ...or the records as soon as they are produced.
    got: dict = {}

    def poll():
        got["body"] = http.session.get(f"{http.base}{read_path}", params={"offset": 3, "timeout_ms": 20000}, timeout=HTTP_TIMEOUT_S).json()

    t = threading.Thread(target=poll)
    started = time.monotonic()
    t.start()
    time.sleep(0.5)
    http.produce(topic, {"value": "late", "partition": 0})
    t.join(HTTP_TIMEOUT_S)
    assert [r["value"] for r in got["body"]["records"]] == ["late"]
    assert time.monotonic() - started < 10, "the long poll did not end when a record arrived"


# --------------------------------------------------------------------------- interop


def http_json_records(base_ts: int) -> list[dict]:
    """JSON records with every feature: UTF-8 and base64 fields, JSON values, null values and
    null header values, headers as a list (repeated names) and as an object, explicit
    partitions and timestamps, keyless records."""
    out = []
    for i in range(60):
        r: dict = {"key": f"user-{i % 12}", "value": f"event {i} ✓", "timestamp": base_ts + i}
        kind = i % 10
        if kind == 1:
            r["headers"] = [{"key": "seq", "value": str(i)}, {"key": "dup", "value": "first"}, {"key": "dup", "value": "second"}, {"key": "nil", "value": None}]
        elif kind == 2:
            r["headers"] = {"seq": str(i), "source": "web"}
        elif kind == 3:
            r["value"] = {"a": i, "b": [True, None, "x"]}
        elif kind == 4:
            r["value"] = i * 1000
        elif kind == 5:
            r.update(encoding="base64", key=b64(bytes([i, 0, 255])), value=b64(bytes(range(256))[i:]), headers=[{"key": "bin", "value": b64(b"\xff\xfe")}])
        elif kind == 6:
            r["value"] = None
        elif kind == 7:
            del r["key"]
        elif kind == 8:
            r["partition"] = 1  # explicit, wins over the key
        elif kind == 9:
            del r["timestamp"]
        out.append(r)
    return out


def expected_from_json(r: dict, partition: int, offset: int, ts_window: tuple[int, int]) -> Rec:
    enc = r.get("encoding", "utf8")

    def field(s):
        if s is None:
            return None
        return base64.b64decode(s) if enc == "base64" else s.encode()

    v = r.get("value")
    if v is None:
        value = None
    elif isinstance(v, str):
        value = field(v)
    else:
        value = json.dumps(v, separators=(",", ":"), ensure_ascii=False).encode()
    h = r.get("headers") or []
    if isinstance(h, dict):
        headers = tuple((k, field(x)) for k, x in h.items())
    else:
        headers = tuple((x["key"], field(x["value"])) for x in h)
    ts = r.get("timestamp")
    return Rec(partition, offset, field(r.get("key")), value, headers, ts if ts is not None else ts_window)  # type: ignore[arg-type]


def settle_timestamps(expected: dict, got: dict) -> dict:
    """Records produced without a timestamp get the time of the request: check it is within
    the request's window, then take the one read so the rest compares exactly."""
    out = dict(expected)
    for at, e in expected.items():
        if isinstance(e.timestamp_ms, tuple) and at in got:
            lo, hi = e.timestamp_ms
            assert lo <= got[at].timestamp_ms <= hi, f"{at}: timestamp {got[at].timestamp_ms} outside [{lo}, {hi}]"
            out[at] = Rec(e.partition, e.offset, e.key, e.value, e.headers, got[at].timestamp_ms)
    return out


def test_http_records_read_by_kafka_clients(http, topics, bootstrap, cluster_http):
    partitions = 3
    topic = new_topic(http, topics, partitions, cluster_http)
    base_ts = now_ms() - 60_000
    records = http_json_records(base_ts)
    before = now_ms()
    answer = http.produce(topic, records)
    after = now_ms()
    assert len(answer["offsets"]) == len(records)
    expected = {}
    for r, at in zip(records, answer["offsets"]):
        rec = expected_from_json(r, at["partition"], at["offset"], (before, after))
        expected[(rec.partition, rec.offset)] = rec
    assert all(at["partition"] == 1 for r, at in zip(records, answer["offsets"]) if "partition" in r)
    keyless = {at["partition"] for r, at in zip(records, answer["offsets"]) if "key" not in r}
    assert len(keyless) == 1, f"the keyless records of one request went to partitions {keyless}"
    # Records of one partition are appended in request order, as one batch.
    for p in answer["partitions"]:
        offs = [at["offset"] for at in answer["offsets"] if at["partition"] == p["partition"]]
        assert offs == list(range(p["base_offset"], p["base_offset"] + p["count"]))

    # The binary format: keys null, no headers, timestamp of the request.
    values = [f"binary {i}".encode() + bytes([i]) for i in range(1, 41)]
    before = now_ms()
    binary = http.call("POST", f"/topics/{topic}/records", 200, params={"partition": 2}, data=pack_batch(values), headers={"Content-Type": BATCH_TYPE}).json()
    after = now_ms()
    [written] = binary["partitions"]
    assert written["partition"] == 2 and written["count"] == len(values)
    for i, v in enumerate(values):
        expected[(2, written["base_offset"] + i)] = Rec(2, written["base_offset"] + i, None, v, (), (before, after))  # type: ignore[arg-type]

    for who, read in (("confluent-kafka", confluent_read_all), ("kafka-python", kafka_python_read_all)):
        got = read(bootstrap, topic, partitions)
        compare(settle_timestamps(expected, got), got, who)
    # And the HTTP API reads them back the same way.
    got = http.read_all_json(topic, partitions, max_records=7)
    compare(settle_timestamps(expected, got), got, "HTTP JSON")


def kafka_records(base_ts: int, n: int) -> list[dict]:
    """Records for Kafka producers: text and binary keys and values, null values, headers
    with repeated names and null values."""
    out = []
    for i in range(n):
        r: dict = {"key": f"key-{i % 9}".encode(), "value": f"value {i} ü".encode(), "timestamp": base_ts + i}
        if i % 5 == 1:
            r["value"] = bytes(range(256))[i % 200 :]  # not UTF-8
        if i % 7 == 2:
            r["key"] = bytes([0xC3, i % 256])  # not UTF-8 (mostly)
        if i % 11 == 3:
            r["value"] = None
        if i % 4 == 0:
            r["headers"] = [("seq", str(i).encode()), ("dup", b"first"), ("dup", b"second"), ("empty", b"")]
        if i % 13 == 5:
            r["key"] = None
            r["partition"] = 0
            if r["value"] is None:
                r["value"] = b""  # kafka-python refuses a record with neither key nor value
        out.append(r)
    return out


@pytest.mark.parametrize("client", ["confluent-kafka-lz4", "kafka-python"])
def test_kafka_records_read_over_http(http, topics, bootstrap, client, cluster_http):
    partitions = 3
    topic = new_topic(http, topics, partitions, cluster_http)
    records = kafka_records(now_ms() - 60_000, 400)
    if client == "confluent-kafka-lz4":
        # Several records per batch, compressed: the HTTP read decompresses them.
        p = confluent_producer(bootstrap, **{"compression.type": "lz4", "linger.ms": 50})
        where = confluent_produce(p, topic, records)
    else:
        kp = kafka_python_producer(bootstrap)
        try:
            where = kafka_python_produce(kp, topic, records)
        finally:
            kp.close()
    expected = {
        at: Rec(at[0], at[1], r.get("key"), r.get("value"), tuple(r.get("headers") or ()), r["timestamp"]) for r, at in zip(records, where)
    }
    assert len(expected) == len(records)
    compare(expected, http.read_all_json(topic, partitions), f"HTTP JSON (auto) after {client}")
    compare(expected, http.read_all_json(topic, partitions, encoding="base64", max_records=33), f"HTTP JSON (base64) after {client}")
    got = {(p, off): v for p in range(partitions) for off, v in http.read_binary(topic, p, max_records=50)}
    want = {at: (r.value or b"") for at, r in expected.items()}  # a null value has size 0
    assert got == want, f"HTTP binary after {client}: {len(set(got) ^ set(want))} offsets differ"


def test_keyed_records_land_where_kafka_clients_put_them(http, topics, bootstrap, cluster_http):
    partitions = 7
    topic = new_topic(http, topics, partitions, cluster_http)
    keys = [f"customer-{i}".encode() for i in range(120)] + ["ключ-ü-✓".encode(), b"\x00\xff\x10binary"]
    records = []
    for k in keys:
        if is_utf8(k):
            records.append({"key": k.decode(), "value": "v"})
        else:
            records.append({"key": b64(k), "value": b64(b"v"), "encoding": "base64"})
    by_http = [at["partition"] for at in http.produce(topic, records)["offsets"]]
    assert len(set(by_http)) > 1, "every key on one partition: keys are not being hashed"
    kafka_records_ = [{"key": k, "value": b"v"} for k in keys]
    by_confluent = [p for p, _ in confluent_produce(confluent_producer(bootstrap), topic, kafka_records_)]
    kp = kafka_python_producer(bootstrap)
    try:
        by_kafka_python = [p for p, _ in kafka_python_produce(kp, topic, kafka_records_)]
    finally:
        kp.close()
    for who, theirs in (("confluent-kafka (murmur2_random)", by_confluent), ("kafka-python", by_kafka_python)):
        differ = [(k, h, t) for k, h, t in zip(keys, by_http, theirs) if h != t]
        assert not differ, f"{len(differ)} keys on other partitions than {who} puts them, e.g. (key, HTTP, {who}) {differ[:3]}"


def produce_some(bootstrap: str, topic: str, per_partition: dict[int, int]):
    p = confluent_producer(bootstrap)
    confluent_produce(p, topic, [{"value": b"x", "partition": part} for part, n in per_partition.items() for _ in range(n)])


def test_offsets_committed_over_http_seen_by_kafka_clients(http, topics, bootstrap, cluster_http, group_http):
    topic = new_topic(http, topics, 3, cluster_http)
    produce_some(bootstrap, topic, {0: 10, 1: 10, 2: 10})
    group = f"compat-http-{uuid.uuid4().hex[:8]}"
    commits = {0: 3, 1: 10, 2: 0}
    body = {"offsets": [{"topic": topic, "partition": p, "offset": o, "metadata": f"m{p}"} for p, o in commits.items()]}
    group_http(group).call("POST", f"/groups/{group}/offsets", 200, json=body)

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False, "client.id": f"compat-http-committed-{group}"})
    try:
        committed = c.committed([TopicPartition(topic, p) for p in commits], timeout=20)
        assert {tp.partition: tp.offset for tp in committed} == commits
        # (Not tp.metadata: confluent-kafka 2.16 reads metadata another client committed past
        # its end, on Apache Kafka too; kafka-python checks it below.)
    finally:
        c.close()
    kc = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False, client_id=f"compat-http-committed-kp-{group}")
    try:
        for p, o in commits.items():
            got = kc.committed(KTopicPartition(topic, p), metadata=True)
            assert (got.offset, got.metadata) == (o, f"m{p}"), f"kafka-python committed() of partition {p}"
    finally:
        kc.close()


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python"])
def test_offsets_committed_by_kafka_clients_seen_over_http(http, topics, bootstrap, client, cluster_http, group_http):
    topic = new_topic(http, topics, 3, cluster_http)
    produce_some(bootstrap, topic, {0: 8, 1: 5, 2: 2})
    group = f"compat-http-{uuid.uuid4().hex[:8]}"
    commits = {0: 6, 1: 5, 2: 1}
    if client == "confluent-kafka":
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False, "client.id": f"compat-http-commit-{group}"})
        try:
            c.commit(offsets=[TopicPartition(topic, p, o) for p, o in commits.items()], asynchronous=False)
        finally:
            c.close()
    else:
        kc = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False, client_id=f"compat-http-commit-kp-{group}")
        try:
            kc.assign([KTopicPartition(topic, p) for p in commits])
            kc.commit({KTopicPartition(topic, p): OffsetAndMetadata(o, "", -1) for p, o in commits.items()})
        finally:
            kc.close()
    body = group_http(group).call("GET", f"/groups/{group}/offsets", 200, params={"topic": topic}).json()
    high = {0: 8, 1: 5, 2: 2}
    assert body == {
        "group": group,
        "offsets": [
            {"topic": topic, "partition": p, "offset": o, "metadata": "", "high_watermark": high[p], "lag": high[p] - o}
            for p, o in commits.items()
        ],
    }


def test_commit_over_http_refused_while_kafka_consumer_is_a_member(http, topics, bootstrap, cluster_http, group_http):
    topic = new_topic(http, topics, 2, cluster_http)
    group = f"compat-http-{uuid.uuid4().hex[:8]}"
    path = f"/groups/{group}/offsets"
    commit = {"offsets": [{"topic": topic, "partition": 0, "offset": 0}]}
    kc = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        client_id=f"compat-http-member-{group}",
        session_timeout_ms=10000,
        heartbeat_interval_ms=1000,
        metadata_max_age_ms=1000,
    )
    try:
        # Subscribe only once this client's metadata has the topic's partitions: a group
        # leader that assigns from metadata without them hands out nothing and, when its next
        # metadata snapshot already matched, never rejoins (seen once in object mode).
        wait_until(lambda: kc.partitions_for_topic(topic), 20, f"{topic}'s partitions in the consumer's metadata")
        kc.subscribe([topic])
        wait_until(lambda: kc.poll(timeout_ms=200) is not None and kc.assignment(), 30, "the consumer to join the group and get partitions")
        http = group_http(group)
        http.error("POST", path, 409, "active members", json=commit)
        # Reading the group's offsets is fine while it has members.
        http.call("GET", path, 200)
    finally:
        kc.close()  # leaves the group (LeaveGroup)

    def accepted():
        r = http.session.post(f"{http.base}{path}", json=commit, timeout=HTTP_TIMEOUT_S)
        assert r.status_code in (200, 409), r.text
        return r.status_code == 200

    wait_until(accepted, 20, "the commit to be accepted once the consumer left")


def test_metrics_name_every_documented_series(http, topics, bootstrap, cluster_http, group_http):
    # Traffic of every kind first: Kafka and HTTP produce and read, a group with a lag.
    topic = new_topic(http, topics, 1, cluster_http)
    produce_some(bootstrap, topic, {0: 3})
    http.produce(topic, {"value": "v"})
    http.read_json(topic, 0)
    confluent_read_all(bootstrap, topic, 1)
    # (cluster mode: a group coordinated by this broker, whose /metrics is read)
    group = group_name(cluster_http.get(bootstrap.split(",")[0], http), group_http)
    http.call("POST", f"/groups/{group}/offsets", 200, json={"offsets": [{"topic": topic, "partition": 0, "offset": 1}]})
    text = http.call("GET", "/metrics", 200).text
    names = [
        "sluice_kafka_requests_total",
        "sluice_kafka_request_duration_seconds",
        "sluice_http_requests_total",
        "sluice_http_request_duration_seconds",
        "sluice_bytes_in_total",
        "sluice_bytes_out_total",
        "sluice_records_in_total",
        "sluice_records_out_total",
        "sluice_fsync_duration_seconds",
        "sluice_fsyncs_total",
        "sluice_fsync_bytes_total",
        "sluice_topics",
        "sluice_partitions",
        "sluice_partition_high_watermark",
        "sluice_partition_log_start_offset",
        "sluice_partition_size_bytes",
        "sluice_consumer_group_lag",
        "sluice_consumer_groups",
    ]
    missing = [n for n in names if not re.search(rf"^{n}(_bucket|_sum|_count)?[{{ ]", text, re.M)]
    assert not missing, f"no samples of {missing} after producing, reading and committing"
