"""NCCL's RAS asked through the transport (issue 44), the plumbing where it can run: NCCL cannot run here (no GPU),
so one node's RAS port (localhost:28028 inside its namespace) answers with a report recorded from a user's NCCL 2.26.2
job (tests/data/nccl-diag/SOURCES.md, nccl#1911) through tests/ras_replay.py, and the other node's port is closed."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from clustercheck.sandbox import faults

pytestmark = pytest.mark.sandbox
HERE = os.path.dirname(__file__)


def test_stacks_asks_ras_on_every_node_and_says_what_it_answered_and_why_a_node_did_not(box, tmp_path):
    replay, report = os.path.join(box.dir, "ras_replay.py"), os.path.join(box.dir, "ras-report.txt")
    shutil.copy(os.path.join(HERE, "ras_replay.py"), replay)       # where every node sees them
    shutil.copy(os.path.join(HERE, "data", "nccl-diag", "nvidia-nccl-1911-ras-mismatch-2.26.2.txt"), report)
    answering, closed = box.nodes[0], box.nodes[1]
    server = subprocess.Popen(["nsenter", "-t", str(answering.init_pid), "-n", "-u", "-m", "-p", "--", sys.executable,
                               replay, "28028", report, "--text-only"], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "listening"
        nodes = tmp_path / "nodes.txt"
        nodes.write_text(f"{answering.name}\n{closed.name}\n")
        proc = subprocess.run([sys.executable, "-m", "clustercheck", "stacks", str(nodes), "-F", box.ssh_config,
                               "--python", sys.executable, "--match", "no-such-process-44", "--timeout", "20",
                               "--json"], capture_output=True, text=True, timeout=120)
        ras = {f["status"]: f for f in json.loads(proc.stdout)["nccl_ras"]}
        assert "AllGather operation counts" in ras["WARN"]["summary"], ras
        assert "rank 12 (process 323032 on 10.137.190.124, GPU 4)" in " ".join(ras["WARN"]["evidence"])
        assert ras["UNKNOWN"]["nodes"] == [closed.name] and "nothing listens" in ras["UNKNOWN"]["summary"]
        left = faults.node_exec(box, answering.name, ["sh", "-c", "ls /tmp/*nccl_ras_client* 2>/dev/null | wc -l"]).stdout
        assert left.strip() == "0"                                 # the client leaves nothing behind
    finally:
        server.kill()
        server.wait()
