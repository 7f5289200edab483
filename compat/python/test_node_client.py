"""kafkajs (Node.js, pure JavaScript), reported here one pytest test per step.

compat/node/kafkajs_steps.js runs the same steps as the Go programs (test_go_clients.py) as far
as kafkajs has them, and prints one JSON line per step. kafkajs is pinned in
compat/node/package.json and package-lock.json (2.2.4) and installed with `npm ci` into
compat/node/node_modules (git-ignored); compat/run.sh does that when the lock file changed, and
this file does it when node_modules has no kafkajs. The program's stderr is kept in
compat/.logs/node-kafkajs.log.

kafkajs has no assign(), so read_back reads through a consumer group that commits nothing; it
has AlterConfigs but not IncrementalAlterConfigs, and no KIP-848 or share consumer (those steps
are skipped saying so).
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from conftest import COMPAT_DIR, LOG_DIR
from test_go_clients import report_step, run_program, step_names, program_args

NODE_DIR = COMPAT_DIR / "node"
PROGRAM = NODE_DIR / "kafkajs_steps.js"
NPM_CI_S = 300
PROGRAM_S = 600

STEPS = step_names(PROGRAM, r"\['(\w+)', \[")


@pytest.fixture(scope="session")
def node_program():
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed (compat/run.sh installs Debian's nodejs if missing)", pytrace=False)
    if not (NODE_DIR / "node_modules" / "kafkajs" / "package.json").exists():
        log = LOG_DIR / "npm-ci.log"
        with open(log, "wb") as out:
            rc = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=NODE_DIR, stdout=out,
                                stderr=subprocess.STDOUT, timeout=NPM_CI_S).returncode
        if rc != 0:
            pytest.fail(f"npm ci failed ({rc}); {log}:\n{log.read_text(errors='replace')[-3000:]}", pytrace=False)
    return node


_run = {}


@pytest.mark.timeout(NPM_CI_S + PROGRAM_S)
@pytest.mark.parametrize("step", STEPS)
def test_kafkajs(request, broker, step):
    if "run" not in _run:
        node = request.getfixturevalue("node_program")
        args = program_args(request.getfixturevalue("bootstrap"), STEPS, "--")
        _run["run"] = run_program([node, str(PROGRAM), *args], LOG_DIR / "node-kafkajs.log", NODE_DIR, PROGRAM_S)
    report_step(_run["run"], "kafkajs", step, broker.target)
