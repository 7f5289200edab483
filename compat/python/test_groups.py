"""Consumer groups with real clients: members that subscribe, share a topic's partitions, commit
what they processed, leave, and hand their partitions over.

Tests (each on its own topic and group, deleted/left at the end):

- test_confluent_group_takeover[classic|consumer]: 3 confluent-kafka consumers in one group on a
  6-partition topic (classic protocol, and KIP-848 `group.protocol=consumer`). Their assignments
  must be disjoint and cover all 6 partitions (2 each). A producer sends continuously; each
  member commits synchronously after every batch it processed. Then one member processes
  records for one more second without committing them and closes (it leaves the group); the
  other two must take its partitions over well within the session timeout and continue from
  the committed offsets.
- test_kafka_python_group_takeover: the same with 2 kafka-python consumers (classic protocol) on a
  4-partition topic.
- test_kcat_group_resumes: `kcat -G` joins a group, reads everything (auto.offset.reset=earliest),
  commits on exit; a second run in the group reads only what was produced since.
- test_confluent_rebalance_storm[classic|consumer]: 10 confluent-kafka consumers join and leave
  at random for 20 s on a 12-partition topic while records are produced (half of the leavers
  leave an uncommitted tail); then 5 stay. Their assignments must converge (balanced, every
  partition with exactly one member, unchanged for 6 s) and every record must be consumed.
  SLUICE_STORM_SEED=N replays a schedule.

Checks, from what every member processed and committed (with times):

- no loss: every record the producer was told was written (partition, offset) was processed by
  some member, with its value;
- duplicates only from an uncommitted tail: a record processed again after a commit past it had
  completed (by anyone) is an error; for the member that left, the partitions' new owners must
  start exactly at its last committed offset.

The SIGKILL test of the broker with a group consuming is in test_groups_crash.py (Sluice only).
"""

from __future__ import annotations

import bisect
import os
import random
import shutil
import subprocess
import threading
import time
import traceback
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_util import DELETE_TIMEOUT_S, Problems, wait_until
from conftest import TERMINAL_NOTES

SETTLE_S = 30  # members must have disjoint assignments covering the topic within this
TAKEOVER_S = 30  # after a member closed, the others must own its partitions within this (< 45 s session timeout)
DRAIN_S = 30  # after the producer stopped, every record must have been processed within this
CLOSE_S = 30  # a member must have closed within this of being told to
TAIL_S = 10  # a leaving member waits up to this long for its last (uncommitted) records
RATE = 300  # records per second the producer sends

now = time.monotonic


# --------------------------------------------------------------------------- recording


@dataclass
class Recorder:
    """What the members of one group did, with times (time.monotonic()): each record processed,
    each offset committed successfully, each commit that failed, each assignment seen."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    processed: list[tuple[float, str, int, int, bytes | None]] = field(default_factory=list)  # (t, member, p, offset, value)
    commits: list[tuple[float, str, int, int]] = field(default_factory=list)  # (t done, member, p, offset)
    commit_errors: list[tuple[float, str, str]] = field(default_factory=list)
    client_errors: list[tuple[float, str, str]] = field(default_factory=list)
    assignments: list[tuple[float, str, frozenset]] = field(default_factory=list)

    def process(self, member: str, batch: list[tuple[int, int, bytes | None]]):
        t = now()
        with self.lock:
            self.processed.extend((t, member, p, o, v) for p, o, v in batch)

    def committed(self, member: str, offsets: dict[int, int], errors: dict[int, str]):
        t = now()
        with self.lock:
            self.commits.extend((t, member, p, o) for p, o in offsets.items() if p not in errors)
            self.commit_errors.extend((t, member, f"partition {p}: {e}") for p, e in errors.items())

    def commit_failed(self, member: str, error: str):
        with self.lock:
            self.commit_errors.append((now(), member, error))

    def client_error(self, member: str, error: str):
        with self.lock:
            self.client_errors.append((now(), member, error))

    def assigned(self, member: str, partitions: frozenset):
        with self.lock:
            self.assignments.append((now(), member, partitions))

    def commits_by(self, member: str, since: float = 0.0) -> int:
        """How many partition offsets member committed successfully (since a time)."""
        with self.lock:
            return sum(1 for c in self.commits if c[1] == member and c[0] > since)

    def snapshot(self):
        with self.lock:
            return list(self.processed), list(self.commits)


def next_offsets(batch: list[tuple[int, int, bytes | None]]) -> dict[int, int]:
    """The offsets to commit after processing batch: per partition, the last offset + 1."""
    out: dict[int, int] = {}
    for p, o, _ in batch:
        out[p] = max(out.get(p, 0), o + 1)
    return out


# --------------------------------------------------------------------------- clients


class ConfluentMember:
    """A confluent-kafka consumer subscribed to one topic, no auto commit."""

    def __init__(self, conf: dict, topic: str, recorder: Recorder, name: str):
        self.topic = topic
        self.rec = recorder
        self.name = name
        self.c = Consumer(conf)
        self.c.subscribe([topic])

    def poll(self) -> list[tuple[int, int, bytes | None]]:
        out = []
        for m in self.c.consume(num_messages=500, timeout=0.5):
            err = m.error()
            if err is None:
                out.append((m.partition(), m.offset(), m.value()))
            elif err.code() != KafkaError._PARTITION_EOF:
                if err.fatal():
                    raise KafkaException(err)
                self.rec.client_error(self.name, str(err))  # e.g. the broker is down (crash test)
        return out

    def commit(self, offsets: dict[int, int]) -> dict[int, str]:
        done = self.c.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in offsets.items()], asynchronous=False)
        return {tp.partition: str(tp.error) for tp in done or [] if tp.error is not None}

    def assignment(self) -> frozenset:
        return frozenset(tp.partition for tp in self.c.assignment())

    def close(self):
        self.c.close()


class KafkaPythonMember:
    """A kafka-python KafkaConsumer subscribed to one topic, no auto commit."""

    def __init__(self, bootstrap: str, group: str, client_id: str, topic: str):
        from kafka import KafkaConsumer

        self.topic = topic
        self.c = KafkaConsumer(
            bootstrap_servers=bootstrap,
            client_id=client_id,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            request_timeout_ms=30000,
        )
        self.c.subscribe([topic])

    def poll(self) -> list[tuple[int, int, bytes | None]]:
        out = []
        for _tp, msgs in self.c.poll(timeout_ms=500, max_records=500).items():
            out.extend((m.partition, m.offset, m.value) for m in msgs)
        return out

    def commit(self, offsets: dict[int, int]) -> dict[int, str]:
        from kafka import OffsetAndMetadata, TopicPartition as KTopicPartition

        self.c.commit({KTopicPartition(self.topic, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()}, timeout_ms=15000)
        return {}

    def assignment(self) -> frozenset:
        return frozenset(tp.partition for tp in self.c.assignment() or ())

    def close(self):
        self.c.close(autocommit=False, timeout_ms=15000)


class Member:
    """One group member in a thread of its own: poll, process (record), commit synchronously
    what it processed, until told to stop. stop(tail=True) makes it process records for one more
    second without committing them before it closes (an uncommitted tail for the next owner to
    read again)."""

    def __init__(self, name: str, open_client: Callable[[], object], recorder: Recorder):
        self.name = name
        self.open_client = open_client
        self.rec = recorder
        self.assignment: frozenset | None = None
        self.tail: list[tuple[int, int, bytes | None]] = []
        self.error: str | None = None
        self.stopped_at: float | None = None
        self.closed_at: float | None = None
        self._stop = threading.Event()
        self._tail = False
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"member-{name}", daemon=True)
        self.thread.start()

    def _saw(self, assignment: frozenset):
        if assignment != self.assignment:
            self.assignment = assignment
            self.rec.assigned(self.name, assignment)

    def _run(self):
        client = None
        try:
            client = self.open_client()
            while not self._stop.is_set():
                batch = client.poll()
                self._saw(client.assignment())
                if not batch:
                    continue
                self.rec.process(self.name, batch)
                offsets = next_offsets(batch)
                try:
                    errors = client.commit(offsets)
                except Exception as e:  # e.g. a rebalance in progress: these offsets stay uncommitted
                    self.rec.commit_failed(self.name, repr(e))
                else:
                    self.rec.committed(self.name, offsets, errors)
            if self._tail:
                # Process for a second more without committing (longer if nothing comes).
                started, deadline = now(), now() + TAIL_S
                while now() < deadline and (not self.tail or now() - started < 1.0):
                    batch = client.poll()
                    if batch:
                        self.rec.process(self.name, batch)
                        self.tail.extend(batch)
        except Exception:
            self.error = traceback.format_exc()
        finally:
            self.stopped_at = now()
            if client is not None:
                try:
                    client.close()
                except Exception:
                    self.error = (self.error or "") + "close: " + traceback.format_exc()
            self.closed_at = now()
            self.closed.set()

    def stop(self, tail: bool = False):
        self._tail = tail
        self._stop.set()

    def wait_closed(self, timeout: float = CLOSE_S):
        assert self.closed.wait(timeout), f"member {self.name} did not close within {timeout} s"
        self.thread.join(5)


def settled(members: list[Member], partitions: int, balanced: bool = False) -> bool:
    """Every member has a non-empty assignment, no partition has two members, all are covered."""
    sets = [m.assignment for m in members]
    if any(not s for s in sets):
        return False
    union = frozenset().union(*sets)
    if sum(len(s) for s in sets) != len(union) or union != frozenset(range(partitions)):
        return False
    return not balanced or max(len(s) for s in sets) - min(len(s) for s in sets) <= 1


def wait_for(members: list[Member], predicate: Callable[[], object], timeout_s: float, what: Callable[[], str]):
    """Poll predicate() until it is truthy; fail at once if a member failed, and with what()
    (evaluated then, so it shows the state at the timeout) after timeout_s."""
    deadline = now() + timeout_s
    while True:
        errors = member_errors(members)
        if errors:
            raise AssertionError(errors)
        if predicate():
            return
        if now() >= deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what()}{recent_client_errors(members)}")
        time.sleep(0.1)


def recent_client_errors(members: list[Member], count: int = 8) -> str:
    """The last client errors the members reported (e.g. "Subscribed topic not available"), for
    a failure message: what the clients saw says whether a stuck rebalance is theirs or the
    coordinator's."""
    if not members:
        return ""
    recent = members[0].rec.client_errors[-count:]
    if not recent:
        return "; no client errors reported"
    return "; last client errors: " + "; ".join(f"{m} at {t:.1f}: {e}" for t, m, e in recent)


def describe_assignments(members: list[Member]) -> str:
    return ", ".join(f"{m.name}: {sorted(m.assignment) if m.assignment is not None else 'none yet'}" for m in members)


def member_errors(members: list[Member]) -> str:
    return "\n".join(f"member {m.name}: {m.error}" for m in members if m.error)


# --------------------------------------------------------------------------- producing


class Feeder:
    """Produces records continuously at `rate` per second to every partition in turn
    (confluent-kafka, idempotent, acks=all) and remembers where each landed."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, client_id: str, rate: int = RATE, **extra):
        self.topic = topic
        self.partitions = partitions
        self.rate = rate
        self.tag = uuid.uuid4().hex[:8]
        self.delivered: dict[tuple[int, int], bytes] = {}
        self.failed: list[str] = []
        self.sent = 0
        self.error: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._pause = threading.Event()
        self.conf = {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            **extra,
        }
        self.thread = threading.Thread(target=self._run, name="feeder", daemon=True)
        self.thread.start()

    def _report(self, err, msg):
        with self._lock:
            if err is not None:
                self.failed.append(f"{msg.value()!r}: {err}")
            else:
                self.delivered[(msg.partition(), msg.offset())] = msg.value()

    def _run(self):
        try:
            p = Producer(self.conf)
            start = now()
            while not self._stop.is_set():
                due = int((now() - start) * self.rate)
                while self.sent < due:
                    value = f"{self.tag}-{self.sent:07d}".encode()
                    p.produce(self.topic, value=value, partition=self.sent % self.partitions, on_delivery=self._report)
                    self.sent += 1
                p.poll(0.02)
            left = p.flush(120)
            if left:
                self.error = f"{left} records still undelivered after flush"
        except Exception:
            self.error = traceback.format_exc()

    def delivered_count(self) -> int:
        with self._lock:
            return len(self.delivered)

    def stop(self, timeout: float = 150):
        self._stop.set()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the producer did not finish"
        assert self.error is None, f"producer: {self.error}"


# --------------------------------------------------------------------------- checks


def not_processed(rec: Recorder, feeder: Feeder) -> list[tuple[int, int]]:
    """Records the producer was told were written that no member has processed yet."""
    processed, _ = rec.snapshot()
    seen = {(p, o) for _, _, p, o, _ in processed}
    with feeder._lock:
        return sorted(k for k in feeder.delivered if k not in seen)


def all_processed(rec: Recorder, feeder: Feeder) -> bool:
    return not not_processed(rec, feeder)


def unprocessed(rec: Recorder, feeder: Feeder) -> str:
    left = not_processed(rec, feeder)
    parts = sorted({p for p, _ in left})
    return f"every produced record to be processed ({len(left)} not yet, in partitions {parts}, first {left[:3]})"


def check_run(
    rec: Recorder,
    feeder: Feeder,
    leaver: Member | None = None,
    leaver_partitions: frozenset = frozenset(),
    unknown_ok: bool = False,
) -> tuple[Problems, dict]:
    """No loss, duplicates only from uncommitted tails, the leaver's partitions resumed at its
    last commit. Returns the problems and counts for the summary."""
    p = Problems()
    processed, commits = rec.snapshot()
    with feeder._lock:
        delivered = dict(feeder.delivered)
        failed = list(feeder.failed)
    if failed:
        p.add("producer failed", f"{len(failed)} records, e.g. {failed[:2]}")

    # No loss: every delivered record processed by someone, with its value.
    seen: dict[tuple[int, int], list[tuple[float, str, bytes | None]]] = defaultdict(list)
    for t, member, part, off, value in processed:
        seen[(part, off)].append((t, member, value))
    missing = sorted(k for k in delivered if k not in seen)
    if missing:
        p.add("lost (delivered, never processed)", f"{len(missing)} records, first {missing[:5]}")
    unknown = 0
    for k, events in seen.items():
        want = delivered.get(k)
        if want is None:
            unknown += 1
            if not unknown_ok:
                p.add("processed a record the producer was not told about", f"p{k[0]}@{k[1]}: {events[0][2]!r}")
            continue
        for _, member, value in events:
            if value != want:
                p.add("value", f"p{k[0]}@{k[1]} read by {member}: {value!r}, produced {want!r}")

    # Duplicates only from uncommitted tails: a record may be processed again only if no commit
    # past it had completed before (the new owner starts at the committed offset).
    by_part: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for t, _member, part, off in commits:
        by_part[part].append((t, off))
    times: dict[int, list[float]] = {}
    best: dict[int, list[int]] = {}
    for part, cs in by_part.items():
        cs.sort()
        times[part] = [t for t, _ in cs]
        running, acc = -1, []
        for _, off in cs:
            running = max(running, off)
            acc.append(running)
        best[part] = acc
    duplicates = 0
    for (part, off), events in seen.items():
        if len(events) < 2:
            continue
        events.sort()
        duplicates += len(events) - 1
        for t, member, _ in events[1:]:
            i = bisect.bisect_left(times.get(part, []), t)
            committed = best[part][i - 1] if i else -1
            if committed > off:
                first = events[0]
                p.add(
                    "duplicate of a committed record",
                    f"p{part}@{off} read by {first[1]}, then by {member} {t - first[0]:.2f} s later, "
                    f"after offset {committed} had been committed",
                )

    # The leaver's partitions: their new owners start exactly at the leaver's last commit.
    starts = {}
    if leaver is not None:
        for part in sorted(leaver_partitions):
            last = [off for t, m, pp, off in commits if pp == part and t <= leaver.closed_at]
            want = max(last) if last else 0
            after = sorted((t, off, m) for t, m, pp, off, _ in processed if pp == part and m != leaver.name)
            if not after:
                p.add("not taken over", f"partition {part}: no other member processed any record of it")
                continue
            got, by = after[0][1], after[0][2]
            starts[part] = (want, got, by)
            if got != want:
                p.add(
                    "taken over elsewhere than the committed offset",
                    f"partition {part}: {leaver.name} last committed {want}, {by} started at {got}",
                )
    stats = dict(
        delivered=len(delivered),
        processed=len(processed),
        duplicates=duplicates,
        commits=len(commits),
        commit_errors=len(rec.commit_errors),
        unknown=unknown,
        starts=starts,
    )
    return p, stats


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets (OffsetFetch from a consumer that never joins the group)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": f"compat-groups-offsets-{group[-8:]}"})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()


def check_committed(bootstrap: str, group: str, topic: str, partitions: int, rec: Recorder, problems: Problems) -> dict[int, int]:
    """Once every member has closed, the group's committed offsets (OffsetFetch) are the last ones
    a member committed successfully (or later ones, if a commit a member saw fail was written)."""
    _, commits = rec.snapshot()
    last: dict[int, int] = {}
    for _t, _member, part, off in commits:
        last[part] = max(last.get(part, -1), off)
    have = committed_offsets(bootstrap, group, topic, partitions)
    for part in range(partitions):
        want = last.get(part)
        if want is None:
            continue
        got = have.get(part)
        if got is None or got < want or (got != want and not rec.commit_errors):
            problems.add("committed offsets", f"partition {part}: the group's committed offset is {got}, the last commit was {want}")
    return have


# --------------------------------------------------------------------------- topic helpers


def create_topic(admin: AdminClient, topic: str, partitions: int):
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)], operation_timeout=30)[topic].result(timeout=30)
    wait_until(
        lambda: (t := admin.list_topics(topic, timeout=10).topics.get(topic)) is not None
        and t.error is None
        and len(t.partitions) == partitions
        and all(x.leader >= 0 for x in t.partitions.values()),
        30,
        f"{topic} with {partitions} partitions and leaders in metadata",
    )


def delete_topic(admin: AdminClient, topic: str):
    try:
        admin.delete_topics([topic], operation_timeout=30)[topic].result(timeout=30)
        wait_until(lambda: topic not in admin.list_topics(timeout=10).topics, DELETE_TIMEOUT_S, f"{topic} to leave metadata")
    except KafkaException as e:
        if e.args and e.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return
        raise


def run_id() -> str:
    return uuid.uuid4().hex[:8]


def stop_all(members: list[Member], feeder: Feeder | None):
    """Cleanup after a test, passed or failed: stop the producer and every member."""
    if feeder is not None and feeder.thread.is_alive():
        feeder._stop.set()
        feeder.thread.join(30)
    for m in members:
        m.stop()
    for m in members:
        m.closed.wait(CLOSE_S)


def note(lines: list[str]):
    print("\n".join(lines))
    TERMINAL_NOTES.extend(lines)


# --------------------------------------------------------------------------- takeover


def takeover(bootstrap: str, label: str, group: str, make_member: Callable[[str, Recorder, str], Member], n_members: int, partitions: int):
    """The takeover scenario: n members settle, a producer sends, every member commits after
    each batch; one member processes a last batch without committing and closes; the others
    take its partitions over and continue from its committed offsets."""
    run = run_id()
    topic = f"compat-groups-{label}-{run}"
    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": f"compat-groups-admin-{run}"})
    rec = Recorder()
    members: list[Member] = []
    feeder = None
    create_topic(admin, topic, partitions)
    try:
        t0 = now()
        members = [make_member(f"m{i}", rec, topic) for i in range(n_members)]
        wait_for(
            members,
            lambda: settled(members, partitions, balanced=True),
            SETTLE_S,
            lambda: f"{n_members} members with balanced, disjoint assignments covering {partitions} partitions "
            f"(now: {describe_assignments(members)})",
        )
        settle_s = now() - t0
        before = {m.name: m.assignment for m in members}
        feeder = Feeder(bootstrap, topic, partitions, f"compat-groups-{label}-producer-{run}")
        wait_for(
            members,
            lambda: all(rec.commits_by(m.name) >= 3 for m in members),
            30,
            lambda: f"every member to process and commit records (commits: {[rec.commits_by(m.name) for m in members]})",
        )
        time.sleep(2)  # the assignment holds while records flow
        assert settled(members, partitions, balanced=True), f"assignments changed without a membership change: {describe_assignments(members)}"
        assert {m.name: m.assignment for m in members} == before, f"assignments changed: {before} -> {describe_assignments(members)}"

        leaver, survivors = members[0], members[1:]
        leaver_partitions = leaver.assignment
        leaver.stop(tail=True)
        leaver.wait_closed()
        assert leaver.error is None, f"member {leaver.name}: {leaver.error}"
        closed_at = leaver.closed_at
        wait_for(
            survivors,
            lambda: settled(survivors, partitions),
            TAKEOVER_S,
            lambda: f"the other members to take over {leaver.name}'s partitions {sorted(leaver_partitions)} "
            f"(now: {describe_assignments(survivors)})",
        )
        takeover_s = now() - closed_at
        time.sleep(3)  # records keep coming; the new owners keep up
        feeder.stop()
        wait_for(survivors, lambda: all_processed(rec, feeder), DRAIN_S, lambda: unprocessed(rec, feeder))
        after = {m.name: m.assignment for m in survivors}
        for m in survivors:
            m.stop()
        for m in survivors:
            m.wait_closed()
        assert not member_errors(members), member_errors(members)

        problems, stats = check_run(rec, feeder, leaver, leaver_partitions)
        check_committed(bootstrap, group, topic, partitions, rec, problems)
        note(
            [
                f"groups {label}: {n_members} members settled in {settle_s:.1f} s: {before}; "
                f"{leaver.name} left with {len(leaver.tail)} records uncommitted, taken over in {takeover_s:.1f} s: {after}",
                f"  {stats['delivered']} records produced, {stats['processed']} processed ({stats['duplicates']} duplicates), "
                f"{stats['commits']} partition commits ({stats['commit_errors']} failed); "
                f"new owners started at (committed, started, by): {stats['starts']}",
            ]
        )
        problems.raise_if_any(f"groups {label}")
    finally:
        stop_all(members, feeder)
        delete_topic(admin, topic)


def confluent_conf(bootstrap: str, group: str, client_id: str, protocol: str) -> dict:
    conf = {
        "bootstrap.servers": bootstrap,
        "client.id": client_id,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    if protocol != "classic":
        conf["group.protocol"] = protocol
    return conf


@pytest.mark.timeout(90)
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_confluent_group_takeover(bootstrap, protocol):
    run = run_id()
    group = f"compat-groups-confluent-{protocol}-{run}"
    client_id = f"compat-confluent-group-{protocol}-{run}"

    def make(name: str, rec: Recorder, topic: str) -> Member:
        conf = confluent_conf(bootstrap, group, client_id, protocol)
        return Member(name, lambda: ConfluentMember(conf, topic, rec, name), rec)

    takeover(bootstrap, f"confluent-{protocol}", group, make, n_members=3, partitions=6)


@pytest.mark.timeout(90)
def test_kafka_python_group_takeover(bootstrap):
    run = run_id()
    group = f"compat-groups-kafka-python-{run}"
    client_id = f"compat-kafka-python-group-{run}"

    def make(name: str, rec: Recorder, topic: str) -> Member:
        return Member(name, lambda: KafkaPythonMember(bootstrap, group, client_id, topic), rec)

    takeover(bootstrap, "kafka-python", group, make, n_members=2, partitions=4)


# --------------------------------------------------------------------------- kcat -G

KCAT = shutil.which("kcat")
KCAT_FORMAT = r"%p\t%o\t%s\n"


def kcat(bootstrap: str, client_id: str, *args: str, stdin: str | None = None, timeout: float = 60) -> str:
    cmd = [KCAT, "-b", bootstrap, "-X", f"client.id={client_id}", *args]
    r = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(cmd)} exited {r.returncode}: {r.stderr[-2000:]}"
    assert "ERROR" not in r.stderr and "failed" not in r.stderr.lower(), f"{' '.join(cmd)}: {r.stderr[-2000:]}"
    return r.stdout


def kcat_group_read(bootstrap: str, client_id: str, group: str, topic: str) -> list[tuple[int, int, str]]:
    """One `kcat -G` run: join the group, read until the end of every assigned partition, exit
    (committing the offsets it read: librdkafka's auto commit, also on close)."""
    out = kcat(bootstrap, client_id, "-G", group, "-X", "auto.offset.reset=earliest", "-e", "-q", "-f", KCAT_FORMAT, topic)
    got = []
    for line in out.splitlines():
        p, o, value = line.split("\t", 2)
        got.append((int(p), int(o), value))
    return got


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"compat-unused-{topic}", "client.id": f"compat-groups-offsets-{topic[-8:]}"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)}
    finally:
        c.close()


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed (compat/run.sh installs it)")
@pytest.mark.timeout(90)
def test_kcat_group_resumes(bootstrap):
    run = run_id()
    topic = f"compat-groups-kcat-{run}"
    group = f"compat-groups-kcat-{run}"
    partitions = 3
    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": f"compat-groups-admin-{run}"})
    create_topic(admin, topic, partitions)
    try:

        def produce(first: int, n: int):
            lines = "".join(f"key-{i % 20:02d}:kcat-{run}-{i:05d}\n" for i in range(first, first + n))
            kcat(bootstrap, f"compat-kcat-producer-{run}", "-P", "-t", topic, "-K", ":", stdin=lines)

        def check_read(got, first: int, n: int, what: str):
            values = sorted(v for _, _, v in got)
            want = [f"kcat-{run}-{i:05d}" for i in range(first, first + n)]
            assert values == want, f"{what}: read {len(got)} records, want seqs {first}..{first + n - 1}; first read {sorted(got)[:5]}"

        # 1. A new group, auto.offset.reset=earliest: everything, then the offsets are committed.
        produce(0, 300)
        ends = end_offsets(bootstrap, topic, partitions)
        assert sum(ends.values()) == 300 and all(ends.values()), f"end offsets {ends}"
        got = kcat_group_read(bootstrap, f"compat-kcat-group-{run}", group, topic)
        check_read(got, 0, 300, "first run in a new group")
        assert sorted((p, o) for p, o, _ in got) == sorted((p, o) for p in range(partitions) for o in range(ends[p])), "offsets read"
        assert committed_offsets(bootstrap, group, topic, partitions) == ends, "committed offsets after the first run"

        # 2. The same group again: only what was produced since (it resumes at the committed offsets).
        produce(300, 200)
        ends2 = end_offsets(bootstrap, topic, partitions)
        got = kcat_group_read(bootstrap, f"compat-kcat-group-{run}", group, topic)
        check_read(got, 300, 200, "second run in the group")
        assert all(o >= ends[p] for p, o, _ in got), "the second run read records the first run had committed"
        assert committed_offsets(bootstrap, group, topic, partitions) == ends2, "committed offsets after the second run"

        # 3. Nothing new: a third run reads nothing.
        got = kcat_group_read(bootstrap, f"compat-kcat-group-{run}", group, topic)
        assert got == [], f"a third run read {len(got)} records, e.g. {got[:3]}"
    finally:
        delete_topic(admin, topic)


# --------------------------------------------------------------------------- rebalance storm

STORM_S = 20  # members join and leave at random this long
STORM_MEMBERS = 10
STORM_SURVIVORS = 5
STORM_PARTITIONS = 12
STABLE_S = 6  # the survivors' assignments must stay the same this long (longer than a heartbeat interval)
CONVERGE_S = 45  # after the storm, the survivors must be stable within this


@pytest.mark.timeout(110)
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_confluent_rebalance_storm(bootstrap, protocol):
    seed = int(os.environ.get("SLUICE_STORM_SEED") or random.randrange(1 << 32))
    rng = random.Random(seed)
    run = run_id()
    topic = f"compat-groups-storm-{protocol}-{run}"
    group = f"compat-groups-storm-{protocol}-{run}"
    client_id = f"compat-confluent-group-storm-{protocol}-{run}"
    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": f"compat-groups-admin-{run}"})
    rec = Recorder()
    everyone: list[Member] = []
    feeder = None
    create_topic(admin, topic, STORM_PARTITIONS)
    print(f"storm: seed {seed} (SLUICE_STORM_SEED={seed} replays the schedule)")
    try:
        made = 0

        def make(slot: int) -> Member:
            nonlocal made
            name = f"s{slot}.{made}"
            made += 1
            conf = confluent_conf(bootstrap, group, client_id, protocol)
            m = Member(name, lambda: ConfluentMember(conf, topic, rec, name), rec)
            everyone.append(m)
            return m

        feeder = Feeder(bootstrap, topic, STORM_PARTITIONS, f"compat-groups-storm-{protocol}-producer-{run}")
        t0 = now()
        slots: list[Member | None] = [None] * STORM_MEMBERS
        next_at = [t0 + rng.uniform(0, 2) for _ in range(STORM_MEMBERS)]
        joins = leaves = 0
        while now() < t0 + STORM_S:
            for i in range(STORM_MEMBERS):
                if now() < next_at[i]:
                    continue
                if slots[i] is None:
                    slots[i] = make(i)
                    joins += 1
                    next_at[i] = now() + rng.uniform(1, 4)
                else:
                    slots[i].stop(tail=rng.random() < 0.5)  # half of them leave an uncommitted tail
                    slots[i] = None
                    leaves += 1
                    next_at[i] = now() + rng.uniform(0, 1)
            assert not member_errors(everyone), member_errors(everyone)
            time.sleep(0.05)
        # The storm ends: the first STORM_SURVIVORS slots keep (or get) a member, the others leave.
        for i in range(STORM_MEMBERS):
            if i < STORM_SURVIVORS and slots[i] is None:
                slots[i] = make(i)
                joins += 1
            elif i >= STORM_SURVIVORS and slots[i] is not None:
                slots[i].stop()
                slots[i] = None
                leaves += 1
        storm_end = now()
        survivors = [m for m in slots if m is not None]
        for m in everyone:
            if m not in survivors:
                m.wait_closed()
        closed_s = now() - storm_end

        # Convergence: disjoint, balanced, covering, and unchanged for STABLE_S.
        stable_since, last = None, None
        deadline = now() + CONVERGE_S
        while True:
            assert not member_errors(everyone), member_errors(everyone)
            view = tuple(m.assignment for m in survivors)
            if settled(survivors, STORM_PARTITIONS, balanced=True):
                if view != last:
                    stable_since, last = now(), view
                elif now() - stable_since >= STABLE_S:
                    break
            else:
                stable_since, last = None, None
            assert now() < deadline, (
                f"the {len(survivors)} survivors did not converge within {CONVERGE_S} s of the storm's end: "
                f"{describe_assignments(survivors)}"
            )
            time.sleep(0.1)
        converged_s = stable_since - storm_end
        final = {m.name: sorted(m.assignment) for m in survivors}
        time.sleep(3)  # consuming continues
        feeder.stop()
        wait_for(everyone, lambda: all_processed(rec, feeder), DRAIN_S, lambda: unprocessed(rec, feeder))
        assert tuple(m.assignment for m in survivors) == last, f"assignments changed after converging: {describe_assignments(survivors)}"
        for m in survivors:
            m.stop()
        for m in survivors:
            m.wait_closed()
        assert not member_errors(everyone), member_errors(everyone)

        problems, stats = check_run(rec, feeder)
        check_committed(bootstrap, group, topic, STORM_PARTITIONS, rec, problems)
        rebalances = len(rec.assignments)
        note(
            [
                f"groups storm {protocol} (seed {seed}): {STORM_MEMBERS} slots, {joins} joins and {leaves} leaves in {STORM_S} s, "
                f"{rebalances} assignment changes seen; leavers closed {closed_s:.1f} s after the storm, "
                f"{len(survivors)} survivors stable {converged_s:.1f} s after it: {final}",
                f"  {stats['delivered']} records produced, {stats['processed']} processed ({stats['duplicates']} duplicates), "
                f"{stats['commits']} partition commits ({stats['commit_errors']} failed)",
            ]
        )
        problems.raise_if_any(f"groups storm {protocol} (seed {seed})")
    finally:
        stop_all(everyone, feeder)
        delete_topic(admin, topic)
