"""kcat (Debian's package, with Debian's librdkafka): produce, consume, metadata, offset query.

kcat has no admin commands, so its topics are created and deleted with confluent-kafka's
AdminClient. Steps, in order, on one 3-partition topic: create -> metadata (-L) -> produce
10,000 keyed records from stdin with headers (-P -K: -H; librdkafka defaults: acks=all, no
idempotence; timestamps stamped by librdkafka) -> read all back (-C -o beginning -e, no group)
-> offsets by timestamp (-Q) -> consume from a timestamp (-o s@TS) -> delete. Then the same
broker path with every compression codec kcat offers (-z), which the broker must store and
serve as the producer sent them.

kcat takes one set of headers for a whole run, so records are told apart by the seq in their
value here rather than by a header.
"""

import json
import re
import shutil
import string
import subprocess

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from compat_util import (
    DELETE_TIMEOUT_S,
    N_RECORDS,
    PARTITIONS,
    READ_TIMEOUT_S,
    Got,
    Rec,
    Steps,
    check_read_back,
    expected_offset_for_time,
    now_ms,
    offset_lookups,
    topic_name,
    wait_known_everywhere,
    wait_until,
)

KCAT = shutil.which("kcat")
pytestmark = pytest.mark.skipif(KCAT is None, reason="kcat is not installed (compat/run.sh installs it)")

HEADERS = (("client", b"kcat"), ("dup", b"first"), ("dup", b"second"), ("empty", b""))
# Output format: partition, offset, timestamp, key length, key, value length, headers, value.
FORMAT = r"%p\t%o\t%T\t%K\t%k\t%S\t%h\t%s\n"
PADDING = string.ascii_letters + string.digits + "!#$%&()*+-./;<>?@[]^_{|}~ "
CODECS = ("gzip", "snappy", "lz4", "zstd")
RECORDS_PER_CODEC = 1000


def run_id(steps: Steps) -> str:
    return steps.topic.rsplit("-", 1)[1]


def kcat(bootstrap: str, client_id: str, *args: str, stdin: str | None = None, timeout: float = READ_TIMEOUT_S) -> str:
    """Run kcat against the broker; fail the test on a non-zero exit or an error message."""
    cmd = [KCAT, "-b", bootstrap, "-X", f"client.id={client_id}", *args]
    r = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(cmd)} exited {r.returncode}: {r.stderr[-2000:]}"
    assert "ERROR" not in r.stderr and "failed" not in r.stderr.lower(), f"{' '.join(cmd)}: {r.stderr[-2000:]}"
    return r.stdout


def kcat_records(first_seq: int, n: int) -> list[Rec]:
    recs = []
    for seq in range(first_seq, first_seq + n):
        pad = "".join(PADDING[(seq + j) % len(PADDING)] for j in range(seq % 97))
        recs.append(Rec(seq, f"key-{seq % 50:02d}".encode(), f"kcat-{seq:05d}-{pad}".encode(), HEADERS, None))
    return recs


def seq_from_value(g: Got) -> int | None:
    m = re.match(rb"kcat-(\d{5})-", g.value or b"")
    return int(m.group(1)) if m else None


def produce(bootstrap: str, steps: Steps, records: list[Rec], *extra: str) -> tuple[int, int]:
    """Produce records through one kcat run; returns the (min, max) time window in ms."""
    stdin = "".join(f"{r.key.decode()}:{r.value.decode()}\n" for r in records)
    headers = [arg for name, value in HEADERS for arg in ("-H", f"{name}={value.decode()}")]
    before = now_ms()
    kcat(bootstrap, f"compat-kcat-producer-{run_id(steps)}", "-P", "-t", steps.topic, "-K", ":", *headers, *extra, stdin=stdin)
    return before, now_ms()


def parse_headers(csv: str) -> tuple[tuple[str, bytes], ...]:
    if not csv:
        return ()
    return tuple((name, value.encode()) for name, _, value in (h.partition("=") for h in csv.split(",")))


def consume(bootstrap: str, steps: Steps, *offset_args: str) -> list[Got]:
    out = kcat(bootstrap, f"compat-kcat-consumer-{run_id(steps)}", "-C", "-t", steps.topic, *offset_args, "-e", "-q", "-f", FORMAT)
    got = []
    for line in out.splitlines():
        p, o, ts, klen, key, vlen, headers, value = line.split("\t", 7)
        assert int(klen) == len(key.encode()) and int(vlen) == len(value.encode()), f"lengths in {line!r}"
        got.append(Got(int(p), int(o), key.encode(), value.encode(), parse_headers(headers), int(ts)))
    return got


def create_topic(admin: AdminClient, topic: str, bootstrap: str):
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)], operation_timeout=30)[topic].result(timeout=30)
    # kcat produces without idempotence: with a cluster, every broker must know the topic first
    # (see wait_known_everywhere).
    wait_known_everywhere(bootstrap, topic, PARTITIONS)


def delete_topic(admin: AdminClient, topic: str):
    admin.delete_topics([topic], operation_timeout=30)[topic].result(timeout=30)
    wait_until(lambda: topic not in admin.list_topics(timeout=10).topics, DELETE_TIMEOUT_S, f"{topic} to leave metadata")


@pytest.fixture(scope="module")
def steps():
    return Steps(topic_name("kcat"))


@pytest.fixture(scope="module")
def admin(bootstrap, steps):
    return AdminClient({"bootstrap.servers": bootstrap, "client.id": f"compat-kcat-admin-{run_id(steps)}"})


def test_create_topic_with_confluent_admin(bootstrap, admin, steps):
    create_topic(admin, steps.topic, bootstrap)
    steps.ok("create")


def test_metadata(bootstrap, steps):
    steps.require("create")

    def partitions():
        md = json.loads(kcat(bootstrap, f"compat-kcat-metadata-{run_id(steps)}", "-L", "-J", "-t", steps.topic))
        topics = [t for t in md["topics"] if t["topic"] == steps.topic and "error" not in t]
        return topics and len(topics[0]["partitions"]) == PARTITIONS and all(p["leader"] >= 0 for p in topics[0]["partitions"]) and md

    md = wait_until(partitions, 30, f"{steps.topic} with {PARTITIONS} partitions and leaders in kcat -L")
    assert md["brokers"], "metadata lists no broker"
    # One broker: it advertises exactly the address clients were given. A cluster
    # (--storage cluster, bootstrap "A,B,C"): every broker is listed, each at its address.
    advertised = sorted(b["name"] for b in md["brokers"])
    assert advertised == sorted(bootstrap.split(",")), f"brokers advertise {advertised}, clients were given {bootstrap}"
    ids = {b["id"] for b in md["brokers"]}
    assert all(p["leader"] in ids for t in md["topics"] if t["topic"] == steps.topic for p in t["partitions"]), md


def test_produce(bootstrap, steps):
    steps.require("create")
    records = kcat_records(0, N_RECORDS)
    window = produce(bootstrap, steps, records)
    steps.data.update(records=records, window=window)
    steps.ok("produce")


def test_read_back_from_earliest(bootstrap, steps):
    steps.require("produce")
    got = consume(bootstrap, steps, "-o", "beginning")
    check_read_back(steps.data["records"], got, ts_window=steps.data["window"], seq_of=seq_from_value)
    steps.data["got"] = got
    steps.ok("read")


def test_query_offsets_by_timestamp(bootstrap, steps):
    steps.require("read")
    got = steps.data["got"]
    for label, ts in offset_lookups(got):
        # One partition may appear only once per kcat -Q run, so ask for all three at once.
        queries = [arg for p in range(PARTITIONS) for arg in ("-t", f"{steps.topic}:{p}:{ts}")]
        out = kcat(bootstrap, f"compat-kcat-query-{run_id(steps)}", "-Q", *queries)
        answers = {int(p): int(o) for p, o in re.findall(rf"^{re.escape(steps.topic)} \[(\d+)\]\s+offset (-?\d+)$", out, re.M)}
        assert sorted(answers) == list(range(PARTITIONS)), f"{label}: kcat -Q printed {out!r}"
        for p, offset in answers.items():
            want = expected_offset_for_time(got, p, ts)
            assert offset == (-1 if want is None else want), f"{label} (ts {ts}) partition {p}"


def test_consume_from_timestamp(bootstrap, steps):
    steps.require("read")
    got = steps.data["got"]
    ts = sorted(g.timestamp_ms for g in got)[len(got) // 2]
    from_ts = consume(bootstrap, steps, "-o", f"s@{ts}")
    for p in range(PARTITIONS):
        start = expected_offset_for_time(got, p, ts)
        want = [] if start is None else sorted(g.offset for g in got if g.partition == p and g.offset >= start)
        assert sorted(g.offset for g in from_ts if g.partition == p) == want, f"partition {p} from ts {ts}"


def test_delete_topic_with_confluent_admin(admin, steps):
    steps.require("create")
    delete_topic(admin, steps.topic)


def test_compressed_batches(bootstrap, admin):
    """Batches compressed with each codec come back intact (the broker stores them as sent)."""
    steps = Steps(topic_name("kcat-compressed"))
    create_topic(admin, steps.topic, bootstrap)
    records, lo, hi = [], None, None
    for i, codec in enumerate(CODECS):
        batch = kcat_records(i * RECORDS_PER_CODEC, RECORDS_PER_CODEC)
        start, end = produce(bootstrap, steps, batch, "-z", codec)
        lo, hi = lo or start, end
        records += batch
    got = consume(bootstrap, steps, "-o", "beginning")
    check_read_back(records, got, ts_window=(lo, hi), seq_of=seq_from_value)
    delete_topic(admin, steps.topic)
