"""A consumer group across broker crashes (Sluice only): 3 confluent-kafka consumers in one group
on a 6-partition topic consume and commit (synchronously, after every batch) while a producer
sends continuously; the broker is killed with SIGKILL twice and restarted on the same port and
data directory. The consumers must come back, settle again, and resume from their committed
offsets:

- no loss: every record the producer was told was written is processed by some consumer;
- commits are durable: a record is processed again only if no commit past it had completed
  before (duplicates come only from uncommitted tails, e.g. a batch whose commit the crash cut off);
- progress: commits complete after each restart, and at the end the three consumers hold
  disjoint, balanced assignments covering the topic;
- after the consumers closed, one more SIGKILL and restart: the group's committed offsets
  (OffsetFetch) are still the last ones committed.

Run for the classic protocol and for KIP-848 (`group.protocol=consumer`). The test owns its
broker, like test_crash.py: `sluice serve` on a fixed free port (the clients reconnect to the same
address); it is skipped with --target kafka-baseline and --bootstrap. The kill schedule comes from
a seed the test prints; SLUICE_GROUPS_CRASH_SEED=N replays it.

With --storage cluster the test owns a cluster of three brokers (a bucket and a database of its
own, each broker on a fixed free port; the clients are given all three addresses), and each kill
is a SIGKILL of the group's COORDINATOR (the broker FindCoordinator names at that moment). It
stays down until every member has committed again, which it can only have done through the
other brokers (the group moved once the dead broker's leases expired), then it is restarted on
its address and data directory. The final kill, with the group empty, is of the coordinator
again, and the committed offsets are read through the two others while it is down.
"""

from __future__ import annotations

import os
import random
import time

import pytest
from confluent_kafka.admin import AdminClient

from compat_util import find_coordinator
from conftest import SluiceBroker, SluiceCluster, cluster_mode, free_ports
from test_groups import (
    DRAIN_S,
    SETTLE_S,
    ConfluentMember,
    Feeder,
    Member,
    Recorder,
    all_processed,
    check_committed,
    check_run,
    confluent_conf,
    create_topic,
    delete_topic,
    describe_assignments,
    member_errors,
    note,
    now,
    unprocessed,
    wait_for,
    run_id,
    settled,
    stop_all,
)

PARTITIONS = 6
MEMBERS = 3
KILLS = 2
RESTART_S = 15  # a restarted broker must listen again within this (retrying a busy port)
RECOVER_S = 45  # after a restart, commits must complete again within this
DELIVERY_TIMEOUT_MS = 120000  # the producer keeps retrying through the outages
# Cluster mode: a run whose only problem is committed records read again is this bug of Sluice's
# (compat/README.md, cluster mode findings), reported as xfail; any other problem fails.
KNOWN_FAILOVER_BUG = (
    "cluster mode, a Sluice bug: after a broker is killed, the broker that takes over one of its partitions may "
    "answer a Fetch at a valid offset (one already consumed through the dead broker) with OFFSET_OUT_OF_RANGE; "
    "librdkafka then resets to auto.offset.reset (earliest here: committed records read again; latest would skip "
    "records), e.g. 'offset reset (at offset 570 (leader epoch 0), broker 2) to cached BEGINNING offset 0: fetch "
    "failed due to requested offset not available on the broker: Broker: Offset out of range'."
)


@pytest.fixture(scope="module")
def crash_target(request):
    if request.config.getoption("--bootstrap"):
        pytest.skip("the group crash test starts, kills and restarts its own broker; not with --bootstrap")
    if request.config.getoption("--target") != "sluice":
        pytest.skip("the group crash test kills and restarts `sluice serve`; it runs only with --target sluice")


def restart(broker) -> int:
    """Start the broker again on its address and data directory; retry while the port is busy."""
    deadline = time.monotonic() + RESTART_S
    attempts = 0
    while True:
        attempts += 1
        try:
            broker.start()
            return attempts
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def coordinator_of(cluster: SluiceCluster, group: str) -> tuple[str, SluiceBroker]:
    """The broker of the cluster FindCoordinator names for the group: (letter, broker)."""
    addr = find_coordinator(cluster.bootstrap, group)
    for i, b in enumerate(cluster.brokers):
        if b.bootstrap == addr:
            return chr(ord("A") + i), b
    raise AssertionError(f"FindCoordinator named {addr}, which is none of the cluster's brokers {cluster.bootstrap}")


def crash_scenario(broker, protocol: str, seed: int):
    """The scenario against a running broker with kill() and start() (same address and data);
    with a SluiceCluster, the group's coordinator is killed each time (see the module's doc)."""
    cluster = broker if isinstance(broker, SluiceCluster) else None
    rng = random.Random(seed)
    run = run_id()
    bootstrap = broker.bootstrap
    topic = f"compat-groups-crash-{protocol}-{run}"
    group = f"compat-groups-crash-{protocol}-{run}"
    client_id = f"compat-confluent-group-crash-{protocol}-{run}"
    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": f"compat-groups-admin-{run}"})
    create_topic(admin, topic, PARTITIONS)
    rec = Recorder()
    members: list[Member] = []
    feeder = None
    kills = []
    try:
        conf = confluent_conf(bootstrap, group, client_id, protocol)
        members = [Member(f"m{i}", lambda name=f"m{i}": ConfluentMember(conf, topic, rec, name), rec) for i in range(MEMBERS)]
        wait_for(
            members,
            lambda: settled(members, PARTITIONS, balanced=True),
            SETTLE_S,
            lambda: f"{MEMBERS} members with balanced, disjoint assignments (now: {describe_assignments(members)})",
        )
        feeder = Feeder(
            bootstrap, topic, PARTITIONS, f"compat-groups-crash-{protocol}-producer-{run}", **{"delivery.timeout.ms": DELIVERY_TIMEOUT_MS}
        )
        wait_for(
            members,
            lambda: all(rec.commits_by(m.name) >= 3 for m in members),
            30,
            lambda: f"every member to process and commit records (commits: {[rec.commits_by(m.name) for m in members]})",
        )
        for i in range(1, KILLS + 1):
            time.sleep(rng.uniform(2, 4))  # consuming and committing
            if cluster is not None:
                # Kill the coordinator; the members must commit again through the others
                # (a commit completed after the kill cannot have gone to it), then restart it.
                letter, victim = coordinator_of(cluster, group)
                killed_at = now()
                victim.kill()
                wait_for(
                    members,
                    lambda: all(rec.commits_by(m.name, since=killed_at + 0.2) for m in members),
                    RECOVER_S,
                    lambda: f"every member to commit through the other brokers after broker {letter} (the coordinator) was "
                    f"killed (now: {describe_assignments(members)}; commits since: "
                    f"{[rec.commits_by(m.name, since=killed_at + 0.2) for m in members]})",
                )
                carried_on = now() - killed_at
                attempts = restart(victim)
                ready_at = now()
                kills.append(dict(n=i, broker=letter, carried_on=carried_on, down=ready_at - killed_at, attempts=attempts))
                continue
            killed_at = now()
            broker.kill()
            time.sleep(rng.uniform(0.5, 2.0))
            attempts = restart(broker)
            ready_at = now()
            # Progress: every member commits again (its offsets after the restart).
            wait_for(
                members,
                lambda: all(rec.commits_by(m.name, since=ready_at) for m in members),
                RECOVER_S,
                lambda: f"every member to commit again after restart {i} (now: {describe_assignments(members)}; "
                f"commits since: {[rec.commits_by(m.name, since=ready_at) for m in members]})",
            )
            kills.append(dict(n=i, down=ready_at - killed_at, attempts=attempts, recovered=now() - ready_at))
        wait_for(
            members,
            lambda: settled(members, PARTITIONS, balanced=True),
            RECOVER_S,
            lambda: f"{MEMBERS} members with balanced, disjoint assignments after the restarts (now: {describe_assignments(members)})",
        )
        time.sleep(2)
        feeder.stop()
        wait_for(members, lambda: all_processed(rec, feeder), DRAIN_S, lambda: unprocessed(rec, feeder))
        final = describe_assignments(members)
        for m in members:
            m.stop()
        for m in members:
            m.wait_closed()
        assert not member_errors(members), member_errors(members)
        problems, stats = check_run(rec, feeder)
        # One more crash with the group empty: its last commits must survive it too.
        if cluster is not None:
            # (read through the other two while the coordinator is down)
            _, victim = coordinator_of(cluster, group)
            victim.kill()
            check_committed(bootstrap, group, topic, PARTITIONS, rec, problems)
            restart(victim)
        else:
            broker.kill()
            time.sleep(rng.uniform(0.5, 2.0))
            restart(broker)
            check_committed(bootstrap, group, topic, PARTITIONS, rec, problems)
        note(
            [
                f"groups crash {protocol} (seed {seed}): {KILLS} SIGKILLs while consuming (and one after); "
                + "; ".join(
                    (
                        f"kill {k['n']}: broker {k['broker']} (the coordinator), every member committing again "
                        f"through the others {k['carried_on']:.1f} s after the kill, restarted, listening after {k['down']:.1f} s"
                        if "broker" in k
                        else f"kill {k['n']}: listening again after {k['down']:.1f} s"
                        + f", all members committing again {k['recovered']:.1f} s later"
                    )
                    + (f" ({k['attempts']} attempts)" if k["attempts"] > 1 else "")
                    for k in kills
                )
                + f"; at the end {final}",
                f"  {stats['delivered']} records produced, {stats['processed']} processed ({stats['duplicates']} duplicates), "
                f"{stats['commits']} partition commits ({stats['commit_errors']} failed), "
                f"{len(rec.client_errors)} client errors reported (e.g. broker down)",
            ]
        )
        if cluster is not None and set(problems.items) == {"duplicate of a committed record"}:
            # Only the symptom of a known Sluice bug, and nothing else: xfail with the details.
            details = problems.items["duplicate of a committed record"]
            pytest.xfail(f"{KNOWN_FAILOVER_BUG} Here: {len(details)} committed records read again, e.g. {details[0]}")
        problems.raise_if_any(f"groups crash {protocol} (seed {seed})")
    finally:
        stop_all(members, feeder)
        try:
            delete_topic(admin, topic)
        except Exception as e:  # (the broker may be down after a failure; its data goes with it)
            print(f"could not delete {topic}: {e!r}")


# (cluster mode: each kill waits for the group to move to another broker, about 6-15 s)
@pytest.mark.timeout(240 if cluster_mode() else 120)
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_group_survives_broker_crash(crash_target, protocol):
    seed = int(os.environ.get("SLUICE_GROUPS_CRASH_SEED") or random.randrange(1 << 32))
    print(f"groups crash test: seed {seed} (SLUICE_GROUPS_CRASH_SEED={seed} replays the kill schedule)")
    if cluster_mode():
        broker = SluiceCluster(log_prefix=f"sluice-groups-crash-{protocol}", fixed_ports=True)
    else:
        port = free_ports(1)[0]
        broker = SluiceBroker(kafka_addr=f"127.0.0.1:{port}", log_name=f"sluice-groups-crash-{protocol}.log")
    try:
        broker.start()
        crash_scenario(broker, protocol, seed)
    finally:
        broker.stop()
