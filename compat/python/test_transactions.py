"""Transactional producers (confluent-kafka, i.e. librdkafka) against a broker without transactions.

Sluice has no transactions yet. A producer with `transactional.id` must learn that at once:
`init_transactions` raises within about 2 s with a fatal KafkaException whose message says that
transactions are not supported, instead of waiting out its whole timeout with `_TIMED_OUT` and no
reason (librdkafka asks for the transaction coordinator again every 500 ms unless the answer is
one it treats as final; see TRANSACTIONS_UNSUPPORTED in crates/broker/src/errors.rs).

Against Apache Kafka (--target kafka-baseline), which has transactions, the same producer
initializes, commits one transaction and the record is readable with isolation.level
read_committed: this checks the test itself. An idempotent producer without `transactional.id`
still works against both.
"""

import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from compat_util import topic_name

# init_transactions' own timeout: long enough that a broker answering with a retriable error
# would be seen waiting it out, against INIT_WITHIN_S.
INIT_TIMEOUT_S = 5
# How fast a refusal must reach the application (it takes one ApiVersions, Metadata and
# FindCoordinator round trip).
INIT_WITHIN_S = 2.0
# Kafka's first transaction also creates __transaction_state: give it time.
KAFKA_INIT_TIMEOUT_S = 60
FLUSH_TIMEOUT_S = 30
READ_TIMEOUT_S = 30


def producer(bootstrap: str, role: str, run: str, **extra) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "client.id": f"compat-confluent-{role}-{run}", **extra})


def test_init_transactions_fails_at_once_and_says_why(broker, bootstrap):
    topic = topic_name("txn")
    run = topic.rsplit("-", 1)[1]
    p = producer(bootstrap, "txn", run, **{"transactional.id": f"compat-txn-{run}"})
    if broker.target == "kafka-baseline":
        p.init_transactions(KAFKA_INIT_TIMEOUT_S)
        p.begin_transaction()
        p.produce(topic, value=b"committed")
        p.commit_transaction(FLUSH_TIMEOUT_S)
        c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": f"compat-confluent-txn-reader-{run}",
                "group.id": f"compat-txn-{run}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        try:
            c.assign([TopicPartition(topic, 0, 0)])
            deadline = time.monotonic() + READ_TIMEOUT_S
            got = None
            while got is None and time.monotonic() < deadline:
                m = c.poll(0.5)
                if m is not None and not m.error():
                    got = m.value()
            assert got == b"committed", "the committed record was not read back"
        finally:
            c.close()
        return

    started = time.monotonic()
    with pytest.raises(KafkaException) as raised:
        p.init_transactions(INIT_TIMEOUT_S)
    took = time.monotonic() - started
    error = raised.value.args[0]
    assert isinstance(error, KafkaError), repr(raised.value)
    assert took < INIT_WITHIN_S, f"init_transactions took {took:.1f}s to fail: {error}"
    assert error.code() != KafkaError._TIMED_OUT, f"timed out instead of a clear refusal: {error}"
    assert error.fatal() or not error.retriable(), f"a retriable error: {error}"
    assert "transactions are not supported" in error.str(), error.str()
    # The producer is unusable for good: a second try fails the same way, at once.
    started = time.monotonic()
    with pytest.raises(KafkaException):
        p.init_transactions(INIT_TIMEOUT_S)
    assert time.monotonic() - started < INIT_WITHIN_S


def test_idempotent_producer_still_works(bootstrap):
    topic = topic_name("txn-idem")
    run = topic.rsplit("-", 1)[1]
    p = producer(bootstrap, "idempotent", run, **{"enable.idempotence": True, "acks": "all"})
    delivered = []
    errors = []

    def on_delivery(err, msg):
        (errors if err else delivered).append(err or msg.offset())

    for i in range(10):
        p.produce(topic, value=f"v{i}".encode(), on_delivery=on_delivery)
    assert p.flush(FLUSH_TIMEOUT_S) == 0, "records still queued"
    assert errors == []
    assert sorted(delivered) == list(range(10))
