"""Security with real clients: SASL_SSL with SCRAM-SHA-512, mutual TLS, and ACLs.

Every test starts `sluice serve` brokers of its own (security_util.SecureBroker: conftest's
SluiceBroker in local-disk mode, every listener on a free 127.0.0.1 port, stopped by its PID
at the end, also on failure), with certificates made here (a CA, the broker's certificate for
127.0.0.1 and localhost, a client certificate per user, an expired one and one from a CA the
broker does not trust). Each broker has a PLAINTEXT listener and one secure listener:

  sasl   SASL_SSL, SCRAM-SHA-512; the users are added with `sluice user add` before the start
  mtls   SSL with --tls-client-ca: client certificates required; the subject
         "CN=alice,O=Sluice compat" names the user "alice" (--ssl-principal-mapping-rules)

so the same user names (alice, bob, dave, admin) mean the same principals in both modes.

The clients, each on both: the Java producer, consumer and AdminClient through Kafka's CLI tools
(kafka-topics, kafka-configs, kafka-acls, kafka-console-producer, kafka-console-consumer, with a
client properties file: PEM trust and key stores, the JAAS line for SCRAM), confluent-kafka,
kafka-python and kcat. Cases: produce and read back (consumer groups too) with the right
credentials; a wrong password and an unknown user; an expired, an untrusted and a missing client
certificate; a PLAINTEXT client on a TLS port and a TLS client on a PLAINTEXT port (each bounded:
a clear failure, no hang); and no password in any broker log line (a broker logging at trace
level).

ACLs (`--authorizer acl --super-users User:admin`; skipped when `sluice serve --help` does not
list --authorizer): no ACL means no access (Metadata hides the topic; produce, create,
auto-create, topic config and SCRAM changes are refused; the same for an anonymous client on the
PLAINTEXT listener); a principal with WRITE but without READ (every client's read refused, and a
group outside his own); a deny rule beating an allow rule; prefixed ACLs (create, auto-create,
produce, read, group); the super user; and kafka-acls adding, listing and removing ACLs (and
refusing to list them to a user without rights). The errors expected are Kafka's
(TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED); the ACL
tests' expectations were also checked against Apache Kafka 4.3.1 with the StandardAuthorizer.

Sluice only (the brokers are its own): skipped with --target kafka-baseline and --bootstrap.
"""

from __future__ import annotations

import concurrent.futures
import json
import re
import secrets
import shutil
import socket
import ssl
import struct
import tempfile
import time
from pathlib import Path

import pytest

import conftest
from compat_util import topic_name, wait_until
from conftest import LOG_DIR
from security_util import (
    KCAT,
    OP_S,
    SecureBroker,
    ck_admin,
    ck_produce,
    ck_read,
    ck_result,
    ck_topics,
    java_tool,
    kafka_lib,
    kcat,
    kp_error_name,
    make_pki,
    probe_confluent,
    probe_java,
    probe_kafka_python,
    probe_kcat,
    sluice_supports,
)

MODES = ("sasl", "mtls")
USERS = ("alice", "bob", "dave", "admin")  # dave never gets an ACL; admin is the super user
# Random per run, so finding one in a log means the broker wrote it there.
PASSWORDS = {u: f"{u}-pw-{secrets.token_hex(10)}" for u in USERS}
WRONG_PASSWORD = "wrong-pw-" + secrets.token_hex(10)
NEW_USER, NEW_PASSWORD = "erin", "erin-pw-" + secrets.token_hex(10)  # set online with kafka-configs
SECRETS = (*PASSWORDS.values(), WRONG_PASSWORD, NEW_PASSWORD)
RECORDS = 20
ACL_EFFECT_S = 10  # an ACL change must be in effect within this


# --------------------------------------------------------------------------- fixtures


class Env:
    """What the tests of this file share: a work directory, the certificates, and every broker
    started (for the liveness check after each test and the log check at the end)."""

    def __init__(self, root: Path):
        self.root = root
        self.pki = make_pki(root / "pki", USERS)
        self.brokers: list[SecureBroker] = []

    def start(self, name: str, mode: str, authorizer: bool = False, log_filter: str | None = None) -> SecureBroker:
        users = PASSWORDS if mode == "sasl" else {}
        b = SecureBroker(name, self.pki, mode, users, authorizer=authorizer, log_filter=log_filter)
        self.brokers.append(b)
        try:
            b.start()
        except Exception:
            b.stop()
            raise
        return b


_env: Env | None = None  # this module's, while its tests run


@pytest.fixture(scope="module")
def env(request):
    global _env
    config = request.config
    if config.getoption("--bootstrap") or config.getoption("--target") != "sluice":
        pytest.skip("starts `sluice serve` brokers of its own with TLS and SASL; only with --target sluice")
    if conftest.STORAGE != "local":
        pytest.skip("its brokers are local-disk ones of its own, the same in every --storage pass: "
                    "they run in the local pass")
    # Kafka's CLI tools: their jars fetched now (Maven, minutes on a fresh machine), outside
    # the time limit of a test.
    kafka_lib()
    root = Path(tempfile.mkdtemp(prefix="sluice-compat-security-"))
    _env = Env(root)
    try:
        yield _env
    finally:
        for b in _env.brokers:
            b.stop()
        _env = None
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(autouse=True)
def _brokers_alive():
    """Fail the test during which one of this file's brokers exited (with its last output)."""
    yield
    for b in (_env.brokers if _env else []):
        problem = b.exit_problem()
        if problem:
            pytest.fail(f"broker {b.name}: {problem}", pytrace=False)


@pytest.fixture(scope="module", params=MODES)
def secure(request, env) -> SecureBroker:
    """A broker per mode, without ACLs: every authenticated client may do everything."""
    b = env.start(f"{request.param}", request.param, log_filter="trace" if request.param == "sasl" else None)
    yield b
    b.stop()


_acl_supported: bool | None = None


@pytest.fixture(scope="module", params=MODES)
def acl(request, env) -> SecureBroker:
    """A broker per mode with the ACL authorizer and User:admin as super user."""
    global _acl_supported
    if _acl_supported is None:
        _acl_supported = sluice_supports("--authorizer")
    if not _acl_supported:
        pytest.skip("this sluice serve has no --authorizer (ACLs not there yet)")
    b = env.start(f"acl-{request.param}", request.param, authorizer=True)
    yield b
    b.stop()


def in_parallel(**calls) -> dict:
    """Run the named zero-argument calls at once (clients are slow to start, Java above all);
    their results by name. An exception is returned as the result, to be reported with the rest."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(calls)) as pool:
        futures = {name: pool.submit(call) for name, call in calls.items()}
        out = {}
        for name, f in futures.items():
            try:
                out[name] = f.result()
            except Exception as e:  # reported by the caller with the other results
                out[name] = e
        return out


def check_all(results: dict, expect) -> None:
    """expect(name, result) -> None when the result is right, else what is wrong; one
    assertion listing every wrong result."""
    wrong = []
    for name, result in results.items():
        problem = result if isinstance(result, Exception) and not isinstance(result, AssertionError) else None
        problem = repr(problem) if problem is not None else expect(name, result)
        if problem:
            wrong.append(f"- {name}: {problem}")
    assert not wrong, "\n".join(["wrong results:"] + wrong)


def lines(n: int, prefix: str) -> list[str]:
    return [f"{prefix}-{i:03d}" for i in range(n)]


def short(text: str | None, n: int = 1500) -> str:
    if text is None:
        return "None"
    kept = [line for line in text.splitlines() if not line.startswith("\tat ")]
    out = "\n".join(kept)
    return out if len(out) <= n else out[:n // 2] + "\n...\n" + out[-n // 2:]


# --------------------------------------------------------------------------- every client, right credentials


def test_java_clients(env, secure):
    """Kafka's CLI tools, i.e. the Java AdminClient (kafka-topics create and describe,
    kafka-configs alter and describe), producer and consumer (console tools, the consumer in a
    group), with a client properties file. (Deleting topics: the Python clients' tests.)"""
    c = secure.client("alice")
    topic = topic_name(f"security-java-{secure.mode}")
    r = java_tool("kafka-topics", c, env.root, "--create", "--topic", topic, "--partitions", "3",
                  "--config", "retention.ms=3600000")
    assert r.returncode == 0 and f"Created topic {topic}" in r.stdout, short(r.stdout + r.stderr)
    sent = lines(RECORDS, f"java-{secure.mode}")
    want = [f"key-{i % 5}\t{v}" for i, v in enumerate(sent)]
    # At once (a JVM takes seconds to start): the consumer waits for what the producer sends.
    out = in_parallel(
        describe=lambda: java_tool("kafka-topics", c, env.root, "--describe", "--topic", topic),
        produce=lambda: java_tool("kafka-console-producer", c, env.root, "--topic", topic,
                                  "--reader-property", "parse.key=true", "--reader-property", "key.separator=:",
                                  stdin="".join(f"key-{i % 5}:{v}\n" for i, v in enumerate(sent))),
        consume=lambda: java_tool("kafka-console-consumer", c, env.root, "--topic", topic, "--from-beginning",
                                  "--group", f"{topic}-group", "--max-messages", str(RECORDS),
                                  "--timeout-ms", "40000", "--formatter-property", "print.key=true"),
        alter=lambda: java_tool("kafka-configs", c, env.root, "--alter", "--entity-type", "topics",
                                "--entity-name", topic, "--add-config", "max.message.bytes=200000"),
    )

    def expect(name, r):
        if r.returncode != 0 or "ERROR" in r.stderr:
            return f"exit {r.returncode}: {short(r.stdout + r.stderr)}"
        if name == "describe" and "PartitionCount: 3" not in r.stdout:
            return f"not 3 partitions: {short(r.stdout)}"
        if name == "consume" and sorted(r.stdout.splitlines()) != sorted(want):
            return f"read {len(r.stdout.splitlines())} records, not the {len(want)} produced: {r.stdout[:300]!r}"
        return None

    check_all(out, expect)
    r = java_tool("kafka-configs", c, env.root, "--describe", "--entity-type", "topics", "--entity-name", topic)
    assert r.returncode == 0 and "retention.ms=3600000" in r.stdout and "max.message.bytes=200000" in r.stdout, \
        short(r.stdout + r.stderr)


def test_confluent_kafka(env, secure):
    """confluent-kafka: AdminClient create/describe/delete, an idempotent producer, a group consumer."""
    from confluent_kafka.admin import NewTopic

    c = secure.client("alice")
    admin = ck_admin(c)
    topic = topic_name(f"security-ck-{secure.mode}")
    assert ck_result(admin.create_topics([NewTopic(topic, 3, 1)])[topic]) is None
    cluster = admin.describe_cluster(request_timeout=OP_S).result(timeout=OP_S)
    assert [f"{n.host}:{n.port}" for n in cluster.nodes] == [secure.addr()], "the broker must advertise its TLS listener"
    sent = [v.encode() for v in lines(RECORDS, f"ck-{secure.mode}")]
    delivered, errors = ck_produce(c, topic, sent, **{"enable.idempotence": True})
    assert not errors and len(delivered) == RECORDS, f"delivered {len(delivered)}, errors {errors}"
    got, error = ck_read(c, topic, RECORDS, group=f"{topic}-group", subscribe=True)
    assert error is None and sorted(got) == sorted(sent), f"read {len(got)} of {RECORDS}, error {error}"
    assert ck_result(admin.delete_topics([topic])[topic]) is None


def test_kafka_python(env, secure):
    """kafka-python: KafkaAdminClient create/delete, producer (idempotent, its default), group consumer."""
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
    from kafka.admin import NewTopic

    conf = secure.client("alice").kafka_python()
    topic = topic_name(f"security-kp-{secure.mode}")
    admin = KafkaAdminClient(**conf, client_id="compat-security-kp")
    try:
        admin.create_topics([NewTopic(topic, 3, 1)])
        assert topic in admin.list_topics()
        sent = [v.encode() for v in lines(RECORDS, f"kp-{secure.mode}")]
        producer = KafkaProducer(**conf, acks="all")
        try:
            for f in [producer.send(topic, key=b"k%d" % i, value=v) for i, v in enumerate(sent)]:
                f.get(timeout=OP_S)
        finally:
            producer.close()
        consumer = KafkaConsumer(topic, **conf, group_id=f"{topic}-group", auto_offset_reset="earliest",
                                 enable_auto_commit=False, consumer_timeout_ms=OP_S * 1000)
        got = []
        try:
            for msg in consumer:
                got.append(msg.value)
                if len(got) == RECORDS:
                    break
            consumer.commit()
        finally:
            consumer.close()
        assert sorted(got) == sorted(sent), f"read {len(got)} of {RECORDS}"
        admin.delete_topics([topic])
    finally:
        admin.close()


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed (compat/run.sh installs it)")
def test_kcat(env, secure):
    """kcat (Debian's librdkafka): metadata, produce (the topic auto-created), read back."""
    c = secure.client("alice")
    topic = topic_name(f"security-kcat-{secure.mode}")
    r = kcat(c, env.root, "-L", "-J")
    assert r.returncode == 0, r.stderr
    brokers = [f"{b['name'].split('/')[0]}" for b in json.loads(r.stdout)["brokers"]]
    assert brokers == [secure.addr()], f"kcat -L lists {brokers}, not the TLS listener {secure.addr()}"
    sent = lines(RECORDS, f"kcat-{secure.mode}")
    r = kcat(c, env.root, "-P", "-t", topic, stdin="".join(v + "\n" for v in sent))
    assert r.returncode == 0 and "ERROR" not in r.stderr, r.stderr
    r = kcat(c, env.root, "-C", "-t", topic, "-o", "beginning", "-e", "-q")
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == sorted(sent), f"kcat read {r.stdout[:300]!r}"


# --------------------------------------------------------------------------- refused credentials

PROBES = {
    "confluent-kafka": lambda creds, root: probe_confluent(creds),
    "kafka-python": lambda creds, root: probe_kafka_python(creds),
    "kcat": lambda creds, root: probe_kcat(creds, root),
    "java": lambda creds, root: probe_java(creds, root),
}
AUTH_FAILED = re.compile(r"invalid credentials", re.I)


def run_probes(root: Path, cases: dict, patterns: dict, timeout_s: float) -> dict:
    """Each probe of each case at once: (case, client) -> (text, seconds). Asserts every one
    failed, within timeout_s, with text matching patterns[case] (a regex, or a dict by client)."""
    calls = {}
    for case, creds in cases.items():
        for client, probe in PROBES.items():
            if client == "kcat" and KCAT is None:
                continue

            def call(probe=probe, creds=creds):
                start = time.monotonic()
                return probe(creds, root), time.monotonic() - start

            calls[f"{case} / {client}"] = call
    results = in_parallel(**calls)

    def expect(name, result):
        text, seconds = result
        case, client = name.split(" / ")
        pattern = patterns[case]
        pattern = pattern.get(client, pattern.get("*")) if isinstance(pattern, dict) else pattern
        if text is None:
            return "connected and got metadata; expected a refusal"
        if seconds > timeout_s:
            return f"took {seconds:.1f} s (more than {timeout_s} s): {short(text)}"
        if pattern is not None and not re.search(pattern, text, re.I):
            return f"did not say /{pattern}/: {short(text)}"
        return None

    check_all(results, expect)
    return results


# kafka-python 3.0.12 often loses the answer to a failed SCRAM exchange when the broker closes
# the connection right after it, and reports "KafkaConnectionError: socket disconnected" for
# that attempt instead: against Apache Kafka 4.3.1 too (4 of 8 first attempts), so a client
# matter. For it, either is a clear refusal; the broker's log line shows the exchange failed.
KAFKA_PYTHON_LOST_ANSWER = re.compile(r"socket disconnected")


@pytest.mark.parametrize("client", [
    "confluent-kafka",
    "kafka-python",
    pytest.param("kcat", marks=pytest.mark.skipif(KCAT is None, reason="kcat is not installed")),
    "java",
])
def test_sasl_wrong_password_and_unknown_user(env, client):
    """A wrong password and an unknown user: the client reports SASL_AUTHENTICATION_FAILED
    ("invalid credentials") within seconds; the broker logs the user and no password; the right
    password still works. A broker of its own: failed logins from one address are slowed (100 ms
    doubling to 5 s), which would add up over many clients on one broker."""
    b = env.start(f"sasl-refused-{client}", "sasl")
    try:
        cases = {
            "wrong password": b.client("alice", password=WRONG_PASSWORD),
            "unknown user": b.client("mallory", password=PASSWORDS["alice"]),
        }

        def probe(creds):
            start = time.monotonic()
            if client == "kafka-python":  # a longer window: more retries (see KAFKA_PYTHON_LOST_ANSWER)
                return probe_kafka_python(creds, seconds=8), time.monotonic() - start
            return PROBES[client](creds, env.root), time.monotonic() - start

        results = in_parallel(**{case: (lambda creds=creds: probe(creds)) for case, creds in cases.items()})

        def expect(name, result):
            text, seconds = result
            if text is None:
                return "connected and got metadata; expected a refusal"
            if not AUTH_FAILED.search(text) and not (client == "kafka-python" and KAFKA_PYTHON_LOST_ANSWER.search(text)):
                return f"no 'invalid credentials' ({seconds:.1f} s): {short(text)}"
            return None

        check_all(results, expect)
        assert re.search(r'SASL authentication failed .*user="(alice|mallory)"', b.log_text()), "no failure line in the log"
        assert probe_confluent(b.client("alice")) is None, "the right password no longer works"
    finally:
        b.stop()


def test_mtls_refused_certificates(env):
    """An expired client certificate, one from a CA the broker does not trust, and none at all,
    with every client: the TLS handshake is refused, each within seconds, saying why."""
    b = env.start("mtls-refused", "mtls")
    try:
        pki = b.pki
        cases = {
            "expired": b.client("alice", cert=pki.expired),
            "untrusted CA": b.client("alice", cert=pki.untrusted),
            "no certificate": b.client("alice", cert=False),
        }
        patterns = {
            "expired": r"certificate[ _]expired",
            # librdkafka 2.16 does not send a certificate the server's CA list does not name.
            "untrusted CA": r"unknown[ _]ca|certificate[ _]required|bad[ _]certificate",
            "no certificate": r"certificate[ _]required|handshake_failure|bad[ _]certificate",
        }
        run_probes(env.root, cases, patterns, timeout_s=40)
        log = b.log_text()
        assert "TLS handshake failed" in log, "no TLS handshake failure line in the broker's log"
        assert probe_confluent(b.client("alice")) is None, "a valid certificate no longer works"
    finally:
        b.stop()


API_VERSIONS_V0 = struct.pack(">hhih", 18, 0, 1, 6) + b"compat"
API_VERSIONS_V0 = struct.pack(">i", len(API_VERSIONS_V0)) + API_VERSIONS_V0
MISMATCH_S = 5  # the broker must have closed a mismatched connection within this


def plaintext_request_on(port: int) -> str | None:
    """A Kafka ApiVersions request in clear text to a TLS port: None when the broker closed the
    connection within MISMATCH_S without a Kafka answer (a TLS alert is fine), else what happened."""
    with socket.create_connection(("127.0.0.1", port), timeout=MISMATCH_S) as s:
        s.sendall(API_VERSIONS_V0)
        got = b""
        deadline = time.monotonic() + MISMATCH_S
        try:
            while time.monotonic() < deadline:
                chunk = s.recv(4096)
                if not chunk:
                    break
                got += chunk
            else:
                return f"connection still open after {MISMATCH_S} s"
        except (ConnectionResetError, BrokenPipeError):
            pass
        except socket.timeout:
            return f"connection still open after {MISMATCH_S} s, read {got[:20]!r}"
    if got and got[0] != 0x15:  # 0x15: a TLS alert record
        return f"answered {got[:20]!r}, neither a TLS alert nor nothing"
    return None


def tls_handshake_on(port: int, ca: Path) -> str | None:
    """A TLS handshake to a PLAINTEXT port: None when it failed within MISMATCH_S, else what happened."""
    ctx = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection(("127.0.0.1", port), timeout=MISMATCH_S) as raw:
        try:
            with ctx.wrap_socket(raw, server_hostname="localhost"):
                return "the TLS handshake succeeded on a PLAINTEXT port"
        except socket.timeout:
            return f"no answer to the TLS handshake within {MISMATCH_S} s"
        except (ssl.SSLError, ConnectionError, OSError):
            return None


@pytest.mark.parametrize("mode", MODES)
def test_protocol_mismatch_fails_fast(env, mode):
    """A PLAINTEXT client on the TLS port and a TLS client on the PLAINTEXT port (and, on SASL_SSL,
    a TLS client without SASL): each client fails clearly and none hangs; the broker closes such
    connections at once and logs what was wrong. A broker of its own, so its first such lines are
    not held back by the log's rate limit."""
    b = env.start(f"mismatch-{mode}", mode)
    try:
        tls_port, plain_port = b.ports[b.secure_protocol], b.ports["PLAINTEXT"]
        assert plaintext_request_on(tls_port) is None
        assert tls_handshake_on(plain_port, b.pki.ca) is None
        good = b.client("alice")
        cases = {
            "PLAINTEXT client on the TLS port": good.as_protocol("PLAINTEXT"),
            "TLS client on the PLAINTEXT port": good.at(b.addr("PLAINTEXT")),
        }
        patterns = {
            "PLAINTEXT client on the TLS port": {
                "confluent-kafka": r"disconnect|closed|security\.protocol",
                "kcat": r"disconnect|closed|security\.protocol",
                "kafka-python": r"disconnect|closed|connection",
                # The Java client reads the TLS alert as a frame size and gives up (its own way).
                "java": None,
            },
            "TLS client on the PLAINTEXT port": {
                "*": r"ssl|handshake|eof|closed|terminated during authentication",
            },
        }
        if mode == "sasl":
            cases["TLS client without SASL on the SASL_SSL port"] = good.as_protocol("SSL")
            patterns["TLS client without SASL on the SASL_SSL port"] = None
        run_probes(env.root, cases, patterns, timeout_s=40)
        log = b.log_text()
        assert "a PLAINTEXT client on an SSL listener?" in log, "no line about a PLAINTEXT client on the TLS listener"
        assert "the client started a TLS handshake on a PLAINTEXT listener" in log, "no line about a TLS client on PLAINTEXT"
        if mode == "sasl":
            assert "before SASL authentication" in log, "no line about a request before SASL authentication"
    finally:
        b.stop()


# --------------------------------------------------------------------------- ACLs


def acl_binding(resource: str, name: str, principal: str, operation: str, permission: str = "ALLOW",
                pattern: str = "LITERAL"):
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    return AclBinding(ResourceType[resource], name, ResourcePatternType[pattern], f"User:{principal}", "*",
                      AclOperation[operation], AclPermissionType[permission])


def add_acls(admin, *bindings):
    for binding, f in admin.create_acls(list(bindings)).items():
        assert ck_result(f) is None, f"CreateAcls {binding}: {ck_result(f)}"


def delete_acls(admin, *bindings):
    from confluent_kafka.admin import AclBindingFilter

    filters = [AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation,
                                b.permission_type) for b in bindings]
    for f in admin.delete_acls(filters).values():
        f.result(timeout=OP_S)


def topic_acls(admin, topic: str) -> set:
    """(user, operation, permission) of the literal ACLs on `topic`, from DescribeAcls."""
    from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    f = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, None, None, AclOperation.ANY,
                         AclPermissionType.ANY)
    return {(b.principal.removeprefix("User:"), b.operation.name, b.permission_type.name)
            for b in admin.describe_acls(f).result(timeout=OP_S)}


def admin_topic(b: SecureBroker, prefix: str, records: int = 3, partitions: int = 1) -> str:
    """A topic created by the super user, with `records` records."""
    from confluent_kafka.admin import NewTopic

    topic = topic_name(f"security-{prefix}")
    admin = ck_admin(b.client("admin"))
    assert ck_result(admin.create_topics([NewTopic(topic, partitions, 1)])[topic]) is None
    delivered, errors = ck_produce(b.client("admin"), topic, [b"from-admin-%d" % i for i in range(records)])
    assert not errors and len(delivered) == records, errors
    return topic


def test_acl_super_user(env, acl):
    """The super user needs no ACL: create, produce, read in a group, describe ACLs, alter configs."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    c = acl.client("admin")
    topic = admin_topic(acl, f"super-{acl.mode}", records=RECORDS)
    got, error = ck_read(c, topic, RECORDS, group=f"{topic}-group", subscribe=True)
    assert error is None and len(got) == RECORDS, f"read {len(got)}, error {error}"
    admin = ck_admin(c)
    assert ck_result(admin.describe_acls(acl_filter_any())) is None
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET)])
    assert ck_result(admin.incremental_alter_configs([res])[res]) is None
    assert topic in ck_topics(c)


def acl_filter_any():
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    return AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                            AclPermissionType.ANY)


def test_acl_no_acl_means_no_access(env, acl):
    """dave has no ACL: the topic is not in his Metadata, and producing to it, creating a topic,
    auto-creating one, altering a topic's config and (SASL) altering SCRAM users are all refused
    with Kafka's authorization errors. The same for an anonymous client on the PLAINTEXT
    listener. (Describing ACLs without rights is checked with kafka-acls: librdkafka 2.16
    reports an empty list where Apache Kafka refuses it with CLUSTER_AUTHORIZATION_FAILED.)"""
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewTopic,
        ResourceType,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    topic = admin_topic(acl, f"noacl-{acl.mode}")
    dave = acl.client("dave")
    admin = ck_admin(dave)
    new_topic = topic_name(f"security-noacl-new-{acl.mode}")
    auto_topic = topic_name(f"security-noacl-auto-{acl.mode}")
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)])
    anonymous = acl.client("dave").as_protocol("PLAINTEXT").at(acl.addr("PLAINTEXT"))
    results = {
        "metadata lists the topic": topic in ck_topics(dave),
        "produce": ck_produce(dave, topic, [b"x"], timeout=10)[1],
        "create topic": ck_result(admin.create_topics([NewTopic(new_topic, 1, 1)])[new_topic]),
        "auto-create by produce": ck_produce(dave, auto_topic, [b"x"], timeout=10)[1],
        "alter topic config": ck_result(admin.incremental_alter_configs([res])[res]),
        "anonymous metadata lists the topic": topic in ck_topics(anonymous),
        "anonymous produce": ck_produce(anonymous, topic, [b"x"], timeout=10)[1],
    }
    want = {
        "metadata lists the topic": False,
        "produce": ["TOPIC_AUTHORIZATION_FAILED"],
        "create topic": "TOPIC_AUTHORIZATION_FAILED",
        "auto-create by produce": ["TOPIC_AUTHORIZATION_FAILED"],
        "alter topic config": "TOPIC_AUTHORIZATION_FAILED",
        "anonymous metadata lists the topic": False,
        "anonymous produce": ["TOPIC_AUTHORIZATION_FAILED"],
    }
    if acl.mode == "sasl":
        upsert = UserScramCredentialUpsertion(NEW_USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                              NEW_PASSWORD.encode())
        results["alter SCRAM users"] = ck_result(admin.alter_user_scram_credentials([upsert])[NEW_USER])
        want["alter SCRAM users"] = "CLUSTER_AUTHORIZATION_FAILED"
    wrong = [f"- {k}: got {results[k]!r}, want {want[k]!r}" for k in want if results[k] != want[k]]
    created = {new_topic, auto_topic} & ck_topics(acl.client("admin"))
    if created:
        wrong.append(f"- topics created without CREATE: {sorted(created)}")
    assert not wrong, "\n".join(["without any ACL:"] + wrong)


def test_acl_principal_without_read(env, acl):
    """bob may WRITE and DESCRIBE the topic (and READ his groups) but not READ it: he produces,
    and every client's read is refused with TOPIC_AUTHORIZATION_FAILED; once READ is granted,
    he reads."""
    topic = admin_topic(acl, f"noread-{acl.mode}")
    group_prefix = f"{topic}-bob"
    admin = ck_admin(acl.client("admin"))
    add_acls(admin,
             acl_binding("TOPIC", topic, "bob", "WRITE"),
             acl_binding("TOPIC", topic, "bob", "DESCRIBE"),
             acl_binding("GROUP", group_prefix, "bob", "READ", pattern="PREFIXED"))
    bob = acl.client("bob")
    delivered, errors = ck_produce(bob, topic, [b"from-bob"])
    assert not errors and len(delivered) == 1, f"bob may WRITE: {errors}"

    def kafka_python_read():
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(**bob.kafka_python(), group_id=None, auto_offset_reset="earliest")
        try:
            consumer.assign([TopicPartition(topic, 0)])
            consumer.seek_to_beginning()
            deadline = time.monotonic() + OP_S
            while time.monotonic() < deadline:
                if consumer.poll(timeout_ms=500):
                    return "read records"
            return "nothing read and no error"
        except Exception as e:
            return kp_error_name(e)
        finally:
            consumer.close()

    calls = {
        "confluent-kafka": lambda: ck_read(bob, topic, 4, group=f"{group_prefix}-ck")[1],
        "kafka-python": kafka_python_read,
        "java": lambda: java_tool("kafka-console-consumer", bob, env.root, "--topic", topic, "--partition", "0",
                                  "--offset", "earliest", "--max-messages", "4", "--timeout-ms", "15000"),
    }
    if KCAT is not None:
        calls["kcat"] = lambda: kcat(bob, env.root, "-C", "-t", topic, "-o", "beginning", "-e", "-q", timeout=OP_S)

    def expect(name, r):
        if name == "confluent-kafka":
            return None if r == "TOPIC_AUTHORIZATION_FAILED" else f"got {r!r}"
        if name == "kafka-python":
            return None if r == "TopicAuthorizationFailedError" else f"got {r!r}"
        text = r.stdout + r.stderr
        if name == "java":
            ok = "TopicAuthorizationException" in text
        else:
            ok = re.search(r"topic authorization failed", text, re.I) is not None
        return None if ok and "from-admin" not in r.stdout else f"exit {r.returncode}: {short(text)}"

    check_all(in_parallel(**calls), expect)
    add_acls(admin, acl_binding("TOPIC", topic, "bob", "READ"))
    wait_until(lambda: len(ck_read(bob, topic, 4, group=f"{group_prefix}-ck", timeout=5)[0]) == 4, ACL_EFFECT_S,
               "bob reading the topic once READ is granted")
    # READ on the topic, but a group outside his prefix: the group is refused.
    got, error = ck_read(bob, topic, 4, group=f"{topic}-not-bobs", subscribe=True, timeout=10)
    assert error == "GROUP_AUTHORIZATION_FAILED" and not got, f"a group bob may not READ: read {len(got)}, error {error}"


def test_acl_deny_beats_allow(env, acl):
    """A DENY rule wins over an ALLOW rule for the same operation (literal over literal, and a
    prefixed DENY over a literal ALLOW); DescribeAcls lists the rules as created; deleting the
    DENY lets the ALLOW work."""
    topic = admin_topic(acl, f"deny-{acl.mode}")
    other = admin_topic(acl, f"deny-prefixed-{acl.mode}")
    admin = ck_admin(acl.client("admin"))
    group = f"{topic}-alice"
    deny_read = acl_binding("TOPIC", topic, "alice", "READ", permission="DENY")
    deny_write_prefixed = acl_binding("TOPIC", other[:-4], "alice", "WRITE", permission="DENY", pattern="PREFIXED")
    add_acls(admin,
             acl_binding("TOPIC", topic, "alice", "READ"),
             acl_binding("TOPIC", topic, "alice", "DESCRIBE"),
             acl_binding("GROUP", group, "alice", "READ"),
             deny_read,
             acl_binding("TOPIC", other, "alice", "WRITE"),
             acl_binding("TOPIC", other, "alice", "DESCRIBE"),
             deny_write_prefixed)
    assert topic_acls(admin, topic) == {("alice", "READ", "ALLOW"), ("alice", "DESCRIBE", "ALLOW"),
                                        ("alice", "READ", "DENY")}
    alice = acl.client("alice")
    got, error = ck_read(alice, topic, 3, group=group, timeout=10)
    assert error == "TOPIC_AUTHORIZATION_FAILED" and not got, f"DENY READ and ALLOW READ: read {len(got)}, error {error}"
    if KCAT is not None:
        r = kcat(alice, env.root, "-C", "-t", topic, "-o", "beginning", "-e", "-q", timeout=OP_S)
        assert re.search(r"topic authorization failed", r.stderr, re.I) and not r.stdout, short(r.stdout + r.stderr)
    _, errors = ck_produce(alice, other, [b"x"], timeout=10)
    assert errors == ["TOPIC_AUTHORIZATION_FAILED"], f"prefixed DENY WRITE and literal ALLOW WRITE: {errors}"
    delete_acls(admin, deny_read, deny_write_prefixed)
    assert topic_acls(admin, topic) == {("alice", "READ", "ALLOW"), ("alice", "DESCRIBE", "ALLOW")}
    wait_until(lambda: len(ck_read(alice, topic, 3, group=group, timeout=5)[0]) == 3, ACL_EFFECT_S,
               "alice reading once the DENY is deleted")
    wait_until(lambda: not ck_produce(alice, other, [b"x"], timeout=5)[1], ACL_EFFECT_S,
               "alice producing once the prefixed DENY is deleted")


def test_acl_prefixed(env, acl):
    """ALLOW on a topic and group prefix: alice creates (kafka-python), auto-creates (confluent
    producer), produces and reads in a group within it; outside it the topic is hidden from her
    Metadata, producing is refused and creating is refused (also by auto-creation)."""
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic

    prefix = topic_name(f"security-team-{acl.mode}") + "."
    outside = admin_topic(acl, f"outside-{acl.mode}")
    admin = ck_admin(acl.client("admin"))
    add_acls(admin, *(acl_binding("TOPIC", prefix, "alice", op, pattern="PREFIXED")
                      for op in ("CREATE", "WRITE", "READ", "DESCRIBE")),
             acl_binding("GROUP", prefix, "alice", "READ", pattern="PREFIXED"))
    alice = acl.client("alice")
    orders, auto = prefix + "orders", prefix + "auto"
    kp_admin = KafkaAdminClient(**alice.kafka_python(), client_id="compat-security-kp")
    try:
        wait_until(lambda: _kp_create(kp_admin, orders) is None, ACL_EFFECT_S, "alice creating a topic under her prefix")
        try:
            kp_admin.create_topics([NewTopic(topic_name("security-elsewhere"), 1, 1)])
            refused = "created"
        except Exception as e:
            refused = kp_error_name(e)
        assert refused == "TopicAuthorizationFailedError", f"creating outside the prefix: {refused}"
    finally:
        kp_admin.close()
    producer = KafkaProducer(**alice.kafka_python(), acks="all")  # idempotent: WRITE on a topic is enough
    try:
        for i in range(RECORDS):
            producer.send(orders, value=b"order-%d" % i).get(timeout=OP_S)
    finally:
        producer.close()
    got, error = ck_read(alice, orders, RECORDS, group=prefix + "group", subscribe=True)
    assert error is None and len(got) == RECORDS, f"read {len(got)} of {RECORDS}, error {error}"
    delivered, errors = ck_produce(alice, auto, [b"auto"], **{"enable.idempotence": True})
    assert not errors and delivered, f"auto-creating {auto} under the prefix: {errors}"
    visible = ck_topics(alice)
    assert {orders, auto} <= visible and outside not in visible, f"alice's Metadata lists {sorted(visible)}"
    _, errors = ck_produce(alice, outside, [b"x"], timeout=10)
    assert errors == ["TOPIC_AUTHORIZATION_FAILED"], f"producing outside the prefix: {errors}"
    elsewhere = topic_name("security-elsewhere-auto")
    _, errors = ck_produce(alice, elsewhere, [b"x"], timeout=10)
    assert errors == ["TOPIC_AUTHORIZATION_FAILED"], f"auto-creating outside the prefix: {errors}"
    assert elsewhere not in ck_topics(acl.client("admin")), "auto-created outside the prefix"


def _kp_create(kp_admin, topic: str) -> str | None:
    from kafka.admin import NewTopic

    try:
        kp_admin.create_topics([NewTopic(topic, 1, 1)])
        return None
    except Exception as e:
        return kp_error_name(e)


def test_acl_kafka_acls_tool(env, acl):
    """kafka-acls as the super user: --add with --producer and --consumer for alice, --list shows
    them, alice's console producer and consumer (group) work, a user without rights cannot list
    ACLs (CLUSTER_AUTHORIZATION_FAILED), --remove takes the consumer rights away again."""
    admin, alice = acl.client("admin"), acl.client("alice")
    topic = topic_name(f"security-cli-{acl.mode}")
    group = f"{topic}-group"
    out = in_parallel(
        add=lambda: java_tool("kafka-acls", admin, env.root, "--add", "--allow-principal", "User:alice", "--producer",
                              "--consumer", "--topic", topic, "--group", group),
        dave=lambda: java_tool("kafka-acls", acl.client("dave"), env.root, "--list"),
    )
    sent = lines(RECORDS, f"cli-{acl.mode}")
    # Once the ACLs are there, at once (a JVM takes seconds to start): the consumer waits for
    # what the producer sends (the topic is auto-created by whichever asks first: CREATE comes
    # with --producer).
    if not isinstance(out["add"], Exception) and out["add"].returncode == 0:
        out.update(in_parallel(
            list=lambda: java_tool("kafka-acls", admin, env.root, "--list", "--topic", topic),
            produce=lambda: java_tool("kafka-console-producer", alice, env.root, "--topic", topic,
                                      stdin="".join(v + "\n" for v in sent)),
            consume=lambda: java_tool("kafka-console-consumer", alice, env.root, "--topic", topic, "--from-beginning",
                                      "--group", group, "--max-messages", str(RECORDS), "--timeout-ms", "40000"),
        ))

    def expect(name, r):
        text = r.stdout + r.stderr
        if name == "list":
            ok = r.returncode == 0 and all(re.search(rf"User:alice.*operation=({op})", text, re.I)
                                           for op in ("WRITE", "READ", "DESCRIBE", "CREATE"))
        elif name == "dave":
            ok = re.search(r"ClusterAuthorization", text) is not None
        elif name == "consume":
            ok = r.returncode == 0 and sorted(r.stdout.splitlines()) == sorted(sent)
        else:
            ok = r.returncode == 0 and "ERROR" not in r.stderr
        return None if ok else f"exit {r.returncode}: {short(text)}"

    check_all(out, expect)
    r = java_tool("kafka-acls", admin, env.root, "--remove", "--force", "--allow-principal", "User:alice",
                  "--consumer", "--topic", topic, "--group", group)
    assert r.returncode == 0, short(r.stdout + r.stderr)
    wait_until(lambda: ck_read(alice, topic, 1, group=group, timeout=5)[1] in
               ("TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED"), ACL_EFFECT_S,
               "alice's reads refused once kafka-acls --remove took READ away")


def test_kafka_configs_describes_scram_user(env, secure):
    """kafka-configs --describe --entity-type users lists a user's SCRAM credential (SASL only),
    as against Apache Kafka."""
    if secure.mode != "sasl":
        pytest.skip("SCRAM users are a SASL matter")
    r = java_tool("kafka-configs", secure.client("admin"), env.root, "--describe", "--entity-type", "users",
                  "--entity-name", "alice")
    assert r.returncode == 0 and "SCRAM-SHA-512=iterations=4096" in r.stdout, short(r.stdout + r.stderr)


# --------------------------------------------------------------------------- secrets


def test_no_password_in_any_log(env):
    """On a broker logging at trace level: logins with the right and a wrong password and as an
    unknown user, and a SCRAM credential set online with kafka-configs (its new user then logs
    in). No password appears in any line of this broker's log, nor of any other broker this file
    started, nor in the users file (salted keys only)."""
    b = env.start("secrets", "sasl", log_filter="trace")
    try:
        assert probe_confluent(b.client("alice")) is None
        assert probe_confluent(b.client("alice", password=WRONG_PASSWORD)) is not None
        assert probe_confluent(b.client("mallory", password=WRONG_PASSWORD)) is not None
        r = java_tool("kafka-configs", b.client("admin"), env.root, "--alter", "--entity-type", "users",
                      "--entity-name", NEW_USER, "--add-config", f"SCRAM-SHA-512=[iterations=8192,password={NEW_PASSWORD}]")
        assert r.returncode == 0, short(r.stdout + r.stderr)
        admin = ck_admin(b.client("admin"))  # (kept: a dropped client cancels its requests)
        described = admin.describe_user_scram_credentials([NEW_USER])[NEW_USER].result(OP_S)
        assert [(str(i.mechanism), i.iterations) for i in described.scram_credential_infos] == [
            ("ScramMechanism.SCRAM_SHA_512", 8192)], described
        wait_until(lambda: probe_confluent(b.client(NEW_USER, password=NEW_PASSWORD)) is None, 10,
                   f"{NEW_USER} logging in with the password set by kafka-configs")
        users_file = Path(b.broker.data_dir) / "security" / "users.json"
        stored = users_file.read_text()
        assert NEW_USER in stored
        leaked = [s for s in SECRETS if s in stored]
        assert not leaked, f"{users_file} holds a password"
    finally:
        b.stop()
    logs = sorted(LOG_DIR.glob("sluice-security-*.log"))
    assert logs
    found = []
    for path in logs:
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for s in SECRETS:
                if s in line:
                    found.append(f"{path.name}:{n}: {line.replace(s, '<PASSWORD>')[:300]}")
    assert not found, "passwords in broker logs:\n" + "\n".join(found[:20])
