"""Log compaction as clients see it, with every compression codec: a producer (confluent-kafka)
writes rounds of values for 20 keys to a compacted topic, compressed with gzip, snappy, lz4,
zstd or not at all, one batch per round and one segment per round (`segment.ms`); the last
round deletes one key with a tombstone. Once the log cleaner has run, a consumer reading from
the earliest offset gets exactly the latest record of each key (the tombstone included, as
`delete.retention.ms` has not passed) at its original offset, and Kafka's own console consumer
(the Java client) reads the same from the cleaned, recompressed batches.

The broker's cleaner runs on its own schedule (15 s backoff by default, on Sluice as on Kafka),
so a test waits up to 90 s for it. The same tests run against Apache Kafka
(`--target kafka-baseline`), which checks the expectations.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import conftest
from test_admin_records import tool

KEYS = 20
ROUNDS = 5
CLEANED_WITHIN_S = 90
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.ms": "100",
    "min.cleanable.dirty.ratio": "0.01",
}


def read_all(bootstrap: str, topic: str) -> list[tuple[int, str, str | None]]:
    """(offset, key, value) of every record of partition 0 from the earliest offset to the end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "check.crcs": True})
    try:
        tp = TopicPartition(topic, 0)
        low, high = consumer.get_watermark_offsets(tp, timeout=10)
        tp.offset = low
        consumer.assign([tp])
        got: list[tuple[int, str, str | None]] = []
        deadline = time.monotonic() + 30
        while (not got or got[-1][0] < high - 1) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            value = msg.value()
            got.append((msg.offset(), msg.key().decode(), None if value is None else value.decode()))
        return got
    finally:
        consumer.close()


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_compacted_topic_keeps_the_latest_record_of_each_key(request, bootstrap, codec):
    topic = f"compact-{codec}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    created = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1,
                                            config=TOPIC_CONFIG)])[topic]
    if request.config.getoption("--target") == "sluice" and conftest.STORAGE in ("object", "cluster"):
        # Not there yet: the refusal must be immediate and say why.
        with pytest.raises(KafkaException) as refused:
            created.result(30)
        err = refused.value.args[0]
        assert err.code() == KafkaError.INVALID_CONFIG, err
        assert "compact" in err.str(), err
        pytest.skip(f"--storage {conftest.STORAGE}: Sluice refuses cleanup.policy=compact outside "
                    "local-disk mode (INVALID_CONFIG, with a message saying so)")
    created.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "compression.type": codec, "linger.ms": 20, "batch.num.messages": KEYS})
    for round_ in range(ROUNDS):
        time.sleep(0.3)  # past segment.ms: this round starts a new segment
        for k in range(KEYS):
            value = None if (round_ == ROUNDS - 1 and k == 0) else f"r{round_}-k{k}-" + "x" * 200
            producer.produce(topic, key=f"k{k}", value=value, partition=0)
        assert producer.flush(30) == 0
    time.sleep(0.3)
    producer.produce(topic, key="pad", value="pad", partition=0)  # seals the last round's segment
    assert producer.flush(30) == 0

    last = ROUNDS - 1
    want = {f"k{k}": (last * KEYS + k, None if k == 0 else f"r{last}-k{k}-" + "x" * 200)
            for k in range(KEYS)}
    want["pad"] = (ROUNDS * KEYS, "pad")

    deadline = time.monotonic() + CLEANED_WITHIN_S
    while True:
        got = read_all(bootstrap, topic)
        if len(got) == len(want):
            break
        assert time.monotonic() < deadline, (
            f"{codec}: not compacted within {CLEANED_WITHIN_S} s: {len(got)} records, "
            f"want {len(want)}")
        time.sleep(2)
    assert {key: (offset, value) for offset, key, value in got} == want, codec

    # The Java client reads the cleaned batches too (Kafka's console consumer).
    r = tool("kafka-console-consumer", bootstrap, "--topic", topic, "--from-beginning",
             "--max-messages", str(len(want)), "--timeout-ms", "30000",
             "--property", "print.key=true", "--property", "print.offset=true",
             "--property", "key.separator=|")
    assert r.returncode == 0, f"{codec}: console consumer failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}"
    lines = [line for line in r.stdout.splitlines() if line.startswith("Offset:")]
    printed = {}
    for line in lines:
        # "Offset:42|k3|value"
        offset, key, value = line.removeprefix("Offset:").split("|", 2)
        printed[key] = (int(offset), None if value == "null" else value)
    assert printed == want, codec
