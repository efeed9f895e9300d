"""`clustercheck smoke` on this machine (the local transport, real torchrun, two ranks): a loud
run is judged on its numbers, not on how much it wrote, and a NaN is named as a NaN."""

import json
import os
import sys

from clustercheck.core.errors import EXIT_FAIL
from tests.conftest import clustercheck, gone


def smoke(*args, **env):
    proc = clustercheck("smoke", "--python", sys.executable, "--nproc-per-node", "2", "--json", *args,
                        timeout=600, env=dict(os.environ, **env))
    assert proc.stdout.strip(), proc.stderr[-3000:]
    return proc.returncode, json.loads(proc.stdout)


def test_a_loud_zero3_run_of_200_steps_passes():
    """1 MB of stderr per rank used to fill the pipe the local transport did not read: a false hang."""
    code, doc = smoke("--mode", "zero3", "--steps", "200", CLUSTERCHECK_TEST_STDERR_BYTES="1000000")
    found = {f["check"]: f["status"] for f in doc["findings"]}
    # One node: its hostname at 127.0.0.1 may warn; the run itself must be clean.
    assert all(status == "OK" for check, status in found.items() if check.startswith("smoke.")), doc["findings"]
    assert code in (0, 1) and doc["summary"]["steps"] == 200 and doc["resumed"]["steps"] == 200


def test_a_nan_is_named_as_a_nan_with_its_step_and_rank():
    code, doc = smoke("--mode", "ddp", "--steps", "12", CLUSTERCHECK_TEST_NAN_AT="5:1")
    assert code == EXIT_FAIL
    [finding] = [f for f in doc["findings"] if f["status"] == "FAIL"]
    assert finding["check"] == "smoke.nan" and finding["summary"].startswith("the loss became NAN at step 5 on rank 1")


def test_a_frozen_rank_is_named_with_where_the_other_waits_and_nothing_is_left():
    """Rank 1 stops itself (SIGSTOP) after step 30: the stall window, not the deadline, ends the run;
    the verdict names that rank as stopped and rank 0 as waiting in an all_reduce of step 30."""
    code, doc = smoke("--mode", "ddp", "--steps", "200", "--stall-window", "8", "--timeout", "300",
                      CLUSTERCHECK_TEST_FREEZE_AT="30:1")
    assert code == EXIT_FAIL
    [finding] = [f for f in doc["findings"] if f["status"] == "FAIL"]
    assert finding["check"] == "smoke.hang", finding
    assert finding["summary"].startswith("training failed on localhost (rank 1): no progress for "), finding
    assert "rank 1 on localhost is stopped (SIGSTOP or a debugger)" in finding["summary"], finding
    assert "waits in all_reduce #" in finding["summary"] and "(step 30)" in finding["summary"], finding
    assert any(line.startswith("rank 1 on localhost is stopped") for line in finding["evidence"]), finding
    assert gone("reference_train|clustercheck_hang|train.py", within_s=5)
