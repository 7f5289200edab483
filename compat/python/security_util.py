"""Certificates, brokers and client settings for test_security.py.

- `make_pki(dir)`: a test CA, the broker's certificate for 127.0.0.1 and localhost, client
  certificates (one per user name), an expired client certificate and one from a CA the broker
  does not trust, written as PEM files (with the Python `cryptography` package).
- `SecureBroker`: `sluice serve` (conftest's SluiceBroker, local storage) with a PLAINTEXT
  listener plus either a SASL_SSL listener with SCRAM-SHA-512 users (mode "sasl") or an SSL
  listener that requires client certificates (mode "mtls"), optionally with the ACL authorizer.
  Every listener binds 127.0.0.1 on a free port; the ports are read from the broker's log.
- `Creds`: how one client connects (protocol, address, CA, certificate, user and password),
  rendered as librdkafka properties (confluent-kafka, kcat), kafka-python keyword arguments and
  a Java client properties file (Kafka's CLI tools).
- `kcat()`, `java_tool()`: run kcat and Kafka's CLI tools (their classes on the jars of
  ../shared/kafka-baseline, fetched by conftest's KafkaBaselineBroker.lib_dir()), each bounded by
  a timeout.
- `probe_*()`: one client connects and asks for metadata, bounded; None when it got in, else
  what it reported (for the refusal tests).
- `ck_*()`: bounded confluent-kafka operations (produce, read, admin) that return what happened
  (records, Kafka error names) rather than raise, for the ACL tests.
"""

from __future__ import annotations

import datetime
import functools
import ipaddress
import itertools
import logging
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from conftest import (CACHE_DIR, COMPAT_DIR, LOG_DIR, MAVEN_FETCH_S, REPO_ROOT, KafkaBaselineBroker,
                      SluiceBroker, tail)

SCRAM = "SCRAM-SHA-512"
# Mutual TLS: the certificate subject "CN=alice,O=Sluice compat" names the user "alice", as SASL does.
MAPPING_RULES = r"RULE:^CN=([^,]*),.*$/$1/L,DEFAULT"
CLIENT_ORG = "Sluice compat"
LISTENERS_READY_S = 10  # after the first "kafka listening" line, the others must follow within this
TOOL_TIMEOUT_S = 60  # bound on any one client process (kcat, a Kafka CLI tool)


# --------------------------------------------------------------------------- certificates


@dataclass(frozen=True)
class ClientCert:
    subject: str  # as the broker's principal mapping sees it (RFC 2253)
    cert: Path  # PEM certificate
    key: Path  # PEM private key, PKCS#8 unencrypted
    pem: Path  # certificate and key in one file (Java's PEM keystore)


@dataclass(frozen=True)
class Pki:
    dir: Path
    ca: Path  # the CA the broker trusts (client CA) and clients trust (server CA)
    server_cert: Path
    server_key: Path
    clients: dict  # user name -> ClientCert signed by `ca`, valid now
    expired: ClientCert  # CN=alice, signed by `ca`, expired yesterday
    untrusted: ClientCert  # CN=alice, valid, signed by a CA the broker does not know
    untrusted_ca: Path


def _key():
    # P-256 keys: quick to make, and every client here (Java, librdkafka, Python's ssl) and
    # rustls take them.
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(key, path: Path):
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    path.chmod(0o600)


def _cert(subject, key, issuer_name, issuer_key, not_before, not_after, *, ca=False, san=None, usage=None):
    b = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        b = b.add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                key_encipherment=False, data_encipherment=False, key_agreement=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        b = b.add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    else:
        b = b.add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False)
    if san:
        b = b.add_extension(x509.SubjectAlternativeName(san), critical=False)
    if usage:
        b = b.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org)] if org else []
    return x509.Name(attrs + [x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_pki(root: Path, users: tuple[str, ...]) -> Pki:
    """A CA, the broker's certificate (SAN 127.0.0.1 and localhost), a client certificate
    per user (subject CN=<user>,O=Sluice compat), an expired one and an untrusted one."""
    root.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=2)

    def write_cert(cert, path: Path):
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))

    ca_key, ca_name = _key(), _name("Sluice compat test CA")
    ca_cert = _cert(ca_name, ca_key, ca_name, ca_key, start, end, ca=True)
    write_cert(ca_cert, root / "ca.crt")

    server_key = _key()
    server_cert = _cert(
        _name("localhost"), server_key, ca_name, ca_key, start, end,
        san=[x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
        usage=[ExtendedKeyUsageOID.SERVER_AUTH],
    )
    write_cert(server_cert, root / "server.crt")
    _write_key(server_key, root / "server.key")

    def client(file_stem: str, cn: str, issuer_name, issuer_key, not_before, not_after) -> ClientCert:
        key = _key()
        cert = _cert(
            _name(cn, CLIENT_ORG), key, issuer_name, issuer_key, not_before, not_after,
            usage=[ExtendedKeyUsageOID.CLIENT_AUTH],
        )
        cert_path, key_path, pem_path = root / f"{file_stem}.crt", root / f"{file_stem}.key", root / f"{file_stem}.pem"
        write_cert(cert, cert_path)
        _write_key(key, key_path)
        pem_path.write_bytes(cert_path.read_bytes() + key_path.read_bytes())
        pem_path.chmod(0o600)
        return ClientCert(f"CN={cn},O={CLIENT_ORG}", cert_path, key_path, pem_path)

    clients = {u: client(u, u, ca_name, ca_key, start, end) for u in users}
    expired = client(
        "alice-expired", "alice", ca_name, ca_key,
        now - datetime.timedelta(days=10), now - datetime.timedelta(days=1),
    )
    other_key, other_name = _key(), _name("Untrusted test CA")
    write_cert(_cert(other_name, other_key, other_name, other_key, start, end, ca=True), root / "untrusted-ca.crt")
    untrusted = client("alice-untrusted", "alice", other_name, other_key, start, end)
    return Pki(root, root / "ca.crt", root / "server.crt", root / "server.key", clients, expired, untrusted,
               root / "untrusted-ca.crt")


# --------------------------------------------------------------------------- the broker


@functools.lru_cache(maxsize=None)
def sluice_bin() -> Path:
    """The binary under test (SLUICE_BIN, else built with cargo once: conftest's SluiceBroker.binary())."""
    return SluiceBroker.binary()


def sluice_supports(flag: str) -> bool:
    """Whether `sluice serve --help` of the binary under test lists `flag`."""
    try:
        out = subprocess.run([str(sluice_bin()), "serve", "--help"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired, RuntimeError):
        return False
    return flag in out.stdout + out.stderr


class SecureBroker:
    """`sluice serve` with TLS listeners on free 127.0.0.1 ports, in local-disk mode.

    mode "sasl": PLAINTEXT and SASL_SSL (SCRAM-SHA-512; `users` added with `sluice user add`
    before the start; no client certificates). mode "mtls": PLAINTEXT and SSL with
    --tls-client-ca (client certificates required; CN names the user, MAPPING_RULES).
    authorizer: also `--authorizer acl --super-users User:<super_user>`. log_filter: the broker's
    SLUICE_LOG (e.g. "debug"; default info).
    The broker is conftest's SluiceBroker: stopped by its PID, its data directory removed.
    """

    def __init__(self, name: str, pki: Pki, mode: str, users: dict, authorizer: bool = False,
                 super_user: str = "admin", log_filter: str | None = None):
        assert mode in ("sasl", "mtls")
        self.name, self.pki, self.mode, self.users = name, pki, mode, users
        self.secure_protocol = "SASL_SSL" if mode == "sasl" else "SSL"
        args = ["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key),
                "--listeners", f"PLAINTEXT://127.0.0.1:0,{self.secure_protocol}://127.0.0.1:0"]
        if mode == "sasl":
            args += ["--sasl-mechanisms", SCRAM]
        else:
            args += ["--tls-client-ca", str(pki.ca), "--ssl-principal-mapping-rules", MAPPING_RULES]
        if authorizer:
            args += ["--authorizer", "acl", "--super-users", f"User:{super_user}"]
        self.log_path = LOG_DIR / f"sluice-security-{name}.log"
        self.broker = SluiceBroker(log_name=self.log_path.name, storage="local", extra_args=tuple(args),
                                   extra_env={"SLUICE_LOG": log_filter} if log_filter else None)
        self.ports: dict = {}  # "PLAINTEXT" / "SASL_SSL" / "SSL" -> port

    def start(self):
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        self.broker.data_dir = tempfile.mkdtemp(prefix=f"sluice-compat-sec-{self.name}-")
        for user, password in self.users.items():
            add_user(self.broker.data_dir, user, password)
        self.broker.start()
        want = {"PLAINTEXT", self.secure_protocol}
        line = re.compile(r"kafka listening on 127\.0\.0\.1:(\d+)(?: \((\w+)\))?")
        deadline = time.monotonic() + LISTENERS_READY_S
        while True:
            text = self.log_path.read_text(errors="replace")
            self.ports = {m.group(2) or "PLAINTEXT": int(m.group(1)) for m in line.finditer(text)}
            if want <= set(self.ports):
                return
            if time.monotonic() >= deadline:
                raise RuntimeError(f"sluice serve did not log listeners {sorted(want)}:\n{tail(self.log_path)}")
            time.sleep(0.05)

    def addr(self, protocol: str | None = None) -> str:
        return f"127.0.0.1:{self.ports[protocol or self.secure_protocol]}"

    def client(self, user: str, password: str | None = None, cert=None) -> "Creds":
        """How `user` connects to the secure listener: SCRAM-SHA-512 with its password (or
        `password`), or its client certificate (or `cert`; False: none)."""
        if self.mode == "sasl":
            return Creds("SASL_SSL", self.addr(), self.pki.ca, None, user,
                         password if password is not None else self.users.get(user, "no-such-password"))
        chosen = self.pki.clients.get(user) if cert is None else (cert or None)
        return Creds("SSL", self.addr(), self.pki.ca, chosen)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def exit_problem(self) -> str | None:
        return self.broker.exit_problem()

    def stop(self):
        self.broker.stop()


def add_user(data_dir: str, user: str, password: str):
    """`sluice user add USER --mechanism SCRAM-SHA-512 --password-stdin` into data_dir."""
    r = subprocess.run(
        [str(sluice_bin()), "user", "add", user, "--mechanism", SCRAM, "--password-stdin", "--data-dir", data_dir],
        input=password, capture_output=True, text=True, timeout=30,
    )
    if r.returncode != 0:
        raise RuntimeError(f"sluice user add {user} failed: {r.stdout}{r.stderr}")


# --------------------------------------------------------------------------- client settings


@dataclass(frozen=True)
class Creds:
    """How one client connects: protocol, address, and who it is."""

    protocol: str  # PLAINTEXT, SSL or SASL_SSL
    bootstrap: str
    ca: Path | None = None  # the CA the client trusts (TLS)
    cert: ClientCert | None = None  # the client's certificate (mutual TLS)
    user: str | None = None  # SASL
    password: str | None = None
    extra: dict = field(default_factory=dict)  # more librdkafka / Java properties (same names)

    def librdkafka(self) -> dict:
        conf = {"bootstrap.servers": self.bootstrap, "security.protocol": self.protocol}
        if self.ca:
            conf["ssl.ca.location"] = str(self.ca)
        if self.cert:
            conf["ssl.certificate.location"] = str(self.cert.cert)
            conf["ssl.key.location"] = str(self.cert.key)
        if self.user is not None:
            conf.update({"sasl.mechanisms": SCRAM, "sasl.username": self.user, "sasl.password": self.password})
        conf.update(self.extra)
        return conf

    def kafka_python(self) -> dict:
        conf = {"bootstrap_servers": self.bootstrap, "security_protocol": self.protocol}
        if self.ca:
            conf["ssl_cafile"] = str(self.ca)
        if self.cert:
            conf["ssl_certfile"] = str(self.cert.cert)
            conf["ssl_keyfile"] = str(self.cert.key)
        if self.user is not None:
            conf.update(sasl_mechanism=SCRAM, sasl_plain_username=self.user, sasl_plain_password=self.password)
        return conf

    def java_properties(self) -> str:
        props = {"security.protocol": self.protocol}
        if self.ca:
            props.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.ca)})
        if self.cert:
            props.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(self.cert.pem)})
        if self.user is not None:
            props["sasl.mechanism"] = SCRAM
            props["sasl.jaas.config"] = (
                "org.apache.kafka.common.security.scram.ScramLoginModule required "
                f'username="{self.user}" password="{self.password}";'
            )
        props.update(self.extra)
        return "".join(f"{k}={_java_escape(str(v))}\n" for k, v in props.items())

    def as_protocol(self, protocol: str) -> "Creds":
        """The same client set to another security.protocol (what it does not use left out)."""
        tls, sasl = protocol in ("SSL", "SASL_SSL"), protocol.startswith("SASL")
        return Creds(protocol, self.bootstrap, self.ca if tls else None, self.cert if tls else None,
                     self.user if sasl else None, self.password if sasl else None, self.extra)

    def at(self, bootstrap: str) -> "Creds":
        """The same client, pointed at another address."""
        return Creds(self.protocol, bootstrap, self.ca, self.cert, self.user, self.password, self.extra)

    def with_extra(self, props: dict) -> "Creds":
        """The same, with more client properties."""
        return Creds(self.protocol, self.bootstrap, self.ca, self.cert, self.user, self.password, {**self.extra, **props})


def _java_escape(value: str) -> str:
    """A value as java.util.Properties reads it back (backslashes doubled)."""
    return value.replace("\\", "\\\\")


def private_file(workdir: Path, prefix: str, suffix: str, text: str) -> Path:
    """A new file in workdir that only its owner may read (client settings with a password)."""
    fd, path = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=workdir)  # (mode 0600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return Path(path)


# --------------------------------------------------------------------------- kcat and Kafka's CLI tools

KCAT = shutil.which("kcat")


def kcat(creds: Creds, workdir: Path, *args: str, stdin: str | None = None,
         timeout: float = TOOL_TIMEOUT_S) -> subprocess.CompletedProcess:
    """kcat with the client settings in a -F file (the password stays off the command line).
    Without LD_LIBRARY_PATH, so kcat loads the system's librdkafka (built with TLS and SASL), as
    crates/cli/tests/tls.rs runs it. TimeoutExpired is left to the caller (a hang)."""
    conf = private_file(workdir, "kcat-", ".conf",
                        "".join(f"{k}={v}\n" for k, v in creds.librdkafka().items() if k != "bootstrap.servers"))
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    try:
        return subprocess.run([KCAT, "-F", str(conf), "-b", creds.bootstrap, *args], input=stdin,
                              capture_output=True, text=True, timeout=timeout, env=env)
    finally:
        conf.unlink()


_kafka_lib: Path | None = None
_kafka_lib_lock = threading.Lock()


def kafka_lib() -> Path:
    """The jars of Apache Kafka (broker and tools) from ../shared/kafka-baseline (fetched into
    compat/.cache with Maven on first use, as the kafka-baseline target does; once, also when
    several threads ask at the same time)."""
    global _kafka_lib
    with _kafka_lib_lock:
        if _kafka_lib is None:
            baseline = KafkaBaselineBroker(request_log=False)
            if (baseline.kb_dir / "pom.xml").exists():
                _kafka_lib = baseline.lib_dir()
            else:
                _kafka_lib = _own_kafka_lib()
        return _kafka_lib


KAFKA_TOOLS_DIR = COMPAT_DIR / "kafka-tools"


def _own_kafka_lib() -> Path:
    """Without ../shared/kafka-baseline (a clone elsewhere): the same jars from compat's own
    pom (compat/kafka-tools/pom.xml), fetched with Maven into compat/.cache/kafka-tools once."""
    cache = CACHE_DIR / "kafka-tools"
    cache.mkdir(parents=True, exist_ok=True)
    pom = (KAFKA_TOOLS_DIR / "pom.xml").read_bytes()
    if not (cache / "pom.xml").exists() or (cache / "pom.xml").read_bytes() != pom:
        (cache / "pom.xml").write_bytes(pom)
        shutil.rmtree(cache / "lib", ignore_errors=True)
    if not list((cache / "lib").glob("kafka-tools-[0-9]*.jar")):
        r = subprocess.run(
            ["mvn", "-B", "-q", "-Dstyle.color=never", "dependency:copy-dependencies"],
            cwd=cache, capture_output=True, text=True, timeout=MAVEN_FETCH_S,
        )
        if r.returncode != 0:
            raise RuntimeError(f"fetching Kafka's jars failed:\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
    return cache / "lib"


# Kafka's CLI tools the suite runs: name (bin/<name>.sh) -> main class, as in Kafka 4.3.1's jars.
TOOLS = {
    "kafka-acls": "org.apache.kafka.tools.AclCommand",
    "kafka-broker-api-versions": "org.apache.kafka.tools.BrokerApiVersionsCommand",
    "kafka-cluster": "org.apache.kafka.tools.ClusterTool",
    "kafka-configs": "kafka.admin.ConfigCommand",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-share-consumer": "org.apache.kafka.tools.consumer.ConsoleShareConsumer",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-features": "org.apache.kafka.tools.FeatureCommand",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-log-dirs": "org.apache.kafka.tools.LogDirsCommand",
    "kafka-share-groups": "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
}


def tool_cmd(tool: str, bootstrap: str, *args: str, subcommand: str | None = None) -> list[str]:
    """The command line of one of Kafka's CLI tools (TOOLS), as bin/<tool>.sh runs it.
    `subcommand` goes before `--bootstrap-server` (kafka-cluster's argument parser wants it there)."""
    baseline = Path(os.environ.get("KAFKA_BASELINE_DIR", REPO_ROOT.parent / "shared" / "kafka-baseline"))
    log_config = baseline / "config" / "tools-log4j2.xml"
    if not log_config.exists():
        log_config = KAFKA_TOOLS_DIR / "log4j2.xml"
    return [
        "java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
        f"-Dlog4j2.configurationFile={log_config}", "-cp", f"{kafka_lib()}/*", TOOLS[tool],
        *([subcommand] if subcommand else []), "--bootstrap-server", bootstrap, *args,
    ]


def tool(name: str, bootstrap: str, *args: str, subcommand: str | None = None, stdin: str | None = None,
         timeout: float = TOOL_TIMEOUT_S) -> subprocess.CompletedProcess:
    """Runs one of Kafka's CLI tools (TOOLS) over PLAINTEXT to its end (bounded: TimeoutExpired
    fails the test); `stdin` is its input, else none."""
    return subprocess.run(tool_cmd(name, bootstrap, *args, subcommand=subcommand), input=stdin,
                          stdin=None if stdin is not None else subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)


def java_tool(tool: str, creds: Creds, workdir: Path, *args: str, stdin: str | None = None,
              timeout: float = TOOL_TIMEOUT_S) -> subprocess.CompletedProcess:
    """One of Kafka's CLI tools (TOOLS), as bin/<tool>.sh runs it, with `--bootstrap-server`
    and `--command-config <client properties file>` from creds. TimeoutExpired is left to the
    caller."""
    props = private_file(workdir, f"{tool}-", ".properties", creds.java_properties())
    cmd = tool_cmd(tool, creds.bootstrap, "--command-config", str(props), *args)
    try:
        return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)
    finally:
        props.unlink()


# --------------------------------------------------------------------------- connection probes
#
# Each probe makes one client connect and ask for metadata, bounded in time, and returns None
# when that worked, else the text of what the client reported (its exception and log lines),
# for the test to match against what it expects (authentication failed, certificate expired,
# ...). A probe that neither connects nor fails within its bound returns a text that says so.

PROBE_S = 4  # how long a probe lets its client try (a refusal shows within the first attempt)


_probe_ids = itertools.count()


class _Lines(logging.Handler):
    """Keeps the messages of the records it is given; only those logged by the named threads
    when `threads` is given (probes run side by side in one process)."""

    def __init__(self, threads: set | None = None):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.threads = threads

    def emit(self, record):
        if self.threads is not None and record.threadName not in self.threads:
            return
        try:
            self.lines.append(record.getMessage())
        except Exception:  # a message that does not format: keep going
            self.lines.append(str(record.msg))


def _collecting_logger(name: str) -> tuple[logging.Logger, _Lines]:
    """A logger of its own (not propagated to pytest's) that keeps every line it is given."""
    logger = logging.getLogger(f"compat-security.{name}.{next(_probe_ids)}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    handler = _Lines()
    logger.addHandler(handler)
    return logger, handler


def probe_confluent(creds: Creds, seconds: float = PROBE_S) -> str | None:
    """confluent-kafka (librdkafka): a Producer asks for metadata; its error callback and log
    lines are what it reported. Stops at the first reported error."""
    from confluent_kafka import KafkaException, Producer

    errors: list[str] = []
    logger, lines = _collecting_logger("confluent")
    conf = dict(creds.librdkafka(), error_cb=lambda e: errors.append(str(e)), logger=logger,
                **{"client.id": "compat-security-probe"})
    p = Producer(conf)
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            try:
                p.list_topics(timeout=0.5)
                return None
            except KafkaException as e:
                errors.append(str(e))
            p.poll(0.1)  # serves the error callback and the logger
            if any("FAIL" in line or "ERROR" in line or "error" in line for line in lines.lines) or any(
                "Local: Broker transport failure" not in e and "timed out" not in e.lower() for e in errors
            ):
                break
        return "\n".join(errors + lines.lines) or f"no metadata and no error within {seconds} s"
    finally:
        p.flush(1)


def probe_kafka_python(creds: Creds, seconds: float = PROBE_S) -> str | None:
    """kafka-python: a KafkaAdminClient bootstraps (it retries until bootstrap_timeout_ms and
    then raises); its exception and the warnings it logged are what it reported."""
    from kafka import KafkaAdminClient

    client_id = f"compat-security-probe-{next(_probe_ids)}"
    # kafka-python logs from its IO thread, named after the client id.
    handler = _Lines(threads={f"kafka-io-{client_id}", threading.current_thread().name})
    kafka_logger = logging.getLogger("kafka")
    old_level = kafka_logger.level
    kafka_logger.addHandler(handler)
    kafka_logger.setLevel(logging.INFO)
    try:
        admin = KafkaAdminClient(**creds.kafka_python(), client_id=client_id,
                                 bootstrap_timeout_ms=int(seconds * 1000), request_timeout_ms=int(seconds * 1000))
        try:
            admin.list_topics()
        finally:
            admin.close()
        return None
    except Exception as e:
        return "\n".join([f"{type(e).__name__}: {e}"] + handler.lines)
    finally:
        kafka_logger.removeHandler(handler)
        kafka_logger.setLevel(old_level)


def probe_kcat(creds: Creds, workdir: Path, seconds: float = PROBE_S) -> str | None:
    """kcat -L with a metadata timeout; a non-zero exit is its failure, stderr what it said."""
    try:
        r = kcat(creds, workdir, "-L", "-m", str(max(1, int(seconds))), timeout=seconds + 20)
    except subprocess.TimeoutExpired:
        return f"kcat -L did not end within {seconds + 20} s (a hang)"
    return None if r.returncode == 0 else f"exit {r.returncode}: {r.stderr}"


def probe_java(creds: Creds, workdir: Path, seconds: float = PROBE_S) -> str | None:
    """Kafka's kafka-topics --list (the Java AdminClient) with its API timeout at `seconds`."""
    ms = str(int(seconds * 1000))
    creds = creds.with_extra({"default.api.timeout.ms": ms, "request.timeout.ms": ms,
                              "socket.connection.setup.timeout.ms": ms})
    try:
        r = java_tool("kafka-topics", creds, workdir, "--list", timeout=seconds + 30)
    except subprocess.TimeoutExpired:
        return f"kafka-topics --list did not end within {seconds + 30} s (a hang)"
    return None if r.returncode == 0 else f"exit {r.returncode}: {r.stdout}{r.stderr}"


# --------------------------------------------------------------------------- client operations
#
# Small, bounded operations with confluent-kafka and kafka-python that return what happened
# (records, offsets, the name of the Kafka error) instead of raising, so a test can say what it
# expected of each client and list every difference at once.

OP_S = 20  # bound on one produce or read


def _quiet_logger(name: str) -> logging.Logger:
    return _collecting_logger(name)[0]


def ck_admin(creds: Creds):
    from confluent_kafka.admin import AdminClient

    return AdminClient(dict(creds.librdkafka(), logger=_quiet_logger("admin"),
                            **{"client.id": "compat-security-admin"}))


def ck_error_name(exc: BaseException) -> str:
    """The Kafka error name (TOPIC_AUTHORIZATION_FAILED, ...) in a confluent-kafka exception,
    else its text."""
    err = exc.args[0] if getattr(exc, "args", None) else None
    name = getattr(err, "name", None)
    return name() if callable(name) else f"{type(exc).__name__}: {exc}"


def ck_result(future, timeout: float = OP_S) -> str | None:
    """None when an AdminClient future succeeded, else the Kafka error's name."""
    try:
        future.result(timeout=timeout)
        return None
    except Exception as e:
        return ck_error_name(e)


def ck_produce(creds: Creds, topic: str, values: list, timeout: float = OP_S, **conf) -> tuple[list, list]:
    """Produce `values` (bytes) with a confluent-kafka Producer (acks=all); returns the
    delivered (partition, offset) pairs and the error names of the failed deliveries."""
    from confluent_kafka import Producer

    delivered, errors = [], []

    def report(err, msg):
        if err is not None:
            errors.append(err.name())
        else:
            delivered.append((msg.partition(), msg.offset()))

    p = Producer(dict(creds.librdkafka(), logger=_quiet_logger("producer"),
                      **{"client.id": "compat-security-producer", "acks": "all",
                         "message.timeout.ms": int(timeout * 1000)}, **conf))
    for i, v in enumerate(values):
        p.produce(topic, key=b"k%d" % i, value=v, on_delivery=report)
    left = p.flush(timeout + 10)
    if left:
        errors.append(f"{left} deliveries not reported within {timeout + 10} s")
    return delivered, errors


def ck_read(creds: Creds, topic: str, n: int, group: str, subscribe: bool = False,
            partitions: int = 1, timeout: float = OP_S) -> tuple[list, str | None]:
    """Read up to n values from the beginning of `topic` with a confluent-kafka Consumer
    (`group` as group.id: assign() of `partitions` partitions, or subscribe() and commit);
    returns the values read and the name of the first error the consumer reported (None: none
    within the bound, or all n read)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer(dict(creds.librdkafka(), logger=_quiet_logger("consumer"),
                      **{"client.id": "compat-security-consumer", "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False}))
    values, error = [], None
    try:
        if subscribe:
            c.subscribe([topic])
        else:
            c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        deadline = time.monotonic() + timeout
        while len(values) < n and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                error = msg.error().name()
                break
            values.append(msg.value())
        if subscribe and values and error is None:
            c.commit(asynchronous=False)
    except Exception as e:
        error = error or ck_error_name(e)
    finally:
        c.close()
    return values, error


def ck_topics(creds: Creds) -> set:
    """The topics Metadata (all topics) lists for this client."""
    return set(ck_admin(creds).list_topics(timeout=OP_S).topics)


def kp_error_name(exc: BaseException) -> str:
    """kafka-python's error class names follow Kafka's (TopicAuthorizationFailedError)."""
    return type(exc).__name__
