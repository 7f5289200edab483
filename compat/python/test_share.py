"""Share groups (KIP-932, Kafka "queues") with Kafka's own CLI tools and confluent-kafka's ShareConsumer.

The Java KafkaShareConsumer and Admin client are tested in compat/java (ShareGroupsTest, run by
test_java.py). Here:

- Kafka's CLI tools from the kafka-tools 4.3.1 jar, run as bin/<tool>.sh runs them, on the same
  jars as test_security.py (security_util.kafka_lib(): ../shared/kafka-baseline's, fetched into
  compat/.cache on first use, or compat/kafka-tools/pom.xml's):
  kafka-console-share-consumer (org.apache.kafka.tools.consumer.ConsoleShareConsumer),
  kafka-share-groups (org.apache.kafka.tools.consumer.group.ShareGroupCommand) and kafka-configs
  (kafka.admin.ConfigCommand, `--entity-type groups`).
- confluent-kafka 2.16's ShareConsumer (librdkafka 2.16, "Preview"), implicit and explicit
  acknowledgement.
- kafka-python 3.0.12 has no share consumer; its `list_groups(types_filter=['share'])` is checked.

A share group starts at the latest offset by default, so every test first sets the group config
`share.auto.offset.reset=earliest` (IncrementalAlterConfigs on a GROUP resource: kafka-configs
for the CLI tests, confluent-kafka's AdminClient for its own) and waits until DescribeConfigs
shows it. Whether nothing comes back that must not is checked with markers produced afterwards:
a share-partition hands out its lowest available offsets first, so a record wrongly available
again would come before the marker of its partition.

Tests (each on its own topic and group; the topic is deleted at the end):

- test_console_share_consumer_reads_every_record: 150 records on 3 partitions, one
  `--max-messages 150` run reads each once (partition, offset, value, delivery count 1); a second
  run reads exactly one marker per partition (what the first acknowledged stays acknowledged).
- test_console_share_consumer_reject: a `--reject` run reads 60 records; a second run reads
  exactly the markers (rejected records are never redelivered).
- test_share_groups_list_and_describe: while a console share consumer is a member,
  kafka-share-groups `--list`, `--describe --members` (its client id and
  assignment), `--describe --state` (Stable, 1 member) and `--describe` (offsets: lag 0 for
  both partitions once everything is acknowledged, or without a lag the start offsets at the end); kafka-python's list_groups lists the group
  as a share group; after the member left, Empty with no members; an unknown group is "not found".
- test_confluent_kafka_share_consumer_implicit: 100 records on 2 partitions, each once.
- test_confluent_kafka_share_consumer_explicit: ACCEPT, RELEASE, REJECT and commit_sync: released
  records come back with delivery count 2, accepted and rejected ones never.
"""

from __future__ import annotations

import re
import subprocess
import time
import uuid

import pytest
from confluent_kafka import AcknowledgeType, KafkaException, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from compat_util import DELETE_TIMEOUT_S, Problems, wait_until
from conftest import LOG_DIR, _die_with_parent, cluster_mode
from security_util import tool, tool_cmd

TOOL_TIMEOUT_S = 60  # bound on one CLI run


@pytest.fixture(autouse=True)
def _one_broker_only():
    """Share groups are served by one broker (local and object storage); cluster mode does not
    list their APIs yet (docs/share-groups.md, Limits)."""
    if cluster_mode():
        pytest.skip("cluster mode does not serve share groups yet (docs/share-groups.md, Limits)")


CONSUME_S = 30  # a consumer must have read what was produced within this
ADMIN_S = 20  # a group config, a describe result must show within this

# ConsoleShareConsumer with print.partition, print.offset and print.delivery: one line per record.
LINE = re.compile(r"^Partition:(\d+)\tOffset:(\d+)\tDelivery:(\d+)\t(.*)$")
FORMAT = ["--formatter-property", "print.partition=true", "--formatter-property", "print.offset=true",
          "--formatter-property", "print.delivery=true"]


# --------------------------------------------------------------------------- helpers


def wait_for(predicate, timeout_s: float, what) -> None:
    """Poll predicate() until it is truthy; fail with what() (called then, so it can show the
    last answer) after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what()}")
        time.sleep(0.2)


def short(text: str, n: int = 2000) -> str:
    text = text.strip()
    return text if len(text) <= n else text[:n // 2] + "\n...\n" + text[-n // 2:]


def console_lines(stdout: str) -> list[tuple[int, int, int, str]]:
    """(partition, offset, delivery count, value) of each line of the console share consumer."""
    out = []
    for line in stdout.splitlines():
        m = LINE.match(line)
        assert m, f"unexpected console share consumer line {line!r}"
        out.append((int(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4)))
    return out


class Share:
    """A topic of its own, a share group name, a producer that remembers where each record landed."""

    def __init__(self, bootstrap: str, name: str, partitions: int):
        self.bootstrap = bootstrap
        self.run = uuid.uuid4().hex[:8]
        self.topic = f"compat-{name}-{self.run}"
        self.group = f"compat-{name}-{self.run}"
        self.partitions = partitions
        self.admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": f"compat-share-admin-{self.run}"})
        self.admin.create_topics([NewTopic(self.topic, partitions, 1)])[self.topic].result(30)
        wait_until(lambda: (t := self.admin.list_topics(self.topic, timeout=10).topics.get(self.topic)) is not None
                   and t.error is None and len(t.partitions) == partitions, 15, f"{self.topic} in Metadata")

    def value(self, seq: int) -> str:
        return f"share-{self.run}-{seq}"

    def produce(self, seqs, partition: int | None = None) -> dict[tuple[int, int], str]:
        """Records with the given seqs, to partition seq % partitions (or `partition`);
        (partition, offset) -> value, as the producer was told."""
        p = Producer({"bootstrap.servers": self.bootstrap, "client.id": f"compat-share-producer-{self.run}",
                      "enable.idempotence": True, "acks": "all"})
        delivered: dict[tuple[int, int], str] = {}
        errors = []

        def report(err, msg):
            if err is not None:
                errors.append(str(err))
            else:
                delivered[(msg.partition(), msg.offset())] = msg.value().decode()

        for seq in seqs:
            p.produce(self.topic, self.value(seq).encode(), partition=seq % self.partitions if partition is None else partition,
                      on_delivery=report)
        assert p.flush(30) == 0, "the producer did not deliver everything within 30 s"
        assert not errors, f"produce failed: {errors[:3]}"
        return delivered

    def markers(self, tag: str) -> dict[tuple[int, int], str]:
        """One record per partition, value share-<run>-<tag>-<partition>."""
        p = Producer({"bootstrap.servers": self.bootstrap, "client.id": f"compat-share-producer-{self.run}"})
        delivered = {}
        for part in range(self.partitions):
            p.produce(self.topic, f"share-{self.run}-{tag}-{part}".encode(), partition=part,
                      on_delivery=lambda err, msg: delivered.__setitem__((msg.partition(), msg.offset()), msg.value().decode())
                      if err is None else None)
        assert p.flush(30) == 0
        assert len(delivered) == self.partitions, f"markers not all delivered: {delivered}"
        return delivered

    def group_config_shows(self, name: str, value: str) -> bool:
        res = ConfigResource(ResourceType.GROUP, self.group)
        try:
            entries = self.admin.describe_configs([res])[res].result(30)
        except KafkaException:
            return False
        return name in entries and entries[name].value == value

    def set_earliest_cli(self):
        """share.auto.offset.reset=earliest with kafka-configs --entity-type groups."""
        r = tool("kafka-configs", self.bootstrap, "--alter", "--entity-type", "groups", "--entity-name", self.group,
                 "--add-config", "share.auto.offset.reset=earliest")
        assert r.returncode == 0 and "Completed updating config" in r.stdout, \
            f"kafka-configs --alter (group config) failed:\n{short(r.stdout + r.stderr)}"
        wait_until(lambda: self.group_config_shows("share.auto.offset.reset", "earliest"), ADMIN_S,
                   f"DescribeConfigs of group {self.group} to show share.auto.offset.reset=earliest")

    def set_earliest_admin(self):
        """share.auto.offset.reset=earliest with confluent-kafka's incremental_alter_configs."""
        res = ConfigResource(ResourceType.GROUP, self.group, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
        self.admin.incremental_alter_configs([res])[res].result(30)
        wait_until(lambda: self.group_config_shows("share.auto.offset.reset", "earliest"), ADMIN_S,
                   f"DescribeConfigs of group {self.group} to show share.auto.offset.reset=earliest")

    def console(self, *args: str, timeout: float = TOOL_TIMEOUT_S) -> subprocess.CompletedProcess:
        return tool("kafka-console-share-consumer", self.bootstrap, "--topic", self.topic, "--group", self.group,
                    "--command-property", f"client.id=compat-cli-share-{self.run}", *FORMAT, *args, timeout=timeout)

    def share_groups(self, *args: str) -> str:
        """kafka-share-groups output (it exits 0 on errors too, printing them: both streams)."""
        r = tool("kafka-share-groups", self.bootstrap, *args)
        return r.stdout + r.stderr

    def close(self):
        try:
            self.admin.delete_topics([self.topic])[self.topic].result(DELETE_TIMEOUT_S)
        except Exception as e:  # not to hide the test's own failure
            print(f"could not delete {self.topic}: {e}")


@pytest.fixture
def share_env(bootstrap):
    made = []

    def make(name: str, partitions: int) -> Share:
        s = Share(bootstrap, name, partitions)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def check_console_read(produced: dict[tuple[int, int], str], got: list[tuple[int, int, int, str]], what: str):
    """Every produced record exactly once, as produced, with delivery count `1`."""
    p = Problems()
    seen: dict[tuple[int, int], int] = {}
    for part, off, count, value in got:
        seen[(part, off)] = seen.get((part, off), 0) + 1
        if produced.get((part, off)) != value:
            p.add("not as produced", f"{part}@{off}: {value!r}, produced {produced.get((part, off))!r}")
        if count != 1:
            p.add("delivery count not 1", f"{part}@{off}: {count}")
    dups = [k for k, n in seen.items() if n > 1]
    if dups:
        p.add("delivered more than once", f"{dups[:5]} ({len(dups)} records)")
    missing = sorted(set(produced) - set(seen))
    if missing:
        p.add("never delivered", f"{missing[:5]} ({len(missing)} records)")
    p.raise_if_any(what)


# --------------------------------------------------------------------------- Kafka's CLI tools


def test_console_share_consumer_reads_every_record(share_env):
    s = share_env("share-cli", 3)
    s.set_earliest_cli()
    n = 150
    produced = s.produce(range(n))
    r = s.console("--max-messages", str(n), "--timeout-ms", str(CONSUME_S * 1000))
    assert r.returncode == 0, f"console share consumer failed (status {r.returncode}):\n{short(r.stderr)}"
    assert f"Processed a total of {n} messages" in r.stderr, short(r.stderr)
    check_console_read(produced, console_lines(r.stdout), f"kafka-console-share-consumer --max-messages {n}")

    # It acknowledged (ACCEPT) what it read: a new member of the group gets only the markers.
    markers = s.markers("m1")
    r = s.console("--max-messages", str(len(markers)), "--timeout-ms", str(CONSUME_S * 1000))
    assert r.returncode == 0, f"second run failed (status {r.returncode}):\n{short(r.stderr)}"
    check_console_read(markers, console_lines(r.stdout), "second run: only the markers")


def test_console_share_consumer_reject(share_env):
    s = share_env("share-cli-reject", 3)
    s.set_earliest_cli()
    n = 60
    produced = s.produce(range(n))
    r = s.console("--reject", "--max-messages", str(n), "--timeout-ms", str(CONSUME_S * 1000))
    assert r.returncode == 0, f"console share consumer --reject failed (status {r.returncode}):\n{short(r.stderr)}"
    check_console_read(produced, console_lines(r.stdout), f"kafka-console-share-consumer --reject --max-messages {n}")

    markers = s.markers("m1")
    r = s.console("--max-messages", str(len(markers)), "--timeout-ms", str(CONSUME_S * 1000))
    assert r.returncode == 0, f"second run failed (status {r.returncode}):\n{short(r.stderr)}"
    check_console_read(markers, console_lines(r.stdout), "after --reject: only the markers, nothing rejected again")


def table(output: str, header_first: str) -> list[dict[str, str]]:
    """Rows of the kafka-share-groups table whose header starts with `header_first` (columns split
    on runs of 2+ spaces in the header; values are single words except COORDINATOR (ID))."""
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(header_first):
            cols = line.split()
            # "COORDINATOR (ID)" is one column of two words, as is its value "host:port  (id)".
            merged = []
            for c in cols:
                if c == "(ID)" and merged:
                    merged[-1] += " (ID)"
                else:
                    merged.append(c)
            rows = []
            for row in lines[i + 1:]:
                if not row.strip():
                    break
                vals = row.split()
                if "COORDINATOR (ID)" in merged and len(vals) == len(merged) + 1:
                    j = merged.index("COORDINATOR (ID)")
                    vals[j:j + 2] = [vals[j] + " " + vals[j + 1]]
                rows.append(dict(zip(merged, vals)))
            return rows
    return []


def test_share_groups_list_and_describe(share_env, bootstrap):
    s = share_env("share-groups", 2)
    s.set_earliest_cli()
    n = 40
    produced = s.produce(range(n))
    client_id = f"compat-cli-share-{s.run}"
    out_path = LOG_DIR / "share-console-consumer.out"  # (kept after the run, like the suite's other logs)
    err_path = LOG_DIR / "share-console-consumer.err"
    # A member that stays: it reads the n records, then waits for one more (a marker, below).
    with open(out_path, "w") as out, open(err_path, "w") as err:
        proc = subprocess.Popen(
            tool_cmd("kafka-console-share-consumer", bootstrap, "--topic", s.topic, "--group", s.group,
                     "--command-property", f"client.id={client_id}", *FORMAT, "--max-messages", str(n + 1)),
            stdin=subprocess.DEVNULL, stdout=out, stderr=err, preexec_fn=_die_with_parent)
    try:
        def lines_read() -> int:
            if proc.poll() is not None:
                raise AssertionError(f"the console share consumer exited ({proc.returncode}):\n{short(err_path.read_text())}")
            return len(out_path.read_text().splitlines())

        wait_until(lambda: lines_read() >= n, CONSUME_S, f"the console share consumer to read {n} records")
        check_console_read(produced, console_lines(out_path.read_text()), "the member's records")

        # --list
        listed = s.share_groups("--list")
        assert s.group in listed.splitlines(), f"{s.group} not in kafka-share-groups --list:\n{short(listed)}"

        # --describe --members: the console consumer, both partitions assigned to it.
        got = {}

        def members_ok():
            got["out"] = s.share_groups("--describe", "--group", s.group, "--members")
            rows = [r for r in table(got["out"], "GROUP") if r.get("GROUP") == s.group]
            return (len(rows) == 1 and rows[0].get("CLIENT-ID") == client_id and rows[0].get("#PARTITIONS") == "2"
                    and rows[0].get("ASSIGNMENT") == f"{s.topic}:0,1")

        wait_for(members_ok, ADMIN_S, lambda: f"--describe --members to show {client_id} with {s.topic}:0,1 "
                 f"(last output:\n{short(got.get('out', ''))})")

        # --describe --state: Stable, one member.
        rows = table(s.share_groups("--describe", "--group", s.group, "--state"), "GROUP")
        assert len(rows) == 1 and rows[0]["STATE"] == "Stable" and rows[0]["#MEMBERS"] == "1", f"--describe --state: {rows}"

        # --describe (offsets): both partitions, once the member acknowledged everything with
        # LAG 0 and a START-OFFSET from 0 to the end offset (Kafka 4.3.1 reports 0 here: its
        # persisted start offset moves later), or, without a lag ("-": DescribeShareGroupOffsets
        # v0), START-OFFSET at the end offset.
        ends = {}
        for part, off in produced:
            ends[part] = max(ends.get(part, 0), off + 1)

        def offsets_ok():
            got["out"] = s.share_groups("--describe", "--group", s.group)
            rows = {r.get("PARTITION"): r for r in table(got["out"], "GROUP") if r.get("TOPIC") == s.topic}
            if set(rows) != {"0", "1"}:
                return False
            for part in (0, 1):
                start, lag = rows[str(part)].get("START-OFFSET", ""), rows[str(part)].get("LAG", "")
                if not start.isdigit():
                    return False
                if lag == "-" and int(start) != ends[part]:
                    return False
                if lag != "-" and not (lag == "0" and 0 <= int(start) <= ends[part]):
                    return False
            return True

        wait_for(offsets_ok, ADMIN_S, lambda: f"--describe to show both partitions with lag 0, or without a lag the "
                 f"start offsets at the end offsets {ends} (last output:\n{short(got.get('out', ''))})")

        # kafka-python's ListGroups (v5, types filter) lists it as a share group.
        from kafka import KafkaAdminClient

        kp = KafkaAdminClient(bootstrap_servers=bootstrap.split(","), client_id=f"compat-kafka-python-share-{s.run}")
        try:
            groups = {g["group_id"]: g for g in kp.list_groups(types_filter=["share"])}
            assert s.group in groups, f"kafka-python list_groups(types_filter=['share']) misses {s.group}: {list(groups)[:10]}"
            assert groups[s.group].get("group_type") == "share", groups[s.group]
            consumer_groups = {g["group_id"] for g in kp.list_groups(types_filter=["consumer", "classic"])}
            assert s.group not in consumer_groups, "list_groups(types_filter=['consumer', 'classic']) lists the share group"
        finally:
            kp.close()

        # One more record: the member reads it and exits (--max-messages n+1), leaving the group.
        s.produce([n])
        try:
            proc.wait(timeout=CONSUME_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the console share consumer did not read the last record and exit within {CONSUME_S} s")
        assert proc.returncode == 0, f"the console share consumer exited with {proc.returncode}:\n{short(err_path.read_text())}"
        assert len(console_lines(out_path.read_text())) == n + 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)

    def empty():
        got["out"] = s.share_groups("--describe", "--group", s.group, "--state")
        rows = table(got["out"], "GROUP")
        return len(rows) == 1 and rows[0]["STATE"] == "Empty" and rows[0]["#MEMBERS"] == "0"

    wait_for(empty, ADMIN_S, lambda: f"--describe --state to show the group Empty with 0 members (last output:\n{short(got.get('out', ''))})")

    unknown = f"compat-no-such-share-group-{s.run}"
    out = s.share_groups("--describe", "--group", unknown)
    # (GROUP_ID_NOT_FOUND; the message after it is the broker's own text)
    assert "GroupIdNotFoundException" in out and unknown in out, short(out)


# --------------------------------------------------------------------------- confluent-kafka


def ck_share_consumer(s: Share, role: str, **conf) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": s.bootstrap, "group.id": s.group,
                       "client.id": f"compat-confluent-share-{role}-{s.run}", **conf})
    c.subscribe([s.topic])
    return c


def test_confluent_kafka_share_consumer_implicit(share_env):
    s = share_env("share-ck", 2)
    s.set_earliest_admin()
    n = 100
    produced = s.produce(range(n))
    got: list[tuple[int, int, int, str]] = []
    errors = []
    c = ck_share_consumer(s, "implicit")
    try:
        def poll_until(done, what):
            deadline = time.monotonic() + CONSUME_S
            while not done():
                assert time.monotonic() < deadline, f"timed out after {CONSUME_S} s waiting for {what} (have {len(got)})"
                for m in c.poll(0.5):
                    if m.error():
                        errors.append(str(m.error()))
                        continue
                    got.append((m.partition(), m.offset(), m.delivery_count(), m.value().decode()))
                assert not errors, f"ShareConsumer errors: {errors[:3]}"

        poll_until(lambda: len({(p, o) for p, o, _, _ in got}) >= n, f"{n} records")
        # What it polled is acknowledged with the next poll: the markers come with nothing before them.
        markers = s.markers("m1")
        produced.update(markers)
        poll_until(lambda: set(markers) <= {(p, o) for p, o, _, _ in got}, "the markers")
    finally:
        c.close()
    check_console_read(produced, got, "confluent-kafka ShareConsumer, implicit acknowledgement")


def test_confluent_kafka_share_consumer_explicit(share_env):
    # seq % 3 == 0: ACCEPT; 1: RELEASE at the first delivery, ACCEPT at the second; 2: REJECT.
    s = share_env("share-ck-explicit", 1)
    s.set_earliest_admin()
    n = 30
    produced = s.produce(range(n))
    by_seq: dict[int, list[int]] = {}  # seq -> delivery counts, in order
    p = Problems()
    commits = 0
    markers: dict = {}
    seen_values: set = set()
    c = ck_share_consumer(s, "explicit", **{"share.acknowledgement.mode": "explicit"})
    try:
        def done() -> bool:
            return (len(by_seq) >= n and all(len(by_seq[q]) >= 2 for q in range(1, n, 3)))

        deadline = time.monotonic() + CONSUME_S
        while not markers or not (set(markers.values()) <= seen_values):
            assert time.monotonic() < deadline, f"timed out after {CONSUME_S} s; deliveries by seq: {by_seq}"
            if not markers and done():
                markers = s.markers("m1")
            msgs = c.poll(0.5)
            for m in msgs:
                assert not m.error(), f"ShareConsumer error: {m.error()}"
                value = m.value().decode()
                if value in markers.values():
                    seen_values.add(value)
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
                    continue
                seq = int(value.rsplit("-", 1)[1])
                counts = by_seq.setdefault(seq, [])
                counts.append(m.delivery_count())
                nth = len(counts)
                if m.delivery_count() != nth:
                    p.add("delivery count", f"seq {seq}: delivery {nth} has delivery count {m.delivery_count()}")
                if markers:
                    p.add("delivered after everything was acknowledged", f"seq {seq} (delivery {nth})")
                if seq % 3 == 1:
                    ack = AcknowledgeType.RELEASE if nth == 1 else AcknowledgeType.ACCEPT
                    if nth > 2:
                        p.add("accepted record redelivered", f"seq {seq}")
                elif seq % 3 == 2:
                    ack = AcknowledgeType.REJECT
                    if nth > 1:
                        p.add("rejected record redelivered", f"seq {seq}")
                else:
                    ack = AcknowledgeType.ACCEPT
                    if nth > 1:
                        p.add("accepted record redelivered", f"seq {seq}")
                c.acknowledge(m, ack)
            if len(msgs):
                result = c.commit_sync(10)
                commits += 1
                for tp, err in (result or {}).items():
                    if err is not None:
                        p.add("commit_sync", f"{tp}: {err}")
    finally:
        c.close()
    missing = sorted(set(range(n)) - set(by_seq))
    if missing:
        p.add("never delivered", str(missing[:5]))
    p.raise_if_any("confluent-kafka ShareConsumer, explicit acknowledgement")
    assert produced and commits > 0

