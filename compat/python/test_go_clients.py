"""The Go clients, franz-go (kgo + kadm) and IBM/sarama, reported here one pytest test per step.

The programs live in compat/go (one module, go.mod and go.sum pinned: franz-go 1.22.3, kadm 1.20.0,
sarama 1.61.1). They are built once per session with `go build` into compat/.cache/go-bin
(git-ignored; Go's own module and build caches live in ~/go and ~/.cache/go-build, so a second
build takes a second or two). Each program runs its steps in order against the session's broker
and prints one JSON line per step: {"client", "step", "outcome": passed/failed/skipped,
"reason", "seconds"}; its stderr (progress, client errors) is kept in compat/.logs/go-<client>.log.
Each pytest test then reports its step's outcome, the first one running the program inside its
own time limit (as test_java.py does with Maven).

The steps (compat/go/cmd/*/main.go say what each checks): create_topic, produce_idempotent,
read_back (the full read-back check of compat_util.py, ported to Go), list_offsets,
group_classic, group_consumer_protocol (KIP-848; franz-go only), describe_topics, configs,
create_partitions, delete_records, describe_cluster, list_describe_groups, share_group (KIP-932;
franz-go only), transactions, delete_topic. A step a client has no API for is skipped with that
reason; a step that needs an earlier one that did not pass is skipped saying which.

Known exceptions, reported as skipped with the reason: transactions against Sluice (not
implemented yet; the broker refuses FindCoordinator for a transactional id, see
test_transactions.py), and share groups in cluster mode (not served yet).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import CACHE_DIR, COMPAT_DIR, LOG_DIR, cluster_mode

GO_DIR = COMPAT_DIR / "go"
GO_BIN = CACHE_DIR / "go-bin"
GO_BUILD_S = 900  # the first build downloads the modules from the Go module proxy
PROGRAM_S = 600  # one client's steps (each bounded to 90 s inside the program)

# client name in the report -> the program under compat/go/cmd
GO_CLIENTS = {"franz-go": "franz", "sarama": "sarama"}

SHARE_CLUSTER_SKIP = "cluster mode does not serve share groups yet (docs/share-groups.md, Limits)"
# What the clients say when Sluice refuses a transactional producer (FindCoordinator for a
# transactional id answers CLUSTER_AUTHORIZATION_FAILED): franz-go names the code, sarama
# prints Kafka's text for it, kafkajs gives up on the coordinator.
TXN_REFUSED = re.compile(
    r"CLUSTER_AUTHORIZATION_FAILED|not authorized to send this request type|Failed to find group coordinator|"
    r"transactions are not supported"
)
TXN_NOT_SUPPORTED = "not supported by Sluice yet: transactions (the transactional producer is refused at once: {})"


# Failures of Sluice that Kafka does not have, known and reported to the broker's engineers:
# (client, step) -> (a pattern the failure's message must match, what is wrong). Against Sluice
# such a failure is reported as xfail with both; any other failure of the step fails, and a pass
# is a pass (then the entry can go).
KNOWN_SLUICE_FAILURES: dict[tuple[str, str], tuple[re.Pattern, str]] = {
    # (None now: ListOffsets by time inside a compressed batch, the last one, is fixed.)
}


def step_names(source: Path, pattern: str) -> list[str]:
    """The steps a program declares, in order, read from its source (as test_java.py reads @Test)."""
    return re.findall(pattern, source.read_text())


def go_steps(client: str) -> list[str]:
    return step_names(GO_DIR / "cmd" / GO_CLIENTS[client] / "main.go", r'\{Name: "(\w+)"')


class ProgramRun:
    """One run of a step program: its JSON report by step, exit status and log."""

    def __init__(self, returncode, results: dict, log: Path, problem: str | None = None):
        self.returncode = returncode
        self.results = results  # step -> {"outcome", "reason", "seconds"}
        self.log = log
        self.problem = problem  # why there is no report at all (build failed, timeout)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no output)"


def run_program(cmd: list[str], log: Path, cwd: Path, timeout_s: float) -> ProgramRun:
    """Run a step program, stderr to `log`; parse the JSON lines of its stdout."""
    results = {}
    with open(log, "wb") as err:
        err.write(("$ " + " ".join(cmd) + "\n").encode())
        err.flush()
        try:
            proc = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=err, timeout=timeout_s,
                                  stdin=subprocess.DEVNULL)
            rc, out = proc.returncode, proc.stdout
        except subprocess.TimeoutExpired as e:
            rc, out = f"timed out after {timeout_s} s", e.stdout or b""
    for line in out.decode(errors="replace").splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(r, dict) and "step" in r:
            results[r["step"]] = r
    return ProgramRun(rc, results, log)


def program_args(bootstrap: str, steps: list[str], flag: str) -> list[str]:
    """-bootstrap plus a skip (with its reason) for each step this run must not make."""
    args = [flag + "bootstrap", bootstrap]
    if cluster_mode() and "share_group" in steps:
        args += [flag + "skip", f"share_group={SHARE_CLUSTER_SKIP}"]
    return args


def report_step(run: ProgramRun, client: str, step: str, target: str):
    """Turn one step's outcome into this pytest test's outcome."""
    if run.problem:
        pytest.fail(run.problem, pytrace=False)
    r = run.results.get(step)
    if r is None:
        pytest.fail(
            f"no result for {client} step {step} (exit status {run.returncode}); last lines of {run.log}:\n{run.log_tail()}",
            pytrace=False,
        )
    reason = r.get("reason") or ""
    if r["outcome"] == "skipped":
        pytest.skip(reason or "skipped by the program")
    if r["outcome"] == "failed":
        if step == "transactions" and target == "sluice" and TXN_REFUSED.search(reason):
            pytest.skip(TXN_NOT_SUPPORTED.format(reason.splitlines()[0]))
        known = KNOWN_SLUICE_FAILURES.get((client, step))
        if known and target == "sluice" and known[0].search(reason):
            pytest.xfail(f"{known[1]}. Here: {reason}")
        pytest.fail(f"{client} {step}: {reason}", pytrace=False)


@pytest.fixture(scope="session")
def go_programs() -> dict[str, Path]:
    """Build every Go program once per session; client -> binary."""
    go = shutil.which("go")
    if go is None:
        pytest.fail("go is not installed (compat/run.sh installs Debian's golang-go if missing)", pytrace=False)
    GO_BIN.mkdir(parents=True, exist_ok=True)
    log = LOG_DIR / "go-build.log"
    cmd = [go, "build", "-o", str(GO_BIN) + "/", "./cmd/..."]
    with open(log, "wb") as out:
        try:
            rc = subprocess.run(cmd, cwd=GO_DIR, stdout=out, stderr=subprocess.STDOUT, timeout=GO_BUILD_S,
                                env=dict(os.environ, GOFLAGS=os.environ.get("GOFLAGS", "") + " -mod=readonly")).returncode
        except subprocess.TimeoutExpired:
            rc = f"timed out after {GO_BUILD_S} s"
    if rc != 0:
        pytest.fail(f"go build failed ({rc}); {log}:\n{log.read_text(errors='replace')[-3000:]}", pytrace=False)
    return {client: GO_BIN / name for client, name in GO_CLIENTS.items()}


_runs: dict[str, ProgramRun] = {}


def go_run(request, client: str) -> ProgramRun:
    if client not in _runs:
        binary = request.getfixturevalue("go_programs")[client]
        bootstrap = request.getfixturevalue("bootstrap")
        args = program_args(bootstrap, go_steps(client), "-")
        _runs[client] = run_program([str(binary), *args], LOG_DIR / f"go-{client}.log", GO_DIR, PROGRAM_S)
    return _runs[client]


# The first test of a client runs its program, inside its own time limit.
@pytest.mark.timeout(GO_BUILD_S + PROGRAM_S)
@pytest.mark.parametrize("step", go_steps("franz-go"))
def test_franz_go(request, broker, step):
    report_step(go_run(request, "franz-go"), "franz-go", step, broker.target)


@pytest.mark.timeout(GO_BUILD_S + PROGRAM_S)
@pytest.mark.parametrize("step", go_steps("sarama"))
def test_sarama(request, broker, step):
    report_step(go_run(request, "sarama"), "sarama", step, broker.target)
