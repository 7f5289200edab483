"""kafka-python (pure Python): admin, producer with its defaults, group-less consumer.

Steps, in order, on one 3-partition topic: create (KafkaAdminClient) -> produce 10,000 keyed
records with headers and explicit timestamps (client defaults: acks=all, idempotence on) ->
read all back with assign() + seek_to_beginning() (group_id=None) -> beginning/end offsets ->
offsets_for_times -> delete (KafkaAdminClient).
"""

import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

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
from conftest import cluster_mode

CLIENT = "kafka-python"
TS_TYPES = {0: CREATE_TIME, 1: "LogAppendTime"}


def client_id(steps: Steps, role: str) -> str:
    return f"compat-kafka-python-{role}-{steps.topic.rsplit('-', 1)[1]}"


@pytest.fixture(scope="module")
def steps():
    return Steps(topic_name("kafka-python"))


@pytest.fixture(scope="module")
def admin(bootstrap, steps):
    a = KafkaAdminClient(bootstrap_servers=bootstrap, client_id=client_id(steps, "admin"), request_timeout_ms=30000)
    yield a
    a.close()


@pytest.fixture
def consumer(bootstrap, steps):
    c = KafkaConsumer(
        bootstrap_servers=bootstrap,
        client_id=client_id(steps, "consumer"),
        group_id=None,
        enable_auto_commit=False,
        request_timeout_ms=30000,
    )
    yield c
    c.close()


def partitions_of(admin: KafkaAdminClient, topic: str) -> list[dict] | None:
    for t in admin.describe_topics([topic]):
        if t.get("error_code") == 0 and t.get("name") == topic:
            return t["partitions"]
    return None


def test_create_topic(admin, steps):
    admin.create_topics([NewTopic(name=steps.topic, num_partitions=PARTITIONS, replication_factor=1)], timeout_ms=30000)
    parts = wait_until(
        lambda: (p := partitions_of(admin, steps.topic)) and len(p) == PARTITIONS and all(x["leader_id"] >= 0 for x in p) and p,
        30,
        f"{steps.topic} with {PARTITIONS} partitions and leaders in metadata",
    )
    assert sorted(x["partition_index"] for x in parts) == list(range(PARTITIONS))
    # (Cluster mode: the list may come from a broker that sees the new topic only at its next
    # catalog refresh, up to 1 s; see compat/README.md.)
    wait_until(lambda: steps.topic in admin.list_topics(), 5 if cluster_mode() else 0, f"{steps.topic} in list_topics()")
    steps.ok("create")


def test_produce_defaults(bootstrap, steps):
    steps.require("create")
    base_ts = now_ms() - 3_600_000
    records = make_records(CLIENT, base_ts)
    p = KafkaProducer(bootstrap_servers=bootstrap, client_id=client_id(steps, "producer"))
    try:
        futures = [
            (r.seq, p.send(steps.topic, key=r.key, value=r.value, headers=list(r.headers), timestamp_ms=r.timestamp_ms))
            for r in records
        ]
        p.flush(timeout=60)
        delivered = {}
        for seq, f in futures:
            md = f.get(timeout=10)
            delivered[seq] = (md.partition, md.offset)
    finally:
        p.close(timeout=10)
    assert len(delivered) == N_RECORDS
    steps.data.update(records=records, delivered=delivered)
    steps.ok("produce")


def test_read_back_from_earliest(consumer, steps):
    steps.require("produce")
    tps = [TopicPartition(steps.topic, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    end = consumer.end_offsets(tps)
    got: list[Got] = []
    deadline = time.monotonic() + READ_TIMEOUT_S
    while any(consumer.position(tp) < end[tp] for tp in tps):
        assert time.monotonic() < deadline, f"read {len(got)} records in {READ_TIMEOUT_S} s; end offsets {end}"
        for tp, msgs in consumer.poll(timeout_ms=1000, max_records=2000).items():
            for m in msgs:
                got.append(
                    Got(
                        partition=m.partition,
                        offset=m.offset,
                        key=m.key,
                        value=m.value,
                        headers=tuple(m.headers or ()),
                        timestamp_ms=m.timestamp,
                        timestamp_type=TS_TYPES.get(m.timestamp_type, f"unknown ({m.timestamp_type})"),
                    )
                )
    check_read_back(steps.data["records"], got, delivered=steps.data["delivered"])
    steps.data["got"] = got
    steps.ok("read")


def test_beginning_and_end_offsets(consumer, steps):
    steps.require("read")
    counts = {p: len(rs) for p, rs in by_partition(steps.data["got"]).items()}
    tps = [TopicPartition(steps.topic, p) for p in range(PARTITIONS)]
    assert consumer.beginning_offsets(tps) == {tp: 0 for tp in tps}
    assert consumer.end_offsets(tps) == {tp: counts.get(tp.partition, 0) for tp in tps}


def test_offsets_for_times(consumer, steps):
    steps.require("read")
    got = steps.data["got"]
    tps = [TopicPartition(steps.topic, p) for p in range(PARTITIONS)]
    for label, ts in offset_lookups(got):
        answer = consumer.offsets_for_times({tp: ts for tp in tps})
        for tp in tps:
            want = expected_offset_for_time(got, tp.partition, ts)
            found = answer.get(tp)
            # kafka-python answers None where no record has a timestamp >= ts.
            assert (None if found is None else found.offset) == want, f"{label} (ts {ts}) partition {tp.partition}: {found}"
            if found is not None:
                assert found.timestamp == min(g.timestamp_ms for g in got if g.partition == tp.partition and g.offset == want)


def test_delete_topic(admin, steps):
    steps.require("create")
    admin.delete_topics([steps.topic], timeout_ms=30000)
    wait_until(lambda: steps.topic not in admin.list_topics(), DELETE_TIMEOUT_S, f"{steps.topic} to leave metadata")
