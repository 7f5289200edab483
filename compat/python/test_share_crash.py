"""Share groups (KIP-932) across crashes (Sluice only): confluent-kafka 2.16's ShareConsumer
against a broker killed with SIGKILL, and a consumer killed with SIGKILL.

- test_broker_sigkill_mid_consumption: the test owns its broker (`sluice serve` on a fixed free
  port, restarted on the same port and data directory, like test_groups_crash.py). 3,000
  records on 3 partitions, produced up front (idempotent, acks=all, every delivery confirmed).
  Two ShareConsumers in one share group (`share.acknowledgement.mode=explicit`,
  `max.poll.records=20`), each in a thread of its own: poll, record each record (partition,
  offset, delivery count), "process" the batch (10 ms a record, so that consuming takes about
  15 s), acknowledge each record ACCEPT, then `commit_sync()`; the records of the partitions its
  answer reports without an error are *confirmed*. The broker is killed twice while they
  consume, at moments drawn from a seed the test prints (SLUICE_SHARE_CRASH_SEED=N replays the
  schedule): each kill once a drawn share of the records has been processed (10-25 %, then
  35-50 %) and 0-0.3 s more, one of them (drawn) then 0-5 ms after a consumer next starts a
  commit_sync; the broker stays down 0.5-2 s each time. The consumers must come back by
  themselves (their errors during the outages are logged, not fatal): after each restart, each
  of them confirms a commit again within 45 s. Within 90 s of the last restart every record has
  been processed and the group's start offsets (`sluice group describe --json`:
  DescribeShareGroupOffsets) have reached the log end of every partition, i.e. whatever a crash
  cut off has been delivered again and accepted.
  Then: (a) every produced record was processed at least once; (b) no record was processed again
  once a commit that carried its ACCEPT had returned success (by either consumer); (c) the
  duplicates are counted and reported: they may only be records whose ACCEPT had not been
  confirmed. Delivery counts are reported, not checked: a record acquired since its partition's
  last stored change comes back after a broker crash with the count of that change
  (docs/share-groups.md, Durability), so 1 again as often as 2. With the consumers closed, one
  more SIGKILL and restart; a fresh consumer of the group must then get, as the first record of
  each partition, a marker produced after the restart: nothing acknowledged came back.
- test_consumer_sigkill_hands_its_records_over: group configs `share.record.lock.duration.ms=60000`
  and `share.auto.offset.reset=earliest`, one partition (so both members read it; with more
  partitions than members the simple assignor would give the dead member partitions of its own
  until its session timed out). A child process (a ShareConsumer, explicit acknowledgement,
  `max.poll.records=100`) polls once, prints the records it acquired as JSON and sleeps without
  acknowledging; it is killed with SIGKILL (by its PID). Its connections close with it, which
  ends its share session: a second consumer must get exactly those records with delivery count
  2, after the kill and within 20 s of it (long before their 60 s locks expire), and every other
  record once with delivery count 1; a marker produced afterwards then comes with nothing
  before it. Runs on the session's broker.

Both are skipped with --target kafka-baseline and --bootstrap, and in cluster mode (which does
not serve share groups). Logs: compat/.logs/sluice-share-crash.log (the first test's broker, all
its starts, a line at each kill), share-crash-deliveries.txt (every delivery and confirmed
commit of the first test), share-crash-child.err (the second test's child).
"""

from __future__ import annotations

import json
import os
import random
import selectors
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import pytest
from confluent_kafka import AcknowledgeType, IllegalStateException, KafkaException, ShareConsumer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from compat_util import Problems
from conftest import LOG_DIR, TERMINAL_NOTES, SluiceBroker, _die_with_parent, cluster_mode, free_ports
from test_share import ADMIN_S, Share

now = time.monotonic

# --- test_broker_sigkill_mid_consumption
PARTITIONS = 3
N_RECORDS = 3000
MAX_POLL_RECORDS = 20  # small batches: many commits, so a kill often meets one in flight
# Processing time per record (the worker waits this long per record of a batch before it
# acknowledges it): without it two consumers finish 3,000 records in well under a second, and
# with it they take about 15 s, long enough for two kills and the recoveries in between.
PROCESS_S = 0.01
# Kill i comes when this share of the records has been processed (drawn from the seed); with
# two consumers on three partitions both still have records left at the second kill.
KILL_AT = ((0.10, 0.25), (0.35, 0.50))
KILL_DELAY_S = (0.0, 0.3)  # then this long more; or, for one of the two kills (which one: the seed),
IN_COMMIT_DELAY_S = (0.0, 0.005)  # this long after a consumer next calls commit_sync
COMMIT_WAIT_S = 5  # (if no consumer calls commit_sync within this, the kill comes anyway)
DOWN_S = (0.5, 2.0)  # the broker stays down this long
RESTART_S = 15  # a restarted broker must listen again within this (retrying a busy port)
FIRST_COMMITS_S = 30  # both consumers must confirm a commit within this of starting
KILL_PROGRESS_S = 45  # the share of records at which a kill comes must be processed within this
RECOVER_S = 45  # after a restart, each consumer must confirm a commit again within this
DRAIN_S = 90  # after the last restart, everything processed and acknowledged within this
CLOSE_S = 30  # a consumer must have closed within this of being told to
MARKER_S = 30  # after the final restart, the fresh consumer must get the markers within this
COMMIT_TIMEOUT_S = 10.0  # commit_sync's own bound
POLL_S = 0.5

# --- test_consumer_sigkill_hands_its_records_over
LOCK_MS = 60000  # share.record.lock.duration.ms of the group: far longer than the handover may take
HANDOVER_S = 20.0  # the killed child's records must be delivered again within this of the kill
HANDOVER_RECORDS = 300
CHILD_MAX_POLL = 100
CHILD_READY_S = 30  # the child must print its records within this

# The child of the second test: one ShareConsumer, one poll that returns records, their
# coordinates as one JSON line on stdout, then sleep without acknowledging until killed.
CHILD = r"""
import json, sys, time
from confluent_kafka import ShareConsumer
bootstrap, group, topic, client_id, max_poll = sys.argv[1:6]
started = time.monotonic()
c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id,
                   "share.acknowledgement.mode": "explicit", "max.poll.records": int(max_poll)})
c.subscribe([topic])
deadline = started + 30
records = []
while not records:
    if time.monotonic() > deadline:
        sys.exit("no records within 30 s")
    for m in c.poll(0.5):
        if m.error():
            print(f"poll error: {m.error()}", file=sys.stderr, flush=True)
        else:
            records.append([m.partition(), m.offset(), m.delivery_count()])
acquired = time.monotonic()
print(json.dumps({"started": started, "acquired": acquired, "records": records}), flush=True)
time.sleep(600)
"""


@pytest.fixture(autouse=True)
def _sluice_single_broker_only(request):
    if request.config.getoption("--bootstrap"):
        pytest.skip("the share crash tests start and kill processes of their own against `sluice serve`; not with --bootstrap")
    if request.config.getoption("--target") != "sluice":
        pytest.skip(
            "the share crash tests are Sluice only (they kill and restart `sluice serve`; Kafka refuses "
            "share.record.lock.duration.ms below 15000)"
        )
    if cluster_mode():
        pytest.skip("cluster mode does not serve share groups yet")


def note(lines: list[str]):
    print("\n".join(lines))
    TERMINAL_NOTES.extend(lines)


def set_group_configs(s: Share, configs: dict[str, str]):
    """IncrementalAlterConfigs SET on the share group's GROUP resource; waits until
    DescribeConfigs shows every value."""
    res = ConfigResource(
        ResourceType.GROUP,
        s.group,
        incremental_configs=[ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()],
    )
    s.admin.incremental_alter_configs([res])[res].result(30)
    deadline = now() + ADMIN_S
    while not all(s.group_config_shows(k, v) for k, v in configs.items()):
        assert now() < deadline, f"DescribeConfigs of group {s.group} did not show {configs} within {ADMIN_S} s"
        time.sleep(0.2)


def restart(broker: SluiceBroker) -> int:
    """Start the broker again on its address and data directory; retry while the port is busy."""
    deadline = now() + RESTART_S
    attempts = 0
    while True:
        attempts += 1
        try:
            broker.start()
            return attempts
        except RuntimeError:
            if now() > deadline:
                raise
            time.sleep(0.2)


# --------------------------------------------------------------------------- recording


@dataclass
class Delivery:
    consumer: str
    partition: int
    offset: int
    delivery_count: int
    poll_started: float  # time.monotonic() before the poll that returned it
    polled: float  # ... and when it returned


@dataclass
class Ledger:
    """What the consumers of the first test did, with times (time.monotonic())."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    deliveries: list[Delivery] = field(default_factory=list)
    # (partition, offset) -> (time the commit_sync that carried its ACCEPT returned success, consumer)
    confirmed: dict[tuple[int, int], tuple[float, str]] = field(default_factory=dict)
    commits: list[tuple[float, str, int]] = field(default_factory=list)  # (t, consumer, records confirmed)
    commit_failures: list[tuple[float, str, str]] = field(default_factory=list)
    # (partition, offset) of records whose ACCEPT was in a commit that failed or raised
    unconfirmed_acks: set[tuple[int, int]] = field(default_factory=set)
    client_errors: list[tuple[float, str, str]] = field(default_factory=list)
    unique: set[tuple[int, int]] = field(default_factory=set)
    commit_started: threading.Event = field(default_factory=threading.Event)  # set as a commit_sync starts

    def polled(self, deliveries: list[Delivery]):
        with self.lock:
            self.deliveries.extend(deliveries)
            self.unique.update((d.partition, d.offset) for d in deliveries)

    def committed(self, consumer: str, t: float, ok: list[tuple[int, int]], failed: dict[tuple[int, int], str]):
        with self.lock:
            for key in ok:
                self.confirmed.setdefault(key, (t, consumer))
            self.commits.append((t, consumer, len(ok)))
            self.unconfirmed_acks.update(failed)
            for err in sorted(set(failed.values())):
                self.commit_failures.append((t, consumer, err))

    def commit_raised(self, consumer: str, keys: list[tuple[int, int]], error: str):
        with self.lock:
            self.unconfirmed_acks.update(keys)
            self.commit_failures.append((now(), consumer, error))

    def client_error(self, consumer: str, error: str):
        with self.lock:
            self.client_errors.append((now(), consumer, error))

    def processed(self) -> int:
        with self.lock:
            return len(self.unique)

    def unprocessed(self, produced) -> list[tuple[int, int]]:
        with self.lock:
            return sorted(set(produced) - self.unique)

    def confirmed_commits_since(self, consumer: str, since: float) -> int:
        with self.lock:
            return sum(1 for t, c, n in self.commits if c == consumer and t > since and n > 0)


class Worker:
    """One ShareConsumer in a thread of its own: poll, record, ACCEPT each record, commit_sync,
    until told to stop; then close(). Client errors (the broker down) are recorded, not fatal;
    an exception out of the loop is (self.error)."""

    def __init__(self, name: str, conf: dict, topic: str, ledger: Ledger):
        self.name = name
        self.conf = conf
        self.topic = topic
        self.ledger = ledger
        self.error: str | None = None
        self._stop = threading.Event()
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"share-{name}", daemon=True)
        self.thread.start()

    def _run(self):
        c = None
        try:
            c = ShareConsumer(self.conf)
            c.subscribe([self.topic])
            while not self._stop.is_set():
                started = now()
                try:
                    msgs = c.poll(POLL_S)
                except (KafkaException, IllegalStateException) as e:
                    self.ledger.client_error(self.name, f"poll: {e!r}")
                    self._stop.wait(0.1)
                    continue
                polled = now()
                batch = []
                for m in msgs:
                    if m.error():
                        self.ledger.client_error(self.name, str(m.error()))
                        continue
                    batch.append(Delivery(self.name, m.partition(), m.offset(), m.delivery_count(), started, polled))
                if not batch:
                    continue
                self.ledger.polled(batch)
                self._stop.wait(len(batch) * PROCESS_S)  # "processing"
                keys = []  # the records acknowledged, to be confirmed by the commit
                for m in msgs:
                    if m.error():
                        continue
                    try:
                        c.acknowledge(m, AcknowledgeType.ACCEPT)
                        keys.append((m.partition(), m.offset()))
                    except (KafkaException, IllegalStateException) as e:
                        self.ledger.client_error(self.name, f"acknowledge {m.partition()}@{m.offset()}: {e!r}")
                if not keys:
                    continue
                self.ledger.commit_started.set()
                try:
                    result = c.commit_sync(COMMIT_TIMEOUT_S)
                except KafkaException as e:
                    self.ledger.commit_raised(self.name, keys, f"commit_sync raised: {e}")
                    continue
                done = now()
                answer = {tp.partition: err for tp, err in (result or {}).items() if tp.topic == self.topic}
                ok = [k for k in keys if k[0] in answer and answer[k[0]] is None]
                failed = {
                    k: str(answer[k[0]]) if k[0] in answer else "partition missing from commit_sync's answer"
                    for k in keys
                    if not (k[0] in answer and answer[k[0]] is None)
                }
                self.ledger.committed(self.name, done, ok, failed)
        except Exception:
            self.error = traceback.format_exc()
        finally:
            if c is not None:
                try:
                    c.close()
                except Exception:
                    self.error = (self.error or "") + "close: " + traceback.format_exc()
            self.closed.set()

    def stop(self):
        self._stop.set()

    def wait_closed(self):
        assert self.closed.wait(CLOSE_S), f"consumer {self.name} did not close within {CLOSE_S} s"
        self.thread.join(5)


def wait_for(workers: list[Worker], predicate, timeout_s: float, what) -> float:
    """Poll predicate() until it is truthy (fail at once if a consumer thread failed, and with
    what() after timeout_s); returns how long it took."""
    start = now()
    deadline = start + timeout_s
    while True:
        errors = "\n".join(f"consumer {w.name}: {w.error}" for w in workers if w.error)
        if errors:
            raise AssertionError(errors)
        if predicate():
            return now() - start
        if now() >= deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what()}")
        time.sleep(0.05)


def start_offsets(binary, bootstrap: str, group: str, topic: str) -> dict[int, tuple[int, int]] | None:
    """partition -> (start offset, log end offset) from `sluice group describe --json`
    (DescribeShareGroupOffsets and ListOffsets); None when it fails (e.g. the broker is down)."""
    try:
        r = subprocess.run(
            [str(binary), "group", "describe", group, "--bootstrap", bootstrap, "--json"],
            capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL,
        )
        if r.returncode != 0:
            return None
        doc = json.loads(r.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None
    return {o["partition"]: (o["start_offset"], o["log_end_offset"]) for o in doc.get("offsets", []) if o.get("topic") == topic}


def write_deliveries(ledger: Ledger, produced: dict[tuple[int, int], str], t0: float, events: list[tuple[float, str]]):
    """Every delivery and confirmed commit, in time order, to compat/.logs/share-crash-deliveries.txt."""
    rows = [(t, f"kill/restart: {what}") for t, what in events]
    rows += [
        (d.polled, f"delivered {d.consumer} {d.partition}@{d.offset} count {d.delivery_count} "
                   f"(poll from {d.poll_started - t0:.3f})")
        for d in ledger.deliveries
    ]
    rows += [(t, f"confirmed {c} {p}@{o}") for (p, o), (t, c) in ledger.confirmed.items()]
    rows += [(t, f"commit failed {c}: {e}") for t, c, e in ledger.commit_failures]
    rows += [(t, f"client error {c}: {e}") for t, c, e in ledger.client_errors]
    with open(LOG_DIR / "share-crash-deliveries.txt", "w") as f:
        f.write(f"# {len(produced)} records produced; times in s since the consumers started\n")
        for t, line in sorted(rows, key=lambda r: r[0]):
            f.write(f"{t - t0:9.3f} {line}\n")


def check_consumption(ledger: Ledger, produced: dict[tuple[int, int], str]) -> tuple[Problems, dict]:
    """(a) at least once, (b) nothing confirmed processed again, (c) duplicates counted."""
    p = Problems()
    by_key: dict[tuple[int, int], list[Delivery]] = defaultdict(list)
    for d in ledger.deliveries:
        by_key[(d.partition, d.offset)].append(d)
    # (a)
    missing = sorted(set(produced) - set(by_key))
    if missing:
        p.add("produced but never processed", f"{missing[:5]} ({len(missing)} records)")
    unknown = sorted(set(by_key) - set(produced))
    if unknown:
        p.add("processed but not produced", f"{unknown[:5]} ({len(unknown)} records)")
    # (b) a delivery whose poll returned after a commit carrying the record's ACCEPT had returned success
    for key, (t, c) in sorted(ledger.confirmed.items()):
        for d in by_key[key]:
            if d.polled > t:
                p.add(
                    "processed again after its ACCEPT was confirmed",
                    f"{key[0]}@{key[1]}: confirmed by {c}'s commit_sync at +{t - ledger.deliveries[0].poll_started:.3f} s, "
                    f"delivered again to {d.consumer} (count {d.delivery_count}) by a poll from "
                    f"+{d.poll_started - ledger.deliveries[0].poll_started:.3f} s",
                )
    # (c) duplicates: every delivery after a record's first
    duplicates = sum(len(v) - 1 for v in by_key.values())
    dup_keys = [k for k, v in by_key.items() if len(v) > 1]
    stats = dict(
        deliveries=len(ledger.deliveries),
        duplicates=duplicates,
        duplicated_records=len(dup_keys),
        dup_after_failed_commit=sum(1 for k in dup_keys if k in ledger.unconfirmed_acks),
        confirmed=len(ledger.confirmed),
        counts=dict(sorted(Counter(d.delivery_count for d in ledger.deliveries).items())),
        commits=len(ledger.commits),
        commit_failures=len(ledger.commit_failures),
        client_errors=len(ledger.client_errors),
    )
    return p, stats


# --------------------------------------------------------------------------- broker crash


@pytest.mark.timeout(170)
def test_broker_sigkill_mid_consumption():
    seed = int(os.environ.get("SLUICE_SHARE_CRASH_SEED") or random.randrange(1 << 32))
    print(f"share crash test: seed {seed} (SLUICE_SHARE_CRASH_SEED={seed} replays the kill schedule)")
    rng = random.Random(seed)
    kill_at = [rng.uniform(*r) for r in KILL_AT]
    kill_delay = [rng.uniform(*KILL_DELAY_S) for _ in KILL_AT]
    in_commit = rng.randrange(len(KILL_AT))  # this kill comes just after a commit_sync started
    commit_delay = rng.uniform(*IN_COMMIT_DELAY_S)
    down = [rng.uniform(*DOWN_S) for _ in range(len(KILL_AT) + 1)]
    port = free_ports(1)[0]
    broker = SluiceBroker(kafka_addr=f"127.0.0.1:{port}", log_name="sluice-share-crash.log")
    workers: list[Worker] = []
    kills: list[dict] = []
    events: list[tuple[float, str]] = []
    ledger = Ledger()
    produced: dict[tuple[int, int], str] = {}
    t0 = now()
    try:
        broker.start()
        binary = SluiceBroker.binary()  # (for `sluice group describe`)
        s = Share(broker.bootstrap, "share-crash", PARTITIONS)
        set_group_configs(s, {"share.auto.offset.reset": "earliest"})
        produced = s.produce(range(N_RECORDS))
        assert len(produced) == N_RECORDS, f"{len(produced)} of {N_RECORDS} deliveries confirmed"
        ends = Counter(part for part, _ in produced)

        t0 = now()
        for name in ("c1", "c2"):
            conf = {
                "bootstrap.servers": broker.bootstrap,
                "group.id": s.group,
                "client.id": f"compat-confluent-share-crash-{name}-{s.run}",
                "share.acknowledgement.mode": "explicit",
                "max.poll.records": MAX_POLL_RECORDS,
            }
            workers.append(Worker(name, conf, s.topic, ledger))
        wait_for(
            workers,
            lambda: all(ledger.confirmed_commits_since(w.name, 0) for w in workers),
            FIRST_COMMITS_S,
            lambda: f"both consumers to confirm a commit (processed {ledger.processed()}, "
            f"client errors {ledger.client_errors[-3:]})",
        )
        for i, share in enumerate(kill_at):
            target = int(share * N_RECORDS)
            wait_for(workers, lambda: ledger.processed() >= target, KILL_PROGRESS_S,
                     lambda: f"{target} records processed before kill {i + 1} (have {ledger.processed()})")
            time.sleep(kill_delay[i])
            if i == in_commit:
                ledger.commit_started.clear()
                ledger.commit_started.wait(COMMIT_WAIT_S)
                time.sleep(commit_delay)
            at = ledger.processed()
            killed = now()
            broker.kill()
            how = f"{commit_delay * 1000:.1f} ms after a commit_sync started" if i == in_commit else "at a random moment"
            events.append((killed, f"kill {i + 1} at {at} records processed, {how}"))
            time.sleep(down[i])
            attempts = restart(broker)
            ready = now()
            events.append((ready, f"restart {i + 1} listening"))
            took = wait_for(
                workers,
                lambda: all(ledger.confirmed_commits_since(w.name, ready) for w in workers),
                RECOVER_S,
                lambda: f"each consumer to confirm a commit again after restart {i + 1} (confirmed commits since: "
                f"{ {w.name: ledger.confirmed_commits_since(w.name, ready) for w in workers} }; processed "
                f"{ledger.processed()}; last client errors {ledger.client_errors[-3:]})",
            )
            kills.append(dict(n=i + 1, at=at, how=how, down=ready - killed, attempts=attempts, recovered=took))
        last_restart = ready

        # Everything processed, and the group's start offsets at the log end of every partition
        # (nothing in flight any more: what a crash cut off has been delivered again and accepted).
        seen: dict = {}

        def drained() -> bool:
            if ledger.processed() < N_RECORDS:
                return False
            seen["offsets"] = start_offsets(binary, broker.bootstrap, s.group, s.topic)
            offsets = seen["offsets"] or {}
            return all(offsets.get(part, (None, None))[0] == ends[part] for part in range(PARTITIONS))

        wait_for(
            workers,
            drained,
            DRAIN_S - (now() - last_restart),
            lambda: f"every record processed ({ledger.processed()} of {N_RECORDS}; never processed: "
            f"{ledger.unprocessed(produced)[:5]}) and the start offsets at the log "
            f"ends {dict(ends)} within {DRAIN_S} s of the last restart (sluice group describe: partition -> (start, end) "
            f"{seen.get('offsets')})",
        )
        drained_after = now() - last_restart
        for w in workers:
            w.stop()
        for w in workers:
            w.wait_closed()
        errors = "\n".join(f"consumer {w.name}: {w.error}" for w in workers if w.error)
        assert not errors, errors

        problems, stats = check_consumption(ledger, produced)
        write_deliveries(ledger, produced, t0, events)

        # One more crash with no consumer: a fresh consumer of the group must find nothing of it
        # left, only the markers produced after the restart.
        broker.kill()
        events.append((now(), "kill 3 (consumers closed)"))
        time.sleep(down[-1])
        restart(broker)
        markers = s.markers("after-crash")
        first: dict[int, tuple[int, str]] = {}
        fresh: list[tuple[int, int, int]] = []
        c = ShareConsumer({
            "bootstrap.servers": broker.bootstrap, "group.id": s.group,
            "client.id": f"compat-confluent-share-crash-fresh-{s.run}", "share.acknowledgement.mode": "explicit",
        })
        fresh_errors: list[str] = []
        try:
            c.subscribe([s.topic])
            deadline = now() + MARKER_S
            while len(first) < PARTITIONS and now() < deadline:
                msgs = c.poll(POLL_S)
                for m in msgs:
                    if m.error():
                        fresh_errors.append(str(m.error()))
                        continue
                    fresh.append((m.partition(), m.offset(), m.delivery_count()))
                    first.setdefault(m.partition(), (m.offset(), m.value().decode()))
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
                if len(msgs):
                    c.commit_sync(COMMIT_TIMEOUT_S)
        finally:
            c.close()
        marker_at = {part: off for part, off in markers}
        for part in range(PARTITIONS):
            if part not in first:
                problems.add(
                    f"the fresh consumer got nothing of the partition within {MARKER_S} s of the final restart",
                    f"partition {part} (its marker at offset {marker_at[part]}; the fresh consumer got "
                    f"{len(fresh)} records, e.g. {fresh[:5]}; errors {fresh_errors[:3]})",
                )
                continue
            off, value = first[part]
            if off != marker_at[part]:
                confirmed = "its ACCEPT had been confirmed" if (part, off) in ledger.confirmed else "never confirmed"
                problems.add(
                    "came back after the final crash (before the marker)",
                    f"{part}@{off} ({value}; {confirmed}); the marker is at {part}@{marker_at[part]}; "
                    f"{sum(1 for pp, o, _ in fresh if pp == part and o < marker_at[part])} records of the partition before it",
                )
        again = len(problems.items.get("processed again after its ACCEPT was confirmed", []))
        note([
            f"share crash (seed {seed}): {N_RECORDS} records, 2 explicit-ack ShareConsumers, "
            + "; ".join(
                f"kill {k['n']} at {k['at']} processed ({k['how']}), listening after {k['down']:.1f} s"
                + (f" ({k['attempts']} attempts)" if k["attempts"] > 1 else "")
                + f", both confirming commits {k['recovered']:.1f} s later"
                for k in kills
            )
            + f"; all acknowledged {drained_after:.1f} s after the last restart",
            f"  {stats['deliveries']} deliveries, {stats['duplicates']} duplicates ({stats['duplicated_records']} records "
            f"delivered more than once, {stats['dup_after_failed_commit']} of them after a commit_sync carrying their ACCEPT "
            f"failed or raised; {again} after a confirmed one), {stats['confirmed']} records confirmed in "
            f"{stats['commits']} commits, "
            f"{stats['commit_failures']} commit failures, {stats['client_errors']} client errors; delivery counts "
            f"{stats['counts']}; after kill 3 the fresh consumer's first records: {sorted(first.items())}",
        ])
        problems.raise_if_any(f"share crash (seed {seed})")
    except BaseException:
        TERMINAL_NOTES.append(f"share crash test failed (seed {seed}; SLUICE_SHARE_CRASH_SEED={seed} replays it); "
                              f"kills so far: {kills}; deliveries in {LOG_DIR / 'share-crash-deliveries.txt'}")
        if ledger.deliveries:
            write_deliveries(ledger, produced, t0, events)
        raise
    finally:
        for w in workers:
            w.stop()
        for w in workers:
            w.closed.wait(CLOSE_S)
        broker.stop()


# --------------------------------------------------------------------------- consumer crash


def read_line(proc: subprocess.Popen, timeout_s: float) -> str | None:
    """One line of the child's stdout within timeout_s (None: none, or it exited)."""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        deadline = now() + timeout_s
        while now() < deadline:
            if sel.select(timeout=min(0.5, max(0.0, deadline - now()))):
                line = proc.stdout.readline()
                return line or None
            if proc.poll() is not None:
                return None
        return None
    finally:
        sel.close()


def test_consumer_sigkill_hands_its_records_over(request):
    # (the session's broker, asked for only now: not started just to be skipped)
    s = Share(request.getfixturevalue("bootstrap"), "share-handover", 1)
    try:
        handover(s)
    finally:
        s.close()


def handover(s: Share):
    set_group_configs(s, {"share.record.lock.duration.ms": str(LOCK_MS), "share.auto.offset.reset": "earliest"})
    produced = s.produce(range(HANDOVER_RECORDS))
    err_path = LOG_DIR / "share-crash-child.err"
    with open(err_path, "w") as err:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, s.bootstrap, s.group, s.topic, f"compat-confluent-share-child-{s.run}",
             str(CHILD_MAX_POLL)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, text=True, preexec_fn=_die_with_parent,
        )
    try:
        line = read_line(child, CHILD_READY_S)
        assert line, (f"the child consumer printed no records within {CHILD_READY_S} s (exit status {child.poll()}); "
                      f"its stderr:\n{err_path.read_text()[-2000:]}")
        got = json.loads(line)
        child.send_signal(signal.SIGKILL)
        killed = now()
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
    started, acquired = got["started"], got["acquired"]
    held = {(p, o): dc for p, o, dc in got["records"]}
    assert held and all(dc == 1 for dc in held.values()), f"the child's records, first delivery each: {got['records'][:10]}"
    assert set(held) <= set(produced), f"the child got records nobody produced: {sorted(set(held) - set(produced))[:5]}"

    # The second consumer: everything the child did not take at once (count 1), the child's
    # records once their locks expired (count 2); then a marker with nothing before it.
    latest = killed + HANDOVER_S
    p = Problems()
    deliveries: list[tuple[int, int, int, float]] = []  # (partition, offset, count, poll returned)
    markers: dict = {}
    c = ShareConsumer({"bootstrap.servers": s.bootstrap, "group.id": s.group,
                       "client.id": f"compat-confluent-share-second-{s.run}", "share.acknowledgement.mode": "explicit"})
    try:
        c.subscribe([s.topic])
        got_keys: set = set()
        while not (markers and set(markers) <= got_keys):
            if not markers and set(produced) <= got_keys:
                markers = s.markers("after-handover")
            assert now() < latest + (MARKER_S if markers else 0), (
                f"the second consumer did not get every record within {HANDOVER_S:.0f} s of the child's kill "
                f"(missing {sorted(set(produced) - got_keys)[:10]}, {len(set(produced) - got_keys)} records)"
                if not markers else f"the marker did not come within {MARKER_S} s"
            )
            msgs = c.poll(POLL_S)
            polled = now()
            for m in msgs:
                assert not m.error(), f"ShareConsumer error: {m.error()}"
                deliveries.append((m.partition(), m.offset(), m.delivery_count(), polled))
                got_keys.add((m.partition(), m.offset()))
                c.acknowledge(m, AcknowledgeType.ACCEPT)
            if len(msgs):
                result = c.commit_sync(COMMIT_TIMEOUT_S)
                for tp, err in (result or {}).items():
                    if err is not None:
                        p.add("commit_sync", f"{tp}: {err}")
    finally:
        c.close()

    counts = Counter((part, off) for part, off, _, _ in deliveries)
    dups = sorted(k for k, n in counts.items() if n > 1)
    if dups:
        p.add("delivered more than once to the second consumer", f"{dups[:5]} ({len(dups)} records)")
    redelivered = [(part, off, dc, t) for part, off, dc, t in deliveries if (part, off) in held]
    others = [(part, off, dc, t) for part, off, dc, t in deliveries if (part, off) not in held and (part, off) not in markers]
    missing = sorted(set(held) - {(part, off) for part, off, _, _ in redelivered})
    if missing:
        p.add("the child's records not delivered again", f"{missing[:5]} ({len(missing)} of {len(held)})")
    wrong = [(part, off, dc) for part, off, dc, _ in redelivered if dc != 2]
    if wrong:
        p.add("the child's records not with delivery count 2", f"{wrong[:5]} ({len(wrong)})")
    wrong = [(part, off, dc) for part, off, dc, _ in others if dc != 1]
    if wrong:
        p.add("records the child never had, not with delivery count 1", f"{wrong[:5]} ({len(wrong)})")
    early = [(part, off, round(t - killed, 2)) for part, off, _, t in redelivered if t < killed]
    if early:
        p.add("the child's records delivered again while the child still held them",
              f"{early[:5]} (s after the kill)")
    late = [(part, off, round(t - killed, 2)) for part, off, _, t in redelivered if t > latest]
    if late:
        p.add(f"the child's records delivered again more than {HANDOVER_S:.0f} s after its kill "
              f"(their locks last {LOCK_MS} ms: its closed connection should have released them)",
              f"{late[:5]} (s after the kill)")
    times = [t for _, _, _, t in redelivered]
    note([
        f"share consumer SIGKILL: the child acquired {len(held)} of {HANDOVER_RECORDS} records "
        f"{acquired - started:.2f} s after it started and was killed "
        f"{killed - acquired:.2f} s later; the second consumer got them again (count 2) "
        + (f"{min(times) - killed:.2f}-{max(times) - killed:.2f} s after the kill "
           f"(lock {LOCK_MS} ms)" if times else "never")
        + f", and {len(others)} other records with count 1",
    ])
    p.raise_if_any("share consumer SIGKILL")
