"""Hang forensics and `clustercheck stacks` on the sandbox: every node its own process table
(PID namespace) and /tmp, two ranks per node, loud ranks, real torchrun and Gloo.

A rank stops itself mid-run (SIGSTOP, the test-only CLUSTERCHECK_TEST_FREEZE_AT=STEP:RANK set in
its node's sessions): smoke and bench name that node and rank within the stall window and show
where the others wait; on the second node py-spy is hidden, so its ranks answer through the
faulthandler hook. `stacks` folds a script on four nodes into the three alike and the odd one."""

import json
import os
import subprocess
import sys
import time

import pytest

from clustercheck.core.errors import EXIT_FAIL, EXIT_OK
from clustercheck.sandbox import faults
from tests.conftest import gone
from tests.test_sandbox_smoke import LOUD_DDP, run_smoke

pytestmark = pytest.mark.sandbox
PY_SPY = os.path.join(os.path.dirname(sys.executable), "py-spy")
SCRIPT = '''
import sys, time
def wait_for_the_others():
    time.sleep(600)
def read_a_stuck_file():
    time.sleep(600)
(read_a_stuck_file if sys.argv[1] == "odd" else wait_for_the_others)()
'''


def freeze(box, assignment, hide_py_spy=True):
    for node in box.nodes[:2]:
        faults.set_env(box, node.name, assignment)
        for extra in LOUD_DDP:
            faults.set_env(box, node.name, extra)
    if hide_py_spy and os.path.exists(PY_SPY):   # the second node: the faulthandler hook answers
        faults.bind(box, box.nodes[1].name, "/dev/null", PY_SPY)


def test_a_frozen_rank_in_smoke_is_named_with_where_the_others_wait(box, tmp_path):
    freeze(box, "CLUSTERCHECK_TEST_FREEZE_AT=30:3")    # rank 3: the second rank of the second node
    victim = box.nodes[1].name
    started = time.monotonic()
    code, doc, err = run_smoke(box, tmp_path, "--mode", "ddp", "--steps", "200", "--stall-window", "15")
    took = time.monotonic() - started
    assert code == EXIT_FAIL
    [finding] = [f for f in doc["findings"] if f["status"] == "FAIL"]
    assert finding["check"] == "smoke.hang" and finding["nodes"] == [victim], finding
    assert f"rank 3 on {victim} is stopped (SIGSTOP or a debugger)" in finding["summary"], finding
    assert "; the other 3 wait in all_reduce #" in finding["summary"] and "(step 30)" in finding["summary"], finding
    assert "no progress for" in err and "taking every rank's stack" in err
    assert took < 400 - 30, "the deadline, not the stall window, ended the run"
    evidence = " ".join(finding["evidence"])
    assert "ranks 0-2 on" in evidence and "_engine_run_backward" in evidence, finding
    assert gone("entry.py --mode")


def test_a_frozen_rank_in_bench_is_named(box, tmp_path):
    freeze(box, "CLUSTERCHECK_TEST_FREEZE_AT=16384:2", hide_py_spy=False)   # rank 2: first of the second node
    victim = box.nodes[1].name
    nodes = tmp_path / "nodes.txt"
    nodes.write_text("\n".join(node.name for node in box.nodes[:2]) + "\n")
    proc = subprocess.run([sys.executable, "-m", "clustercheck", "bench", str(nodes), "-F", box.ssh_config,
                           "--python", sys.executable, "--nproc-per-node", "2", "--json", "--pairwise", "off",
                           "--min-bytes", "1K", "--max-bytes", "1M", "--stall-window", "10", "--op-timeout", "120",
                           "--timeout", "300"],
                          capture_output=True, text=True, timeout=400)
    assert proc.returncode == EXIT_FAIL, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    [finding] = [f for f in doc["findings"] if f["check"] == "bench.torchrun"]
    assert finding["status"] == "FAIL" and finding["nodes"] == [victim], finding
    assert finding["summary"].startswith("torchrun hung: no progress for"), finding
    assert f"rank 2 on {victim} is stopped" in finding["summary"], finding
    assert gone("clustercheck_bench_worker")


def test_stacks_folds_three_alike_nodes_and_shows_the_odd_one_first(box, tmp_path):
    script = os.path.join(box.dir, "stuck_job.py")   # one path every node sees
    with open(script, "w") as handle:
        handle.write(SCRIPT)
    odd = box.nodes[2].name
    jobs = [subprocess.Popen(["ssh", "-F", box.ssh_config, node.name, f"exec {sys.executable} {script} "
                              f"{'odd' if node.name == odd else 'alike'}"], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for node in box.nodes]
    try:
        nodes = tmp_path / "nodes.txt"
        nodes.write_text("\n".join(node.name for node in box.nodes) + "\n")
        deadline = time.monotonic() + 30
        while True:
            proc = subprocess.run([sys.executable, "-m", "clustercheck", "stacks", str(nodes), "-F", box.ssh_config,
                                   "--python", sys.executable, "--match", "stuck_job.py", "--json"],
                                  capture_output=True, text=True, timeout=120)
            doc = json.loads(proc.stdout)
            if sum(g["count"] for g in doc["groups"]) == 4 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert proc.returncode == EXIT_OK, proc.stdout + proc.stderr
        # each node sees its own process only (its own PID namespace): four processes, not sixteen
        assert [g["count"] for g in doc["groups"]] == [1, 3], doc
        odd_group, alike = doc["groups"]
        assert [p["node"] for p in odd_group["processes"]] == [odd]
        assert odd_group["frames"][0][0] == "read_a_stuck_file"
        assert alike["frames"][0][0] == "wait_for_the_others"
        assert alike["who"].startswith("3 processes on ")
        text = subprocess.run([sys.executable, "-m", "clustercheck", "stacks", str(nodes), "-F", box.ssh_config,
                               "--python", sys.executable, "--match", "stuck_job.py"],
                              capture_output=True, text=True, timeout=120).stdout
        assert text.index("read_a_stuck_file") < text.index("wait_for_the_others"), text
    finally:
        for job in jobs:
            job.kill()
        subprocess.run(["pkill", "-9", "-f", "stuck_job.py"])
