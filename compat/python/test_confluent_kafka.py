"""confluent-kafka (librdkafka bundled in the wheel): admin, idempotent producer, assign-only consumer.

Steps, in order, on one 3-partition topic: create (AdminClient) -> produce 10,000 keyed records
with headers and explicit timestamps (enable.idempotence=true, acks=all) -> read all back from
the earliest offset with assign() (no subscribe, no commits) -> low/high watermarks ->
offsets_for_times -> delete (AdminClient).

librdkafka's Consumer refuses to start without a group.id, so one is set, but the consumer only
ever uses assign() with explicit offsets and never commits.
"""

import time

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from compat_util import (
    CREATE_TIME,
    DELETE_TIMEOUT_S,
    N_RECORDS,
    PARTITIONS,
    READ_TIMEOUT_S,
    Got,
    Steps,
    by_partition,
    check_read_back,
    expected_offset_for_time,
    make_records,
    now_ms,
    offset_lookups,
    topic_name,
    wait_until,
)

CLIENT = "confluent-kafka"
TS_TYPES = {TIMESTAMP_CREATE_TIME: CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME: "LogAppendTime"}


def conf(bootstrap: str, steps: Steps, role: str, **extra) -> dict:
    run = steps.topic.rsplit("-", 1)[1]
    return {"bootstrap.servers": bootstrap, "client.id": f"compat-confluent-{role}-{run}", **extra}


@pytest.fixture(scope="module")
def steps():
    return Steps(topic_name("confluent"))


@pytest.fixture(scope="module")
def admin(bootstrap, steps):
    return AdminClient(conf(bootstrap, steps, "admin"))


def topic_partitions(admin: AdminClient, topic: str):
    md = admin.list_topics(timeout=10)
    t = md.topics.get(topic)
    return None if t is None or t.error is not None else t.partitions


def test_create_topic(admin, steps):
    futures = admin.create_topics([NewTopic(steps.topic, num_partitions=PARTITIONS, replication_factor=1)], operation_timeout=30)
    futures[steps.topic].result(timeout=30)
    parts = wait_until(
        lambda: (p := topic_partitions(admin, steps.topic)) and len(p) == PARTITIONS and all(x.leader >= 0 for x in p.values()) and p,
        30,
        f"{steps.topic} with {PARTITIONS} partitions and leaders in metadata",
    )
    assert sorted(parts) == list(range(PARTITIONS))
    steps.ok("create")


def test_produce_idempotent(bootstrap, steps):
    steps.require("create")
    base_ts = now_ms() - 3_600_000  # an hour ago: explicit timestamps well inside any limit
    records = make_records(CLIENT, base_ts)
    delivered: dict[int, tuple[int, int]] = {}
    errors: list[str] = []

    def on_delivery(seq):
        def cb(err, msg):
            if err is not None:
                errors.append(f"seq {seq}: {err}")
            else:
                delivered[seq] = (msg.partition(), msg.offset())

        return cb

    p = Producer(conf(bootstrap, steps, "producer", **{"enable.idempotence": True, "acks": "all"}))
    for r in records:
        while True:
            try:
                p.produce(steps.topic, key=r.key, value=r.value, headers=list(r.headers), timestamp=r.timestamp_ms, on_delivery=on_delivery(r.seq))
                break
            except BufferError:  # local queue full: serve delivery reports, then retry
                p.poll(0.1)
        p.poll(0)
    remaining = p.flush(60)
    assert remaining == 0, f"{remaining} records still undelivered after 60 s"
    assert not errors, f"{len(errors)} delivery errors, e.g. {errors[:3]}"
    assert len(delivered) == N_RECORDS
    steps.data.update(records=records, delivered=delivered)
    steps.ok("produce")


def read_all(bootstrap, steps) -> list[Got]:
    c = Consumer(
        conf(
            bootstrap,
            steps,
            "consumer",
            **{
                "group.id": f"compat-unused-{steps.topic}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
            },
        )
    )
    try:
        c.assign([TopicPartition(steps.topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        got: list[Got] = []
        at_end: set[int] = set()
        deadline = time.monotonic() + READ_TIMEOUT_S
        while len(at_end) < PARTITIONS:
            assert time.monotonic() < deadline, f"read {len(got)} records, end of partitions {sorted(at_end)} only, in {READ_TIMEOUT_S} s"
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
                        timestamp_type=TS_TYPES.get(ts_type, f"unknown ({ts_type})"),
                    )
                )
        return got
    finally:
        c.close()


def test_read_back_from_earliest(bootstrap, steps):
    steps.require("produce")
    got = read_all(bootstrap, steps)
    check_read_back(steps.data["records"], got, delivered=steps.data["delivered"])
    steps.data["got"] = got
    steps.ok("read")


def test_watermark_offsets(bootstrap, steps):
    steps.require("read")
    counts = {p: len(rs) for p, rs in by_partition(steps.data["got"]).items()}
    c = Consumer(conf(bootstrap, steps, "watermarks", **{"group.id": f"compat-unused-{steps.topic}", "enable.auto.commit": False}))
    try:
        for p in range(PARTITIONS):
            low, high = c.get_watermark_offsets(TopicPartition(steps.topic, p), timeout=10, cached=False)
            assert (low, high) == (0, counts.get(p, 0)), f"partition {p}"
    finally:
        c.close()


def test_offsets_for_times(bootstrap, steps):
    steps.require("read")
    got = steps.data["got"]
    c = Consumer(conf(bootstrap, steps, "offsets", **{"group.id": f"compat-unused-{steps.topic}", "enable.auto.commit": False}))
    try:
        for label, ts in offset_lookups(got):
            answer = c.offsets_for_times([TopicPartition(steps.topic, p, ts) for p in range(PARTITIONS)], timeout=10)
            for tp in answer:
                assert tp.error is None, f"{label} (ts {ts}) partition {tp.partition}: {tp.error}"
                want = expected_offset_for_time(got, tp.partition, ts)
                # librdkafka reports "no record at or after ts" as offset -1 (OFFSET_END).
                assert tp.offset == (-1 if want is None else want), f"{label} (ts {ts}) partition {tp.partition}"
    finally:
        c.close()


def test_delete_topic(admin, steps):
    steps.require("create")
    admin.delete_topics([steps.topic], operation_timeout=30)[steps.topic].result(timeout=30)
    wait_until(lambda: topic_partitions(admin, steps.topic) is None, DELETE_TIMEOUT_S, f"{steps.topic} to leave metadata")

