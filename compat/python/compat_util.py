"""Records the suite produces and the checks every client's read-back must pass.

Each client test produces N_RECORDS keyed records numbered by `seq`, reads the whole topic
back from the earliest offset without a consumer group, turns what it read into `Got`
values and calls `check_read_back`. Every record carries its `seq` in a header, so a record
read back can be matched with the one produced whatever partition it landed in.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field

N_RECORDS = 10_000
PARTITIONS = 3
N_KEYS = 50  # enough keys that every partition gets some
TOMBSTONE_EVERY = 1000  # every 1000th record has a null value (a tombstone)
READ_TIMEOUT_S = 60  # reading 10,000 records back must finish within this
DELETE_TIMEOUT_S = 30  # a deleted topic must disappear from metadata within this

CREATE_TIME = "CreateTime"


def topic_name(client: str) -> str:
    """A topic name no other test or run uses."""
    return f"compat-{client}-{uuid.uuid4().hex[:8]}"


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class Rec:
    """A record as produced."""

    seq: int
    key: bytes
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int | None  # None: the client stamps it when producing


@dataclass(frozen=True)
class Got:
    """A record as read back by a client."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp_ms: int
    timestamp_type: str | None = None  # CREATE_TIME, "LogAppendTime", or None if the client does not say


def make_records(
    client: str,
    base_ts_ms: int | None,
    n: int = N_RECORDS,
    binary_values: bool = True,
    tombstones: bool = True,
) -> list[Rec]:
    """n keyed records with headers (including a repeated and an empty one).

    base_ts_ms: record seq gets timestamp base_ts_ms + seq (unique, increasing); None leaves
    timestamps to the client. Values hold `client-seq-` and, if binary_values, 0-96 bytes of
    every byte value, so any mangling of non-UTF-8 data shows.
    """
    recs = []
    for seq in range(n):
        value: bytes | None = f"{client}-{seq:05d}-".encode()
        if binary_values:
            value += bytes((seq * 31 + j) % 256 for j in range(seq % 97))
        if tombstones and seq % TOMBSTONE_EVERY == TOMBSTONE_EVERY - 1:
            value = None
        headers = (
            ("seq", str(seq).encode()),
            ("client", client.encode()),
            ("dup", b"first"),
            ("dup", b"second"),
            ("empty", b""),
        )
        recs.append(
            Rec(
                seq=seq,
                key=f"key-{seq % N_KEYS:02d}".encode(),
                value=value,
                headers=headers,
                timestamp_ms=None if base_ts_ms is None else base_ts_ms + seq,
            )
        )
    return recs


def seq_from_header(g: Got) -> int | None:
    """The seq a record was produced with, from its `seq` header."""
    for name, value in g.headers:
        if name == "seq" and value is not None:
            try:
                return int(value)
            except ValueError:
                return None
    return None


def by_partition(got: list[Got]) -> dict[int, list[Got]]:
    parts: dict[int, list[Got]] = defaultdict(list)
    for g in got:
        parts[g.partition].append(g)
    for p in parts.values():
        p.sort(key=lambda g: g.offset)
    return dict(parts)


@dataclass
class Problems:
    """Collects mismatches; raises one AssertionError listing the first few of each kind."""

    items: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    def add(self, kind: str, detail: str):
        self.items[kind].append(detail)

    def raise_if_any(self, what: str):
        if not self.items:
            return
        lines = [f"{what}: {sum(len(v) for v in self.items.values())} problem(s)"]
        for kind, details in self.items.items():
            lines.append(f"- {kind}: {len(details)}, e.g. " + "; ".join(details[:3]))
        raise AssertionError("\n".join(lines))


def check_read_back(
    expected: list[Rec],
    got: list[Got],
    delivered: dict[int, tuple[int, int]] | None = None,
    ts_window: tuple[int, int] | None = None,
    partitions: int = PARTITIONS,
    seq_of=seq_from_header,
):
    """Everything produced came back exactly once, unchanged and in order.

    delivered: seq -> (partition, offset) the producer was told; each must match the read.
    ts_window: for records produced without an explicit timestamp, the (min, max) time in ms
    within which the client stamped them.
    seq_of: how to tell which produced record a read one is (default: its `seq` header).
    """
    p = Problems()
    if len(got) != len(expected):
        p.add("count", f"read {len(got)} records, produced {len(expected)}")

    parts = by_partition(got)
    if set(parts) - set(range(partitions)):
        p.add("partition", f"records in partitions {sorted(set(parts) - set(range(partitions)))}")
    if len(expected) >= 100 * partitions and len(parts) != partitions:
        p.add("partition", f"only partitions {sorted(parts)} got records")

    # Offsets in each partition are 0, 1, 2, ... and seq increases with them (produce order).
    for part, records in sorted(parts.items()):
        offsets = [g.offset for g in records]
        if offsets != list(range(len(records))):
            first_bad = next((i for i, o in enumerate(offsets) if o != i), len(offsets))
            p.add("offsets", f"partition {part}: offsets not 0..{len(records) - 1}, at index {first_bad}: {offsets[first_bad:first_bad + 3]}")
        seqs = [seq_of(g) for g in records]
        for a, b, g in zip(seqs, seqs[1:], records[1:]):
            if a is not None and b is not None and b <= a:
                p.add("order", f"partition {part} offset {g.offset}: seq {b} after seq {a}")

    key_partition: dict[bytes, set[int]] = defaultdict(set)
    seen: dict[int, Got] = {}
    for g in got:
        seq = seq_of(g)
        if seq is None or not 0 <= seq < len(expected):
            p.add("seq header", f"p{g.partition}@{g.offset}: headers {g.headers!r}")
            continue
        if seq in seen:
            p.add("duplicate", f"seq {seq} at p{seen[seq].partition}@{seen[seq].offset} and p{g.partition}@{g.offset}")
            continue
        seen[seq] = g
        want = expected[seq]
        where = f"seq {seq} (p{g.partition}@{g.offset})"
        key_partition[want.key].add(g.partition)
        if g.key != want.key:
            p.add("key", f"{where}: {g.key!r} != {want.key!r}")
        if g.value != want.value:
            shown = g.value if g.value is None else g.value[:40]
            p.add("value", f"{where}: {shown!r}... != {want.value if want.value is None else want.value[:40]!r}...")
        if tuple(g.headers) != want.headers:
            p.add("headers", f"{where}: {g.headers!r} != {want.headers!r}")
        if want.timestamp_ms is not None:
            if g.timestamp_ms != want.timestamp_ms:
                p.add("timestamp", f"{where}: {g.timestamp_ms} != {want.timestamp_ms}")
        elif ts_window is not None and not ts_window[0] <= g.timestamp_ms <= ts_window[1]:
            p.add("timestamp", f"{where}: {g.timestamp_ms} outside produce window {ts_window}")
        if g.timestamp_type not in (None, CREATE_TIME):
            p.add("timestamp type", f"{where}: {g.timestamp_type}")
        if delivered is not None and delivered.get(seq) != (g.partition, g.offset):
            p.add("delivery report", f"{where}: producer was told {delivered.get(seq)}")

    missing = [r.seq for r in expected if r.seq not in seen]
    if missing:
        p.add("missing", f"{len(missing)} records never read back, first seqs {missing[:5]}")
    for key, ps in key_partition.items():
        if len(ps) > 1:
            p.add("key partitioning", f"key {key!r} in partitions {sorted(ps)}")
    if delivered is not None and len(delivered) != len(expected):
        p.add("delivery report", f"{len(delivered)} delivery reports for {len(expected)} records")
    p.raise_if_any("read-back check")


def expected_offset_for_time(got: list[Got], partition: int, ts_ms: int) -> int | None:
    """The earliest offset in `partition` whose timestamp is >= ts_ms (None: there is none).

    Timestamps grow with offset in every partition here, which is the case in which
    ListOffsets by timestamp has this single right answer.
    """
    offsets = [g.offset for g in got if g.partition == partition and g.timestamp_ms >= ts_ms]
    return min(offsets) if offsets else None


def offset_lookups(got: list[Got]) -> list[tuple[str, int]]:
    """Timestamps to look offsets up by: before all records, exact hits, after all records.

    A timestamp of one partition's record falls between two records of the other partitions,
    so the exact hits also cover "between" for them.
    """
    stamps = sorted({g.timestamp_ms for g in got})
    lookups = [("before every record", stamps[0] - 1000), ("first record", stamps[0])]
    for pct in (25, 50, 90):
        lookups.append((f"timestamp at {pct}%", stamps[len(stamps) * pct // 100]))
    lookups.append(("last record", stamps[-1]))
    lookups.append(("after every record", stamps[-1] + 1000))
    return lookups


def wait_until(predicate, timeout_s: float, what: str, interval_s: float = 0.2):
    """Poll predicate() until it is truthy; fail with `what` after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)


class Steps:
    """Shared state of one client's ordered steps (create, produce, read, ...).

    A step that needs an earlier one which did not pass is skipped with the reason, so a
    summary shows the first real failure instead of a cascade of follow-on failures.
    """

    def __init__(self, topic: str):
        self.topic = topic
        self.passed: set[str] = set()
        self.data: dict = {}

    def require(self, *steps: str):
        import pytest

        missing = [s for s in steps if s not in self.passed]
        if missing:
            pytest.skip(f"needs earlier step(s) that did not pass: {', '.join(missing)}")

    def ok(self, step: str):
        self.passed.add(step)


def find_coordinator(bootstrap: str, group: str, timeout_s: float = 30) -> str:
    """"HOST:PORT" of the broker FindCoordinator names for `group` (asked through any broker of
    `bootstrap`, a comma-separated list; retried while there is no coordinator or the broker
    asked is down), with kafka-python's protocol classes."""
    from kafka.net.compat import KafkaNetClient
    from kafka.protocol.metadata import FindCoordinatorRequest

    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        client = KafkaNetClient(bootstrap_servers=bootstrap.split(","), client_id="compat-find-coordinator")
        try:
            client.check_version()
            resp = client.send_and_receive(
                client.least_loaded_node(bootstrap_fallback=True),
                FindCoordinatorRequest(key=group, key_type=0, max_version=3),
                timeout_ms=5000,
            )
            if resp.error_code == 0:
                return f"{resp.host}:{resp.port}"
            last = f"error code {resp.error_code}"
        except Exception as e:  # a broker down, a connection refused: ask again
            last = repr(e)
        finally:
            client.close()
        time.sleep(0.5)
    raise AssertionError(f"no coordinator for group {group} within {timeout_s} s: {last}")


def wait_known_everywhere(bootstrap: str, topic: str, partitions: int, timeout_s: float = 15):
    """Wait until Metadata through EACH broker of `bootstrap` (comma-separated) lists `topic`
    with `partitions` partitions. With one broker, a check that the topic is there; with a
    cluster (--storage cluster), every broker's catalog then has the topic, which a broker
    otherwise learns within its catalog refresh (1 s) of a creation through another broker:
    until then some requests through it (ListOffsets; a Produce whose reload is rate-limited)
    answer UNKNOWN_TOPIC_OR_PARTITION, which a non-idempotent producer's retries can turn into
    records out of order (see compat/README.md, cluster mode)."""
    from confluent_kafka.admin import AdminClient

    for addr in bootstrap.split(","):
        admin = AdminClient({"bootstrap.servers": addr, "client.id": "compat-topic-known"})
        wait_until(
            lambda: (t := admin.list_topics(topic, timeout=10).topics.get(topic)) is not None
            and t.error is None
            and len(t.partitions) == partitions,
            timeout_s,
            f"{topic} with {partitions} partitions in Metadata through {addr}",
        )
