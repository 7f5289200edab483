"""DeleteRecords as the Kafka ecosystem calls it: confluent-kafka's AdminClient.delete_records
and Kafka's own `kafka-delete-records` and `kafka-get-offsets` (GetOffsetShell) tools, which
also looks up the max-timestamp offset (`--time -3`); and the describe calls of Kafka's tools:
`kafka-topics --describe` (DescribeTopicPartitions) and `kafka-log-dirs --describe`
(DescribeLogDirs).

Each test creates its own one-partition topic, writes 20 records, moves the log start, and
checks the low watermark every client reports, what a consumer reading from the earliest
offset gets, and the errors for an offset past the end. The same tests run against Apache
Kafka (`--target kafka-baseline`), which checks the expectations.
"""

from __future__ import annotations

import json
import tempfile
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_util import wait_until
from security_util import tool

import os

T0 = 1_700_000_000_000  # record i's timestamp is T0 + i
def new_topic(bootstrap: str, prefix: str, records: int = 20) -> str:
    """A fresh one-partition topic holding `records` records v0, v1, ... at offsets 0, 1, ..."""
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0})
    for i in range(records):
        # One batch per record, so that a cut falls between batches.
        producer.produce(topic, value=f"v{i}".encode(), partition=0, timestamp=T0 + i)
        producer.flush(10)
    assert producer.flush(30) == 0
    return topic


def read_from_earliest(bootstrap: str, topic: str, want: int) -> list[tuple[int, str]]:
    """(offset, value) of what a consumer with auto.offset.reset=earliest reads, `want` of them."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    got: list[tuple[int, str]] = []
    try:
        consumer.subscribe([topic])

        def done() -> bool:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append((msg.offset(), msg.value().decode()))
            return len(got) >= want

        wait_until(done, 30, f"{want} records of {topic}")
    finally:
        consumer.close()
    return got


def low_watermark(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    try:
        low, _high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return low
    finally:
        consumer.close()


def test_confluent_kafka_delete_records(bootstrap):
    topic = new_topic(bootstrap, "delrec-ck")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records([TopicPartition(topic, 0, 12)], request_timeout=30)
    result = futures[TopicPartition(topic, 0)].result(30)
    assert result.low_watermark == 12, result
    assert low_watermark(bootstrap, topic) == 12
    got = read_from_earliest(bootstrap, topic, 8)
    assert got == [(o, f"v{o}") for o in range(12, 20)], got

    # Past the high watermark: OFFSET_OUT_OF_RANGE, and nothing moves.
    futures = admin.delete_records([TopicPartition(topic, 0, 21)], request_timeout=30)
    with pytest.raises(KafkaException) as err:
        futures[TopicPartition(topic, 0)].result(30)
    assert err.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE, err.value
    assert low_watermark(bootstrap, topic) == 12

    # OFFSET_END (-1): up to the high watermark.
    futures = admin.delete_records([TopicPartition(topic, 0, -1)], request_timeout=30)
    assert futures[TopicPartition(topic, 0)].result(30).low_watermark == 20
    admin.delete_topics([topic])


def test_kafka_delete_records_and_get_offsets_tools(bootstrap):
    topic = new_topic(bootstrap, "delrec-tool")
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"version": 1, "partitions": [{"topic": topic, "partition": 0, "offset": 7}]}, f)
        spec = f.name
    try:
        run = tool("kafka-delete-records", bootstrap, "--offset-json-file", spec)
    finally:
        os.unlink(spec)
    assert run.returncode == 0, run.stderr + run.stdout
    assert "low_watermark: 7" in run.stdout, run.stdout

    run = tool("kafka-get-offsets", bootstrap, "--topic", topic, "--time", "-2")
    assert run.returncode == 0, run.stderr + run.stdout
    assert run.stdout.split() == [f"{topic}:0:7"], run.stdout
    run = tool("kafka-get-offsets", bootstrap, "--topic", topic, "--time", "-1")
    assert run.stdout.split() == [f"{topic}:0:20"], run.stdout
    # Max timestamp (KIP-734): the record with the highest time, the last one here.
    run = tool("kafka-get-offsets", bootstrap, "--topic", topic, "--time", "-3")
    assert run.returncode == 0, run.stderr + run.stdout
    assert run.stdout.split() == [f"{topic}:0:19"], run.stdout
    AdminClient({"bootstrap.servers": bootstrap}).delete_topics([topic])


def test_kafka_topics_and_log_dirs_describe(bootstrap):
    topic = new_topic(bootstrap, "describe", records=5)
    def described():
        run = tool("kafka-topics", bootstrap, "--describe", "--topic", topic)
        lines = [line for line in run.stdout.splitlines() if line.strip()]
        ok = (run.returncode == 0 and len(lines) == 2 and f"Topic: {topic}" in lines[0]
              and "PartitionCount: 1" in lines[0] and "Partition: 0" in lines[1]
              and "Leader: " in lines[1] and "Leader: none" not in lines[1])
        return ok, run

    def log_dirs():
        run = tool("kafka-log-dirs", bootstrap, "--describe", "--topic-list", topic)
        report = None
        for line in run.stdout.splitlines():
            if line.startswith("{"):
                report = json.loads(line)
        if run.returncode != 0 or report is None:
            return False, run
        dirs = [d for b in report["brokers"] for d in b["logDirs"]]
        partitions = [p for d in dirs for p in d["partitions"]]
        ok = ([p["partition"] for p in partitions] == [f"{topic}-0"] and partitions[0]["size"] > 0
              and all(d["error"] is None for d in dirs))
        return ok, report

    # Right after the produce a broker may still be catching up (Kafka's metadata, Sluice's
    # other brokers in cluster mode): each answer gets a few tries.
    for check in (described, log_dirs):
        deadline = time.monotonic() + 30
        ok, last = check()
        while not ok and time.monotonic() < deadline:
            time.sleep(1)
            ok, last = check()
        assert ok, f"{check.__name__}: {last}"
    AdminClient({"bootstrap.servers": bootstrap}).delete_topics([topic])
