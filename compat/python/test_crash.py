"""Crash test: a Java idempotent producer (acks=all) sends continuously while the broker is killed
with SIGKILL three times and restarted on the same port and data directory. Afterwards every
acknowledged record must be present exactly once, at the offset it was acknowledged with, and in
order, and every batch must be wholly present or wholly absent.

The test owns its broker (`sluice serve` on a fixed free port, so the producer reconnects to the
same address); it runs only with --target sluice. The producer is sluice.compat.CrashProducer
(compat/java/src/test/java), run with plain `java` on the classpath Maven writes: kafka-clients
defaults plus acks=all, enable.idempotence=true, delivery.timeout.ms=120000 and linger.ms=0,
2000 records/s over 3 partitions for 45 s. There is one kill in each third of that time, at a
random moment, a few milliseconds after the producer was asked for a burst of 3000 records so
that produce requests are in flight when the broker dies; the broker restarts after 0.5-2 s.
The seed of the schedule is printed; SLUICE_CRASH_SEED=N replays it.

Reading back is black-box, over the Kafka protocol, twice: with confluent-kafka's consumer
(assign() from the earliest offset, no consumer group) for the records, and with raw Fetch
requests (kafka-python's protocol classes) for the record batches as the broker stores and
serves them: their offsets, CRC-32C, producer id/epoch and producer sequence numbers.

With --storage cluster the test owns a cluster of three brokers instead (SluiceCluster: a bucket
and a database of its own, each broker on a fixed free port) and the producer is given all three
addresses. Each kill is a SIGKILL of ONE broker, each of the three in turn; it stays down until
every partition has been acknowledged again after the kill, which only the other two brokers can
have done (the clients carried on through them once the dead broker's registry lease expired,
about 6 s), bounded by CARRY_ON_S; then it is restarted on its address and data directory (it
registers anew) and the producer runs 4-8 s before the next kill. The checks are the same.

Environment: SLUICE_CRASH_SEED (replay a schedule), SLUICE_CRASH_SECONDS (how long the producer
sends, default 45; with --storage cluster at least this long, and until 5 s after the last restart).
"""

from __future__ import annotations

import os
import random
import shutil
import struct
import subprocess
import time
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_util import Problems, wait_until
from conftest import LOG_DIR, TERMINAL_NOTES, SluiceBroker, SluiceCluster, _die_with_parent, cluster_mode, free_ports, tail

COMPAT_DIR = Path(__file__).resolve().parent.parent
JAVA_DIR = COMPAT_DIR / "java"
MAVEN_BUILD_S = 600  # compiling the Java tree; the first run also downloads dependencies

PARTITIONS = 3
KILLS = 3
SEND_SECONDS = float(os.environ.get("SLUICE_CRASH_SECONDS", "45"))  # the producer sends this long
RATE = 2000  # records per second the producer offers
LINGER_MS = 0  # with small steps of sending, keeps produce requests back to back
MAX_PAYLOAD = 400  # random payload of 0..MAX_PAYLOAD bytes per record
BURST = 3000  # records the producer sends at once just before a kill
BURST_DELAY_S = 0.03  # the kill comes up to this long after the burst was asked for
FIRST_ACK_S = 60  # the producer's first acknowledgement must come within this
RESTART_S = 15  # a restarted broker must listen again within this (retrying a busy port)
PRODUCER_FINISH_S = 150  # after being told to stop: flush (delivery.timeout.ms is 120 s) and exit
MIN_ACKS_PER_PHASE = 200  # acknowledgements required before the first kill and after each restart
READ_TIMEOUT_S = 60
# Cluster mode: after a broker's SIGKILL, every partition must be acknowledged again through the
# other brokers within this (its registry lease of 5 s expires, Metadata stops listing it, the
# producer moves its partitions: about 6-10 s); and the producer runs this long between a
# restart and the next kill.
CARRY_ON_S = 30
CLUSTER_RUN_BETWEEN_S = (4.0, 8.0)

# The value CrashProducer writes: magic, run id, partition, sequence in the partition, global
# sequence, send time, payload length, CRC-32 of the payload; then the payload.
VALUE_HEADER = struct.Struct(">4sqiqqqiI")
MAGIC = b"SLCR"


# --------------------------------------------------------------------------- the Java producer


@pytest.fixture(scope="module")
def crash_target(request):
    if request.config.getoption("--bootstrap"):
        pytest.skip("the crash test starts, kills and restarts its own broker; not with --bootstrap")
    if request.config.getoption("--target") != "sluice":
        pytest.skip("the crash test kills and restarts `sluice serve`; it runs only with --target sluice")


@pytest.fixture(scope="module")
def producer_cmd(crash_target) -> list[str]:
    """`java -cp ... sluice.compat.CrashProducer`, after Maven compiled it and wrote the classpath."""
    if shutil.which("mvn") is None or shutil.which("java") is None:
        pytest.fail("java and mvn are needed (compat/run.sh installs them)", pytrace=False)
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    log = LOG_DIR / "maven-crash-build.log"
    with open(log, "wb") as out:
        try:
            rc = subprocess.run(
                ["mvn", "-B", "-q", "-Dstyle.color=never", "process-test-classes"],
                cwd=JAVA_DIR,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=MAVEN_BUILD_S,
            ).returncode
        except subprocess.TimeoutExpired:
            rc = f"timed out after {MAVEN_BUILD_S} s"
    classpath = JAVA_DIR / "target" / "test-classpath.txt"
    if rc != 0 or not classpath.exists():
        pytest.fail(f"mvn process-test-classes failed ({rc}):\n{tail(log, 30)}", pytrace=False)
    cp = f"{JAVA_DIR / 'target' / 'test-classes'}:{classpath.read_text().strip()}"
    return ["java", "-Xmx512m", "-cp", cp, "sluice.compat.CrashProducer"]


# --------------------------------------------------------------------------- what was produced


@dataclass
class Sends:
    """The producer's output file: one line per completed send, then `done ...`."""

    acks: list[tuple[int, int, int, int]] = field(default_factory=list)  # (partition, offset, seq, time ms)
    fails: list[str] = field(default_factory=list)
    failed_seqs: set[tuple[int, int]] = field(default_factory=set)  # (partition, seq)
    done: str | None = None


def read_sends(path: Path) -> Sends:
    s = Sends()
    try:
        text = path.read_text()
    except FileNotFoundError:
        return s
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "ack" and len(parts) == 5:
            s.acks.append(tuple(int(x) for x in parts[1:5]))
        elif parts[0] == "fail" and len(parts) >= 4:
            s.fails.append(line)
            s.failed_seqs.add((int(parts[1]), int(parts[2])))
        elif parts[0] == "done":
            s.done = line
        # else: a line cut short by a flush in progress (only while the producer runs)
    return s


def count_acks(path: Path) -> int:
    return len(read_sends(path).acks)


class AckTail:
    """The producer's acknowledgements as they are written, read incrementally (whole lines)."""

    def __init__(self, path: Path):
        self.path = path
        self.pos = 0
        self.rest = b""

    def new(self) -> list[tuple[int, int, int, int]]:
        """(partition, offset, seq, time ms) of the acknowledgements written since the last call."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                chunk = f.read()
        except FileNotFoundError:
            return []
        self.pos += len(chunk)
        *lines, self.rest = (self.rest + chunk).split(b"\n")
        out = []
        for line in lines:
            parts = line.split()
            if len(parts) == 5 and parts[0] == b"ack":
                out.append(tuple(int(x) for x in parts[1:5]))
        return out


def wait_carry_on(acks: AckTail, since: float, producer: subprocess.Popen) -> float:
    """Cluster mode, after one broker was killed at `since` (time.time()): wait until every
    partition has an acknowledgement stamped after it (only the live brokers can have given it).
    Returns how long that took; fails after CARRY_ON_S."""
    waiting = set(range(PARTITIONS))
    while True:
        for part, _off, _seq, t_ms in acks.new():
            if t_ms / 1000 > since + 0.2:  # (not an answer the dead broker sent just before it died)
                waiting.discard(part)
        if not waiting:
            return time.time() - since
        assert producer.poll() is None, f"the producer exited early with status {producer.returncode}"
        assert time.time() - since < CARRY_ON_S, (
            f"partitions {sorted(waiting)} got no acknowledgement through the other brokers within {CARRY_ON_S} s of the kill"
        )
        time.sleep(0.2)


# --------------------------------------------------------------------------- reading back


@dataclass(frozen=True)
class Stored:
    """A record as read back, with the fields of its value."""

    partition: int
    offset: int
    value: bytes
    seq: int | None = None  # None: the value does not parse
    problem: str | None = None


def parse(partition: int, offset: int, value: bytes | None, run_id: int) -> Stored:
    if value is None or len(value) < VALUE_HEADER.size:
        return Stored(partition, offset, value or b"", problem=f"value of {len(value or b'')} bytes")
    magic, run, part, seq, _global, _sent_ms, length, crc = VALUE_HEADER.unpack_from(value)
    payload = value[VALUE_HEADER.size :]
    problem = None
    if magic != MAGIC or run != run_id:
        problem = f"not this run's record (magic {magic!r}, run {run})"
    elif part != partition:
        problem = f"produced to partition {part}"
    elif length != len(payload):
        problem = f"payload of {len(payload)} bytes, produced {length}"
    elif zlib.crc32(payload) != crc:
        problem = "payload CRC mismatch"
    return Stored(partition, offset, value, seq, problem)


def consume_all(bootstrap: str, topic: str, run_id: int) -> dict[int, list[Stored]]:
    """Every record of the topic, by partition, read with assign() from the earliest offset."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": f"compat-crash-consumer-{run_id}",
            "group.id": f"compat-unused-{topic}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
        }
    )
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        got: dict[int, list[Stored]] = {p: [] for p in range(PARTITIONS)}
        at_end: set[int] = set()
        deadline = time.monotonic() + READ_TIMEOUT_S
        while len(at_end) < PARTITIONS:
            n = sum(len(v) for v in got.values())
            assert time.monotonic() < deadline, f"read {n} records, reached the end of partitions {sorted(at_end)} only"
            for m in c.consume(num_messages=5000, timeout=1.0):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        at_end.add(m.partition())
                        continue
                    raise AssertionError(f"consumer error: {err}")
                at_end.discard(m.partition())
                got[m.partition()].append(parse(m.partition(), m.offset(), m.value(), run_id))
        return got
    finally:
        c.close()


@dataclass
class Batch:
    """A record batch as the broker serves it."""

    base_offset: int
    last_offset: int
    count: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    crc_ok: bool
    offsets: list[int]
    values: list[bytes]


def fetch_batches(bootstrap: str, topic: str, run_id: int) -> tuple[dict[int, list[Batch]], dict[int, tuple[int, int]]]:
    """Every record batch of the topic, by partition, with raw Fetch requests (kafka-python's
    protocol classes and record parser), and each partition's (log start offset, high watermark)."""
    # kafka-python internals (pinned in requirements.txt): its consumer does not expose batches.
    from kafka.net.compat import KafkaNetClient
    from kafka.protocol.consumer import FetchRequest
    from kafka.protocol.metadata import MetadataRequest
    from kafka.record import MemoryRecords

    client = KafkaNetClient(
        bootstrap_servers=bootstrap.split(","), client_id=f"compat-crash-fetch-{run_id}", receive_message_max_bytes=64 << 20
    )
    try:
        client.check_version()
        md = client.send_and_receive(
            client._manager.least_loaded_node(),
            MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)], max_version=9),
        )
        leaders = {p.partition_index: p.leader_id for t in md.topics if t.name == topic for p in t.partitions}
        assert sorted(leaders) == list(range(PARTITIONS)), f"metadata for {topic}: partitions {sorted(leaders)}"
        client.cluster.update_metadata(md)
        batches: dict[int, list[Batch]] = {}
        marks: dict[int, tuple[int, int]] = {}
        for p in range(PARTITIONS):
            batches[p] = []
            offset, high = 0, None
            deadline = time.monotonic() + READ_TIMEOUT_S
            while high is None or offset < high:
                assert time.monotonic() < deadline, f"partition {p}: raw fetch stuck at offset {offset} of {high}"
                req = FetchRequest(
                    max_wait_ms=0,
                    min_bytes=1,
                    max_bytes=8 << 20,
                    isolation_level=0,
                    topics=[
                        FetchRequest.FetchTopic(
                            topic=topic,
                            partitions=[
                                FetchRequest.FetchTopic.FetchPartition(
                                    partition=p, fetch_offset=offset, partition_max_bytes=2 << 20
                                )
                            ],
                        )
                    ],
                    max_version=11,  # topics by name (v13+ name them by id)
                )
                resp = client.send_and_receive(leaders[p], req)
                pd = resp.responses[0].partitions[0]
                assert pd.error_code == 0, f"partition {p}: fetch at offset {offset}: error code {pd.error_code}"
                high = pd.high_watermark
                marks[p] = (pd.log_start_offset, pd.high_watermark)
                records = MemoryRecords(pd.records or b"")
                progressed = False
                while records.has_next():
                    b = records.next_batch()
                    if b is None:
                        break
                    if b.last_offset < offset:
                        continue  # a batch before the one asked for
                    crc_ok = b.validate_crc()  # (before reading its records, as kafka-python requires)
                    recs = list(b)
                    batches[p].append(
                        Batch(
                            base_offset=b.base_offset,
                            last_offset=b.last_offset,
                            count=b.records_count,
                            producer_id=b.producer_id,
                            producer_epoch=b.producer_epoch,
                            base_sequence=b.base_sequence,
                            crc_ok=crc_ok,
                            offsets=[r.offset for r in recs],
                            values=[r.value for r in recs],
                        )
                    )
                    offset = b.last_offset + 1
                    progressed = True
                assert progressed or offset >= high, f"partition {p}: fetch at offset {offset} (< {high}) returned no whole batch"
        return batches, marks
    finally:
        client.close()


# --------------------------------------------------------------------------- the checks


def check(
    sends: Sends,
    stored: dict[int, list[Stored]],
    batches: dict[int, list[Batch]],
    marks: dict[int, tuple[int, int]],
    run_id: int,
) -> tuple[Problems, dict]:
    """Everything the crash test requires of what was read back; returns the problems found and
    counts for the summary."""
    p = Problems()
    stats: dict = {}

    # The producer: every send completed (ack or fail) exactly once, numbered 0.. per partition.
    completed: dict[int, list[int]] = defaultdict(list)
    for part, _off, seq, _t in sends.acks:
        completed[part].append(seq)
    for part, seq in sends.failed_seqs:
        completed[part].append(seq)
    for part, seqs in completed.items():
        if sorted(seqs) != list(range(len(seqs))):
            p.add("producer output", f"partition {part}: sends completed are not seq 0..{len(seqs) - 1} each once")
    if sends.done is None:
        p.add("producer output", "no `done` line: the producer did not finish")

    # (0) The topic, record by record: offsets 0..n-1 in every partition, every value intact.
    by_offset: dict[tuple[int, int], Stored] = {}
    for part in range(PARTITIONS):
        recs = stored.get(part, [])
        offsets = [r.offset for r in recs]
        if offsets != list(range(len(recs))):
            first_bad = next((i for i, o in enumerate(offsets) if o != i), len(offsets))
            p.add("offsets not contiguous from 0", f"partition {part}: at index {first_bad} offset {offsets[first_bad:first_bad + 3]}")
        log_start, high = marks.get(part, (None, None))
        if log_start != 0 or high != len(recs):
            p.add("watermarks", f"partition {part}: log start {log_start}, high watermark {high}, {len(recs)} records read")
        for r in recs:
            by_offset[(part, r.offset)] = r
            if r.problem:
                p.add("corrupt record", f"partition {part} offset {r.offset}: {r.problem}")

    # (1) Every acknowledged record is present, at the partition and offset it was acknowledged with.
    acked_at: dict[tuple[int, int], tuple[int, int]] = {}  # (partition, seq) -> (offset, time)
    for part, off, seq, t in sends.acks:
        if (part, seq) in acked_at:
            p.add("acknowledged twice", f"partition {part} seq {seq}")
        acked_at[(part, seq)] = (off, t)
        r = by_offset.get((part, off))
        if r is None:
            p.add("acknowledged record missing", f"partition {part} offset {off} (seq {seq}) is not in the log")
        elif r.seq != seq:
            p.add("acknowledged offset holds another record", f"partition {part} offset {off}: seq {r.seq}, acknowledged seq {seq}")

    # (2) Exactly once and in order: per partition, seq strictly increasing with the offset.
    duplicates = 0
    for part in range(PARTITIONS):
        seen: set[int] = set()
        prev = -1
        for r in stored.get(part, []):
            if r.seq is None:
                continue
            if r.seq in seen:
                duplicates += 1
                p.add("duplicate record", f"partition {part} seq {r.seq} again at offset {r.offset}")
            elif r.seq <= prev:
                p.add("out of order", f"partition {part} offset {r.offset}: seq {r.seq} after seq {prev}")
            seen.add(r.seq)
            prev = max(prev, r.seq)
    stats["duplicates"] = duplicates

    # (3) Whole batches. Each batch the broker serves must be intact (CRC-32C, its offsets
    # base..last, as many records as it says) and come from the idempotent producer with
    # consecutive records of one partition; and per producer id and epoch, the producer sequence
    # numbers of the batches present must run 0, 1, 2, ... with no gap and no overlap: a batch
    # missing between two present ones, or present twice, or cut short, breaks that run.
    n_batches = 0
    epochs: set[tuple[int, int]] = set()
    for part in range(PARTITIONS):
        next_sequence: dict[tuple[int, int], int] = {}
        seq_shift: dict[tuple[int, int], int] = {}
        served: list[tuple[int, bytes]] = []
        for b in batches.get(part, []):
            n_batches += 1
            where = f"partition {part} batch at offset {b.base_offset}"
            served += list(zip(b.offsets, b.values))
            if not b.crc_ok:
                p.add("batch CRC mismatch", where)
            if b.count != b.last_offset - b.base_offset + 1 or b.offsets != list(range(b.base_offset, b.last_offset + 1)):
                p.add("batch offsets", f"{where}: {b.count} records, offsets {b.offsets[:3]}...{b.offsets[-1:]}, last {b.last_offset}")
            if b.producer_id < 0 or b.base_sequence < 0:
                p.add("batch without producer id/sequence", f"{where}: producer id {b.producer_id}, sequence {b.base_sequence}")
                continue
            key = (b.producer_id, b.producer_epoch)
            epochs.add(key)
            expected = next_sequence.get(key, 0)
            if b.base_sequence != expected:
                kind = "batch missing before a present one" if b.base_sequence > expected else "batch present twice (or overlapping)"
                p.add(kind, f"{where}: producer {key} sequence {b.base_sequence}, expected {expected}")
            next_sequence[key] = b.base_sequence + b.count
            seqs = [parse(part, o, v, run_id).seq for o, v in zip(b.offsets, b.values)]
            if seqs and None not in seqs:
                if seqs != list(range(seqs[0], seqs[0] + len(seqs))):
                    p.add("batch records not consecutive sends", f"{where}: seqs {seqs[:5]}...")
                # Within one producer id and epoch, the producer numbers records as this test does.
                if seq_shift.setdefault(key, seqs[0] - b.base_sequence) != seqs[0] - b.base_sequence:
                    p.add("batch holds other records than its producer sequence says", f"{where}: seq {seqs[0]}, producer sequence {b.base_sequence}")
        # The raw batches and the consumer saw the same records.
        consumed = [(r.offset, r.value) for r in stored.get(part, [])]
        if served != consumed:
            p.add("raw fetch and consumer disagree", f"partition {part}: {len(served)} records in batches, {len(consumed)} consumed")
    stats["batches"] = n_batches
    stats["producer ids/epochs"] = sorted(epochs)

    # Present but not acknowledged: allowed (written, acknowledgement lost or given up); with
    # acknowledgements for every send, there should be none.
    stats["present"] = sum(len(v) for v in stored.values())
    stats["present, not acknowledged"] = sum(
        1 for recs in stored.values() for r in recs if r.seq is not None and (r.partition, r.seq) not in acked_at
    )

    # Stricter than the issue: with delivery.timeout.ms = 120 s and outages of a few seconds, no
    # send has any reason to fail; a failure points at an error the broker should not have given.
    for line in sends.fails:
        p.add("send failed (the producer gave up on a record)", line)
    return p, stats


# --------------------------------------------------------------------------- the test


def end_process(proc: subprocess.Popen | None):
    """Stop a process this test started, by its PID: SIGTERM, then SIGKILL."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def sleep_until(t: float, producer: subprocess.Popen):
    while time.time() < t:
        if producer.poll() is not None:
            raise AssertionError(f"the producer exited early with status {producer.returncode}")
        time.sleep(min(0.05, max(0.0, t - time.time())))


def producer_retries(log: Path, kills: list[dict]) -> dict[int | None, dict[str, int]]:
    """Per kill number (None: not near a kill), the produce errors the Java client logged as
    `Got error produce response ... retrying ... Error: NAME`, one per partition, by error name.
    Its log stamps local time of day (HH:MM:SS.mmm)."""
    found: dict[int | None, dict[str, int]] = defaultdict(lambda: defaultdict(int))

    def day_s(t: float) -> float:
        lt = time.localtime(t)
        return lt.tm_hour * 3600 + lt.tm_min * 60 + lt.tm_sec + t % 1

    windows = [(k["n"], day_s(k["killed_at"]) - 1, day_s(k["ready_at"]) + 10) for k in kills]
    for line in log.read_text(errors="replace").splitlines():
        if "Got error produce response" not in line:
            continue
        error = line.rsplit("Error: ", 1)[-1].split()[0].rstrip(".") if "Error: " in line else "?"
        try:
            h, m, sec = line.split()[0].split(":")
            at = int(h) * 3600 + int(m) * 60 + float(sec)
        except ValueError:
            at = None
        n = next((n for n, lo, hi in windows if at is not None and lo <= at <= hi), None)
        found[n][error] += 1
    return {n: dict(errors) for n, errors in found.items()}


def restart(broker: SluiceBroker) -> int:
    """Start the broker again on its address and data directory; retry while the port is busy.
    Returns the number of attempts."""
    deadline = time.monotonic() + RESTART_S
    attempts = 0
    while True:
        attempts += 1
        try:
            broker.start()
            return attempts
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def kill_and_restart(broker: SluiceBroker, producer: subprocess.Popen, rng: random.Random, t0: float, kills: list[dict]):
    """One broker: KILLS SIGKILLs at scheduled moments, each followed by a restart on the same
    port and data directory after 0.5-2 s. Each kill is appended to `kills`."""
    # Kill moments: one in each third of the sending time (after 4 s, leaving 6 s before the
    # next third), so the producer runs before the first kill, between kills, and after the last.
    slot = (SEND_SECONDS - 8) / KILLS
    # Just before each kill the producer sends a burst of records, so that produce requests
    # are in flight (being written, or written and not yet answered) when the broker dies.
    schedule = [
        (4 + i * slot + rng.uniform(0, slot - 6), rng.uniform(0, BURST_DELAY_S), rng.uniform(0.5, 2.0))
        for i in range(KILLS)
    ]
    for i, (at, burst_delay, pause) in enumerate(schedule, 1):
        sleep_until(t0 + at, producer)
        producer.stdin.write(f"burst {BURST}\n".encode())
        producer.stdin.flush()
        time.sleep(burst_delay)
        pid = broker.proc.pid
        killed_at = time.time()
        broker.kill()
        gone_s = time.time() - killed_at
        time.sleep(pause)
        started_at = time.time()
        attempts = restart(broker)
        ready_at = time.time()
        kills.append(
            dict(
                n=i,
                at=killed_at - t0,
                pid=pid,
                burst_delay=burst_delay,
                gone_s=gone_s,
                pause=pause,
                start_s=ready_at - started_at,
                attempts=attempts,
                down=ready_at - killed_at,
                killed_at=killed_at,
                ready_at=ready_at,
            )
        )


def kill_brokers_in_turn(cluster: SluiceCluster, producer: subprocess.Popen, rng: random.Random, t0: float, acks: AckTail, kills: list[dict]):
    """Cluster mode: KILLS SIGKILLs, of each broker in turn (A, B, C). After each, the broker
    stays down until the producer got acknowledgements for every partition through the others
    (wait_carry_on); then it restarts on its address and data directory, and the producer runs
    CLUSTER_RUN_BETWEEN_S before the next kill (the first kill comes that long after t0). Just
    before each kill the producer sends a burst, so that produce requests are in flight. Each
    kill is appended to `kills`."""
    at = t0 + rng.uniform(*CLUSTER_RUN_BETWEEN_S)
    for i in range(1, KILLS + 1):
        victim_n = (i - 1) % len(cluster.brokers)
        victim = cluster.brokers[victim_n]
        burst_delay = rng.uniform(0, BURST_DELAY_S)
        sleep_until(at, producer)
        acks.new()  # (skip what came before)
        producer.stdin.write(f"burst {BURST}\n".encode())
        producer.stdin.flush()
        time.sleep(burst_delay)
        pid = victim.proc.pid
        killed_at = time.time()
        victim.kill()
        gone_s = time.time() - killed_at
        carried_on = wait_carry_on(acks, killed_at, producer)
        started_at = time.time()
        attempts = restart(victim)
        ready_at = time.time()
        kills.append(
            dict(
                n=i,
                at=killed_at - t0,
                pid=pid,
                broker=chr(ord("A") + victim_n),
                burst_delay=burst_delay,
                gone_s=gone_s,
                pause=started_at - killed_at,
                carried_on=carried_on,
                start_s=ready_at - started_at,
                attempts=attempts,
                down=ready_at - killed_at,
                killed_at=killed_at,
                ready_at=ready_at,
            )
        )
        at = ready_at + rng.uniform(*CLUSTER_RUN_BETWEEN_S)


@pytest.mark.timeout(240)
def test_crash_idempotent_producer(producer_cmd):
    assert SEND_SECONDS >= 30, "SLUICE_CRASH_SECONDS: at least 30 (three kills with progress between them)"
    seed = int(os.environ.get("SLUICE_CRASH_SEED") or random.randrange(1 << 32))
    rng = random.Random(seed)
    run_id = rng.randrange(1 << 62)
    topic = f"compat-crash-{run_id & 0xFFFFFFFF:08x}"
    cluster = cluster_mode()
    if cluster:
        broker = SluiceCluster(log_prefix="sluice-crash", fixed_ports=True)
        where = "a cluster of 3 brokers at " + ", ".join(b.kafka_addr for b in broker.brokers)
    else:
        port = free_ports(1)[0]
        broker = SluiceBroker(kafka_addr=f"127.0.0.1:{port}", log_name="sluice-crash.log")
        where = f"port {port}"
    print(f"crash test: seed {seed} (SLUICE_CRASH_SEED={seed} replays the kill schedule), topic {topic}, {where}")
    acks_path = LOG_DIR / "crash-acks.txt"
    producer_log = LOG_DIR / "crash-producer.log"
    acks_path.unlink(missing_ok=True)
    shutil.rmtree(LOG_DIR / "crash-data", ignore_errors=True)  # kept from an earlier failed run
    producer = None
    failed = True
    kills: list[dict] = []
    try:
        broker.start()
        bootstrap = broker.bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": f"compat-crash-admin-{run_id}"})
        admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[topic].result(timeout=30)
        wait_until(
            lambda: (t := admin.list_topics(topic, timeout=10).topics.get(topic)) is not None
            and t.error is None
            and len(t.partitions) == PARTITIONS,
            30,
            f"{topic} with {PARTITIONS} partitions in metadata",
        )
        del admin  # (closes it: it would only log reconnection attempts during the kills)

        with open(producer_log, "wb") as plog:
            producer = subprocess.Popen(
                producer_cmd
                + [
                    f"bootstrap={bootstrap}",
                    f"topic={topic}",
                    f"partitions={PARTITIONS}",
                    f"out={acks_path}",
                    f"run={run_id}",
                    f"seed={rng.randrange(1 << 62)}",
                    f"rate={RATE}",
                    f"linger-ms={LINGER_MS}",
                    f"max-payload={MAX_PAYLOAD}",
                    # its own bound, should stdin never end
                    f"max-seconds={int(SEND_SECONDS + 60 + (KILLS * (CARRY_ON_S + RESTART_S + 8) if cluster else 0))}",
                ],
                stdin=subprocess.PIPE,
                stdout=plog,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
            )
        deadline = time.time() + FIRST_ACK_S
        while count_acks(acks_path) == 0:
            assert producer.poll() is None, f"the producer exited with status {producer.returncode}:\n{tail(producer_log)}"
            assert time.time() < deadline, f"no acknowledgement within {FIRST_ACK_S} s:\n{tail(producer_log)}"
            time.sleep(0.05)
        t0 = time.time()

        if cluster:
            kill_brokers_in_turn(broker, producer, rng, t0, AckTail(acks_path), kills)
            stop_at = max(t0 + SEND_SECONDS, kills[-1]["ready_at"] + 5)
        else:
            kill_and_restart(broker, producer, rng, t0, kills)
            stop_at = t0 + SEND_SECONDS
        sleep_until(stop_at, producer)
        stop_at = time.time()
        producer.stdin.close()  # end of input: stop sending, flush, exit
        try:
            producer.wait(PRODUCER_FINISH_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the producer did not finish within {PRODUCER_FINISH_S} s of being stopped:\n{tail(producer_log)}")
        assert producer.returncode == 0, f"the producer exited with status {producer.returncode}:\n{tail(producer_log)}"

        sends = read_sends(acks_path)
        stored = consume_all(bootstrap, topic, run_id)
        batches, marks = fetch_batches(bootstrap, topic, run_id)
        problems, stats = check(sends, stored, batches, marks, run_id)

        # Real progress: acknowledgements before the first kill, between kills and after the last.
        ack_times = sorted(t / 1000 for *_, t in sends.acks)
        bounds = [t0] + [k["ready_at"] for k in kills]
        ends = [k["killed_at"] for k in kills] + [stop_at]
        phases = []
        for start, end in zip(bounds, ends):
            n = sum(1 for t in ack_times if start <= t < end)
            phases.append(n)
        for k in kills:
            first = next((t for t in ack_times if t >= k["ready_at"]), None)
            k["first_ack"] = None if first is None else first - k["ready_at"]
        for i, n in enumerate(phases):
            if n < MIN_ACKS_PER_PHASE:
                what = "before the first kill" if i == 0 else f"after restart {i}"
                problems.add("no progress", f"{n} acknowledgements {what} (want >= {MIN_ACKS_PER_PHASE})")

        # Produce requests the producer retried, from its log: those in flight at a kill (the
        # broker may or may not have written them; either way they must end up in the log once).
        retries = producer_retries(producer_log, kills)
        summary = [
            f"crash test{' (cluster of 3 brokers)' if cluster else ''}: seed {seed}, {stop_at - t0:.0f} s of sending at {RATE}/s, "
            f"{KILLS} SIGKILLs; {sends.done}",
            f"  acknowledged {len(sends.acks)}, failed {len(sends.fails)}, present {stats['present']} "
            f"(not acknowledged: {stats['present, not acknowledged']}), duplicates {stats['duplicates']}, "
            f"batches {stats['batches']}, producer (id, epoch) {stats['producer ids/epochs']}",
            f"  acknowledgements per phase (before kill 1, after restarts 1..{KILLS}): {phases}",
        ] + [
            f"  kill {k['n']}: at +{k['at']:.1f} s ("
            + (f"broker {k['broker']}, " if "broker" in k else "")
            + f"pid {k['pid']}, {k['burst_delay'] * 1000:.0f} ms after a burst), gone after "
            f"{k['gone_s']:.2f} s, "
            + (f"every partition acknowledged through the others {k['carried_on']:.2f} s after the kill, " if "carried_on" in k else "")
            + f"paused {k['pause']:.2f} s, listening again after {k['down']:.2f} s (start {k['start_s']:.2f} s"
            + (f", {k['attempts']} attempts" if k["attempts"] > 1 else "")
            + "), first acknowledgement "
            + ("none" if k["first_ack"] is None else f"{k['first_ack']:.2f} s later")
            + f"; batches retried: {retries.get(k['n']) or 'none'}"
            for k in kills
        ] + ([f"  batches retried away from the kills: {retries[None]}"] if retries.get(None) else [])
        print("\n".join(summary))
        (LOG_DIR / "crash-summary.txt").write_text("\n".join(summary) + "\n")
        TERMINAL_NOTES.extend(summary)
        problems.raise_if_any(f"crash test (seed {seed}; logs in {LOG_DIR}: sluice-crash.log, crash-acks.txt, crash-producer.log)")
        failed = False
    finally:
        end_process(producer)
        if failed and broker.data_dir:
            # Keep the broker's data for a look at what went wrong (in cluster mode the brokers'
            # caches only: the data is in the bucket and the database, gone with the session).
            broker.kill()
            kept = LOG_DIR / "crash-data"
            shutil.rmtree(kept, ignore_errors=True)
            if cluster:
                for i, d in enumerate(broker.data_dir):
                    if d:
                        shutil.copytree(d, kept / chr(ord("A") + i), dirs_exist_ok=True)
            else:
                shutil.copytree(broker.data_dir, kept, dirs_exist_ok=True)
            if kills:
                TERMINAL_NOTES.append(f"crash test failed (seed {seed}); kills so far: " + ", ".join(f"+{k['at']:.1f} s" for k in kills))
            TERMINAL_NOTES.append(f"crash test failed (seed {seed}); broker data kept in {kept}")
        broker.stop()
