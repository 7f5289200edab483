"""Client quotas with Kafka's own tools and a real client (KIP-13, KIP-55, KIP-219).

- test_kafka_configs_client_quotas: `kafka-configs --alter --entity-type clients|users
  --add-config producer_byte_rate=...,consumer_byte_rate=...,request_percentage=...` (the Java
  AdminClient's AlterClientQuotas), then `--describe` shows them (DescribeClientQuotas), then
  `--delete-config` removes them; a key Sluice does not enforce is refused with a message.
- test_producer_and_consumer_over_quota_are_throttled: with 100 KB/s byte-rate quotas on their
  client ids, a confluent-kafka producer sending 1.6 MB and a consumer reading it back are told
  to slow down (librdkafka's throttle callback fires with the broker's throttle time), take at
  least the time the quota needs past the 10 s burst the measuring window allows, and lose
  nothing: every record is acknowledged and read back, in order.

The quotas are set on client ids of this run only, and removed at the end, so no other test is
slowed. In cluster mode a quota set through one broker reaches the others within a second or
two (they poll PostgreSQL); the test waits for that.
"""

from __future__ import annotations

import re
import time
import uuid

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from compat_util import wait_until
from conftest import cluster_mode
from test_share import short, tool

RATE = 100_000  # bytes per second, on each client id
RECORDS = 1600
VALUE = b"q" * 1000  # 1.6 MB in all: 0.6 MB past the 1 MB burst 10 s at 100 KB/s allow
MIN_TAKES_S = 3.0  # 0.6 MB over at 100 KB/s is 6 s of throttling; allow for measuring slack
DEADLINE_S = 90  # bound on producing or consuming it all


def configs(bootstrap: str, *args: str):
    r = tool("kafka-configs", bootstrap, *args)
    assert r.returncode == 0, f"kafka-configs {' '.join(args)} failed:\n{short(r.stdout + r.stderr)}"
    return r.stdout


def describe(bootstrap: str, *entity: str) -> str:
    return configs(bootstrap, "--describe", *entity)


def settle():
    """Cluster mode: other brokers load a quota change on their next poll of the store."""
    if cluster_mode():
        time.sleep(2.5)


def test_kafka_configs_client_quotas(bootstrap):
    run = uuid.uuid4().hex[:8]
    client, user = f"compat-quota-client-{run}", f"compat-quota-user-{run}"
    configs(bootstrap, "--alter", "--entity-type", "clients", "--entity-name", client,
            "--add-config", "producer_byte_rate=50000,consumer_byte_rate=60000")
    configs(bootstrap, "--alter", "--entity-type", "users", "--entity-name", user,
            "--entity-type", "clients", "--entity-name", client,
            "--add-config", "request_percentage=150")
    try:
        out = describe(bootstrap, "--entity-type", "clients", "--entity-name", client)
        assert re.search(r"producer_byte_rate=50000(\.0)?\b", out), out
        assert re.search(r"consumer_byte_rate=60000(\.0)?\b", out), out
        out = describe(bootstrap, "--entity-type", "users", "--entity-name", user,
                       "--entity-type", "clients", "--entity-name", client)
        assert re.search(r"request_percentage=150(\.0)?\b", out), out
        # Every client quota, with the one just set among them.
        out = describe(bootstrap, "--entity-type", "clients")
        assert client in out, out

        # A value that cannot be a quota is refused, with a message.
        r = tool("kafka-configs", bootstrap, "--alter", "--entity-type", "clients", "--entity-name", client,
                 "--add-config", "producer_byte_rate=-5")
        assert r.returncode != 0, r.stdout
    finally:
        configs(bootstrap, "--alter", "--entity-type", "clients", "--entity-name", client,
                "--delete-config", "producer_byte_rate,consumer_byte_rate")
        configs(bootstrap, "--alter", "--entity-type", "users", "--entity-name", user,
                "--entity-type", "clients", "--entity-name", client, "--delete-config", "request_percentage")
    out = describe(bootstrap, "--entity-type", "clients", "--entity-name", client)
    assert "producer_byte_rate" not in out and "consumer_byte_rate" not in out, out


def test_producer_and_consumer_over_quota_are_throttled(bootstrap):
    run = uuid.uuid4().hex[:8]
    topic = f"compat-quota-{run}"
    producer_id, consumer_id = f"compat-quota-producer-{run}", f"compat-quota-consumer-{run}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    configs(bootstrap, "--alter", "--entity-type", "clients", "--entity-name", producer_id,
            "--add-config", f"producer_byte_rate={RATE}")
    configs(bootstrap, "--alter", "--entity-type", "clients", "--entity-name", consumer_id,
            "--add-config", f"consumer_byte_rate={RATE}")
    settle()
    try:
        throttles: list[int] = []

        def on_throttle(event):
            throttles.append(int(event.throttle_time * 1000))

        acked, errors = [], []

        def on_delivery(err, msg):
            (errors if err else acked).append(err or msg.offset())

        producer = Producer({"bootstrap.servers": bootstrap, "client.id": producer_id, "acks": "all",
                             "enable.idempotence": True, "linger.ms": 5, "batch.size": 65536,
                             "throttle_cb": on_throttle})
        started = time.monotonic()
        for i in range(RECORDS):
            while True:
                try:
                    producer.produce(topic, value=VALUE, key=str(i).encode(), on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
        left = producer.flush(DEADLINE_S)
        took = time.monotonic() - started
        assert left == 0 and not errors, f"{left} records not acknowledged, errors {errors[:5]}"
        assert len(acked) == RECORDS
        assert throttles and max(throttles) > 0, "the producer was never told it is throttled"
        assert took >= MIN_TAKES_S, f"1.6 MB at 100 KB/s took only {took:.1f} s"

        consumer_throttles: list[int] = []

        def on_consumer_throttle(event):
            consumer_throttles.append(int(event.throttle_time * 1000))

        consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": consumer_id,
                             "group.id": f"compat-quota-{run}", "auto.offset.reset": "earliest",
                             "enable.auto.commit": False, "throttle_cb": on_consumer_throttle,
                             # Small fetches, so that reading takes many of them, as a steady
                             # consumer's would (one big fetch is throttled only after it).
                             "fetch.max.bytes": 131072, "max.partition.fetch.bytes": 131072,
                             "message.max.bytes": 131072})
        consumer.subscribe([topic])
        keys = []
        started = time.monotonic()
        try:
            while len(keys) < RECORDS and time.monotonic() - started < DEADLINE_S:
                msg = consumer.poll(0.5)
                if msg is None or msg.error():
                    continue
                keys.append(int(msg.key()))
        finally:
            consumer.close()
        took = time.monotonic() - started
        assert keys == list(range(RECORDS)), f"read {len(keys)} of {RECORDS} records, in order"
        assert consumer_throttles and max(consumer_throttles) > 0, "the consumer was never throttled"
        assert took >= MIN_TAKES_S, f"reading 1.6 MB at 100 KB/s took only {took:.1f} s"
    finally:
        configs(bootstrap, "--alter", "--entity-type", "clients", "--entity-name", producer_id,
                "--delete-config", "producer_byte_rate")
        configs(bootstrap, "--alter", "--entity-type", "clients", "--entity-name", consumer_id,
                "--delete-config", "consumer_byte_rate")
        admin.delete_topics([topic])[topic].result(30)
    wait_until(lambda: producer_id not in describe(bootstrap, "--entity-type", "clients"), 10,
               "the quotas to be removed")
