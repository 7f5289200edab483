"""Property-based test of the HTTP API against its own spec (docs/openapi.yaml), with schemathesis.

Sluice only. The test starts its own `sluice serve` with one API key in a config file (so the
authentication checks have something to check), creates a topic, then lets schemathesis generate
requests from the spec (valid and invalid ones, and sequences of calls) and check every answer:
no 5xx, the status is one the spec lists, the body and headers match the spec's schemas, requests
without or with a wrong key get 401, and invalid requests are refused. Afterwards the broker must
still be running and its log must show no panic.

One check is left out: `positive_data_acceptance`, which expects every schema-valid request to
succeed. Some refusals depend on data no schema can express (an offset past the end of a
partition is 416, `cleanup.policy=compact` in object-storage mode is 400), and those answers are checked by
test_http.py instead.
"""

import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import requests

from conftest import LOG_DIR, REPO_ROOT, SluiceBroker, _die_with_parent, tail

SPEC = REPO_ROOT / "docs" / "openapi.yaml"
KEY = "sk_compat_fuzz_key_0123456789"
EXAMPLES = int(os.environ.get("SLUICE_HTTP_FUZZ_EXAMPLES", "40"))
FUZZ_TIMEOUT_S = 300
READY_S = 30


@pytest.fixture(scope="module")
def keyed_broker(request):
    if request.config.getoption("--bootstrap"):
        pytest.skip("starts its own broker with an API key; not with --bootstrap")
    if request.config.getoption("--target") != "sluice":
        pytest.skip("the HTTP API is Sluice's; Kafka has none")
    data_dir = tempfile.mkdtemp(prefix="sluice-http-fuzz-")
    config = Path(data_dir) / "sluice.toml"
    config.write_text(
        "[[http_api_keys]]\n"
        'name = "fuzz"\n'
        f'sha256 = "{hashlib.sha256(KEY.encode()).hexdigest()}"\n'
        'read = ["*"]\nwrite = ["*"]\nadmin = ["*"]\n'
    )
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    log_path = LOG_DIR / "sluice-http-fuzz.log"
    log = open(log_path, "wb")
    cmd = [str(SluiceBroker.binary()), "serve", "--config", str(config), "--data-dir", str(Path(data_dir) / "data"),
           "--kafka-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            cwd=data_dir, preexec_fn=_die_with_parent)
    found = threading.Event()
    url = {}

    def read_output():
        for line in proc.stdout:
            log.write(line)
            log.flush()
            m = re.search(rb"http listening on (127\.0\.0\.1:\d+)", line)
            if m:
                url["http"] = "http://" + m.group(1).decode()
            if b"kafka listening on" in line:
                found.set()
        log.close()

    reader = threading.Thread(target=read_output, daemon=True)
    reader.start()
    try:
        if not found.wait(READY_S) or "http" not in url:
            pytest.fail(f"sluice serve did not start:\n{tail(log_path)}", pytrace=False)
        yield proc, url["http"], log_path
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        reader.join(5)
        shutil.rmtree(data_dir, ignore_errors=True)


def test_http_api_against_its_spec(keyed_broker):
    proc, url, log_path = keyed_broker
    auth = {"Authorization": f"Bearer {KEY}"}
    # Data for the generated requests to find: the spec's example topic, with a record.
    r = requests.post(f"{url}/topics", json={"name": "orders", "partitions": 3}, headers=auth, timeout=30)
    assert r.status_code == 201, r.text
    r = requests.post(f"{url}/topics/orders/records", json={"value": "x", "partition": 0}, headers=auth, timeout=30)
    assert r.status_code == 200, r.text
    st = Path(sys.executable).parent / "schemathesis"
    run = subprocess.run(
        [str(st), "run", str(SPEC), "--url", url, "--header", f"Authorization: Bearer {KEY}",
         "--checks", "all", "--exclude-checks", "positive_data_acceptance",
         "--max-examples", str(EXAMPLES), "--request-timeout", "35", "--seed", "1", "--no-color"],
        cwd=LOG_DIR, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=FUZZ_TIMEOUT_S,
    )
    report = (run.stdout + run.stderr).replace(KEY, "[key]")
    (LOG_DIR / "schemathesis.log").write_text(report)
    assert run.returncode == 0, f"schemathesis found problems:\n{report[-6000:]}"
    assert proc.poll() is None, f"the broker exited during the run:\n{tail(log_path)}"
    time.sleep(0.2)
    assert "panicked" not in log_path.read_text(errors="replace"), tail(log_path)
