"""`clustercheck smoke` against the sandbox: the reference trainer under real torchrun on two
nodes (Gloo), DeepSpeed ZeRO on CPU, a node killed mid-run, a node without deepspeed."""

import importlib.util
import json
import os
import subprocess
import sys
import time

import pytest

from clustercheck.errors import EXIT_FAIL, EXIT_OK
from clustercheck.sandbox import faults
from tests.conftest import gone, leftover

pytestmark = pytest.mark.sandbox
RANKS = "entry.py --mode"


def smoke_argv(box, tmp_path, *args):
    nodes = tmp_path / "nodes.txt"
    nodes.write_text("\n".join(node.name for node in box.nodes[:2]) + "\n")
    return [sys.executable, "-m", "clustercheck", "smoke", str(nodes), "-F", box.ssh_config,
            "--python", sys.executable, "--json", "--timeout", "400", *args]


def run_smoke(box, tmp_path, *args):
    proc = subprocess.run(smoke_argv(box, tmp_path, *args), capture_output=True, text=True, timeout=600)
    assert proc.stdout.strip(), proc.stderr
    return proc.returncode, json.loads(proc.stdout), proc.stderr


@pytest.mark.parametrize("mode", ["ddp", "zero2", "zero3"])
def test_smoke_passes_on_two_nodes(box, tmp_path, mode):
    code, doc, progress = run_smoke(box, tmp_path, "--mode", mode, "--steps", "30")
    assert code == EXIT_OK, [f for f in doc["findings"] if f["status"] != "OK"]
    summary = doc["summary"]
    assert summary["world"] == 2 and summary["mode"] == mode
    assert summary["last_loss"] < 0.8 * summary["first_loss"]
    assert summary["weights_agree"] is True and summary["checkpoint_ok"] is True
    assert any(f["check"] == "smoke.throughput" and "tokens/s per rank" in f["summary"] for f in doc["findings"])
    assert "[smoke] step 30: loss" in progress      # rank 0's progress streamed while it ran
    assert gone(RANKS)


def test_a_node_without_deepspeed_is_an_import_failure_naming_it(box, tmp_path):
    victim = box.nodes[1].name
    site = os.path.dirname(os.path.dirname(importlib.util.find_spec("deepspeed").origin))
    faults.hide_python_packages(box, victim, site, ["deepspeed"])
    code, doc, _ = run_smoke(box, tmp_path, "--mode", "zero2", "--steps", "10")
    assert code == EXIT_FAIL
    [finding] = [f for f in doc["findings"] if f["status"] == "FAIL"]
    assert finding["check"] == "smoke.import" and finding["nodes"] == [victim]
    assert "No module named 'deepspeed'" in " ".join(finding["evidence"])
    assert gone(RANKS)


def test_a_node_killed_mid_run_is_classified_within_the_deadline(box, tmp_path):
    victim = box.nodes[1]
    proc = subprocess.Popen(smoke_argv(box, tmp_path, "--mode", "ddp", "--preset", "small", "--steps", "5000",
                                       "--micro-batch", "2"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while leftover(RANKS) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(4)   # into training
        faults.crash(box, victim.name)
        start = time.monotonic()
        out, err = proc.communicate(timeout=300)
        elapsed = time.monotonic() - start
    finally:
        proc.kill()
    assert proc.returncode == EXIT_FAIL, err
    doc = json.loads(out)
    [finding] = [f for f in doc["findings"] if f["status"] == "FAIL"]
    assert finding["check"] == "smoke.node-down" and finding["nodes"] == [victim.name], finding
    assert elapsed < 120, elapsed      # well before the 400 s deadline
    assert gone(RANKS) and gone("torch.distributed.run")
