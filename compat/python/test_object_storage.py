"""Object-storage and cluster mode only (`--storage object`, `--storage cluster`): the bucket
(and in cluster mode the metadata database) alone bring the brokers back.

The test owns its broker (`sluice serve --storage s3://BUCKET/compat` on a fixed free port and
a bucket of its own on the session's MinIO). With confluent-kafka it creates a topic with a
config, produces records (acks=all, idempotence on) and commits a group's offsets; then it
kills the broker with SIGKILL, DELETES its whole data directory and starts it again on a new,
empty one with the same bucket and prefix. Everything acknowledged must be back: the topic
(partitions and config), every record at the partition and offset its producer was told
(key, value, headers, timestamp), the watermarks and the committed offsets. A producer after
the restart must append after them, not over them.

With --storage cluster the test owns a cluster of three brokers (a bucket and a database of its
own, each broker on a fixed free port) and the clients are given all three addresses; ALL three
are killed with SIGKILL, every data directory is deleted, and all three start again on new, empty
ones. The checks are the same.

Skipped in local mode (there the data directory is the data) and against other brokers.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, TIMESTAMP_CREATE_TIME, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from compat_util import Got, by_partition, check_read_back, make_records, now_ms, topic_name
from conftest import SluiceBroker, SluiceCluster, free_ports

N = 3000  # records before the crash
N_AFTER = 200  # records produced after the restart
PARTITIONS = 3
RETENTION_MS = "86400000"  # a topic config that must survive with the topic
READ_TIMEOUT_S = 60
FLUSH_S = 60


@pytest.fixture
def object_broker(request):
    config = request.config
    if config.getoption("--bootstrap") or config.getoption("--target") != "sluice":
        pytest.skip("object-storage test: runs only against a `sluice serve` the suite starts")
    storage = config.getoption("--storage")
    if storage not in ("object", "cluster"):
        pytest.skip("object-storage test: runs only with --storage object or cluster (in local mode the data directory is the data)")
    if storage == "cluster":
        b = SluiceCluster(log_prefix="sluice-object-wipe", fixed_ports=True)
    else:
        port = free_ports(1)[0]
        b = SluiceBroker(kafka_addr=f"127.0.0.1:{port}", log_name="sluice-object-wipe.log", storage="object")
    try:
        b.start()
        yield b
    finally:
        b.stop()


def produce(bootstrap: str, topic: str, records, client_id: str) -> dict[int, tuple[int, int]]:
    """Produce with acks=all and idempotence; seq -> (partition, offset) from the delivery reports."""
    delivered: dict[int, tuple[int, int]] = {}
    errors: list[str] = []

    def on_delivery(seq):
        def cb(err, msg):
            if err is not None:
                errors.append(f"seq {seq}: {err}")
            else:
                delivered[seq] = (msg.partition(), msg.offset())

        return cb

    p = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "enable.idempotence": True, "acks": "all"})
    for r in records:
        while True:
            try:
                p.produce(topic, key=r.key, value=r.value, headers=list(r.headers), timestamp=r.timestamp_ms, on_delivery=on_delivery(r.seq))
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    remaining = p.flush(FLUSH_S)
    assert remaining == 0, f"{remaining} records still undelivered after {FLUSH_S} s"
    assert not errors, f"{len(errors)} delivery errors, e.g. {errors[:3]}"
    assert len(delivered) == len(records)
    return delivered


def read_from(bootstrap: str, topic: str, start: dict[int, int], client_id: str) -> list[Got]:
    """Every record of every partition from `start` (partition -> offset) to its end."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "group.id": f"compat-unused-{topic}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        c.assign([TopicPartition(topic, p, start.get(p, OFFSET_BEGINNING)) for p in range(PARTITIONS)])
        got: list[Got] = []
        at_end: set[int] = set()
        deadline = time.monotonic() + READ_TIMEOUT_S
        while len(at_end) < PARTITIONS:
            assert time.monotonic() < deadline, f"read {len(got)} records, end of partitions {sorted(at_end)} only"
            for m in c.consume(num_messages=1000, timeout=1.0):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        at_end.add(m.partition())
                        continue
                    raise AssertionError(f"consumer error: {err}")
                at_end.discard(m.partition())
                ts_type, ts = m.timestamp()
                got.append(
                    Got(
                        partition=m.partition(),
                        offset=m.offset(),
                        key=m.key(),
                        value=m.value(),
                        headers=tuple(m.headers() or ()),
                        timestamp_ms=ts,
                        timestamp_type="CreateTime" if ts_type == TIMESTAMP_CREATE_TIME else f"type {ts_type}",
                    )
                )
        return got
    finally:
        c.close()


def group_consumer(bootstrap: str, group: str, client_id: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "client.id": client_id, "group.id": group, "enable.auto.commit": False})


def watermarks(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    """Each partition's (low, high) watermark. A consumer that has not loaded the topic's
    metadata yet may answer "Unknown partition" at first (seen under CI load right after a
    restart): that is retried for a bounded time, any other error is not."""
    c = group_consumer(bootstrap, f"compat-unused-{topic}", "compat-object-watermarks")
    try:
        out = {}
        for p in range(PARTITIONS):
            deadline = time.monotonic() + 15
            while True:
                try:
                    out[p] = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
                    break
                except KafkaException as e:
                    if e.args[0].code() != KafkaError._UNKNOWN_PARTITION or time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
        return out
    finally:
        c.close()


def test_everything_acknowledged_survives_losing_the_data_directory(object_broker):
    broker = object_broker
    bootstrap = broker.bootstrap
    topic = topic_name("object")
    group = f"compat-object-group-{topic.rsplit('-', 1)[1]}"

    # 1. A topic with a config, records, and a group's committed offsets.
    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "compat-object-admin"})
    admin.create_topics(
        [NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1, config={"retention.ms": RETENTION_MS})],
        operation_timeout=30,
    )[topic].result(timeout=30)
    records = make_records("object", now_ms() - 3_600_000, n=N)
    delivered = produce(bootstrap, topic, records, "compat-object-producer")
    counts = {p: len(rs) for p, rs in by_partition([Got(p, o, None, None, (), 0) for p, o in delivered.values()]).items()}
    assert sorted(counts) == list(range(PARTITIONS)), f"records in partitions {sorted(counts)} only"
    # Commit half of each partition, as a consumer that read that far would.
    commits = {p: counts[p] // 2 for p in range(PARTITIONS)}
    c = group_consumer(bootstrap, group, "compat-object-committer")
    try:
        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in commits.items()], asynchronous=False)
        before = {tp.partition: tp.offset for tp in c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)}
    finally:
        c.close()
    assert before == commits, "committed offsets read back before the crash"

    # 2. Crash, lose the data directory, start on an empty one with the same bucket and prefix.
    old_dir = broker.data_dir
    broker.kill()
    new_dir = broker.new_data_dir()
    assert new_dir != old_dir
    t0 = time.monotonic()
    broker.start()
    restart_s = time.monotonic() - t0
    assert broker.bootstrap == bootstrap

    # 3. The topic, its config, every record, the watermarks and the committed offsets are back.
    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "compat-object-admin-2"})
    md = admin.list_topics(topic=topic, timeout=10).topics.get(topic)
    assert md is not None and md.error is None, f"topic {topic} after the restart: {md and md.error}"
    assert sorted(md.partitions) == list(range(PARTITIONS))
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([res])[res].result(timeout=30)
    assert configs["retention.ms"].value == RETENTION_MS, f"retention.ms after the restart: {configs['retention.ms'].value}"

    assert watermarks(bootstrap, topic) == {p: (0, counts[p]) for p in range(PARTITIONS)}
    got = read_from(bootstrap, topic, {}, "compat-object-reader")
    check_read_back(records, got, delivered=delivered, partitions=PARTITIONS)

    c = group_consumer(bootstrap, group, "compat-object-committed")
    try:
        after = {tp.partition: tp.offset for tp in c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)}
    finally:
        c.close()
    assert after == commits, "committed offsets after the restart"

    # 4. New records go after the old ones (a broker that lost its offsets would reuse them).
    more = make_records("object-after", now_ms() - 1_800_000, n=N_AFTER)
    delivered_after = produce(bootstrap, topic, more, "compat-object-producer-2")
    for seq, (p, o) in delivered_after.items():
        assert o >= counts[p], f"record {seq} after the restart got p{p}@{o}, below the old end {counts[p]}"
    tail_got = read_from(bootstrap, topic, counts, "compat-object-reader-2")
    assert sorted((g.partition, g.offset) for g in tail_got) == sorted(delivered_after.values())
    print(f"object storage: restart on an empty data directory took {restart_s:.1f} s; {N} records, topic, config and offsets back")
