"""SIGTERM (Slurm's time limit, `timeout`, systemd) stops the tool as Ctrl-C does: within seconds, with what
was found so far shown and written (the stage in progress UNKNOWN), and nothing left running."""

import json
import os
import signal
import subprocess
import sys
import time

from clustercheck.core.errors import EXIT_INTERRUPTED
from tests.conftest import ROOT, gone


def test_sigterm_during_smoke_keeps_the_findings_so_far_and_leaves_nothing(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "clustercheck", "preflight", "--smoke-steps", "100000",
                             "--reports-dir", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, PYTHONPATH=ROOT), cwd=tmp_path)
    err = ""
    deadline = time.monotonic() + 300
    while "ranks up on" not in err:   # the smoke stage's ranks are running
        assert time.monotonic() < deadline and proc.poll() is None, err[-2000:]
        err += proc.stderr.readline()
    proc.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    out, rest = proc.communicate(timeout=60)
    took = time.monotonic() - sent
    assert proc.returncode == EXIT_INTERRUPTED and took < 10, (proc.returncode, took, rest[-2000:])
    assert "Interrupted (SIGTERM)" in rest
    assert "UNKNOWN smoke was stopped (SIGTERM) before it finished" in out, out
    [report] = [name for name in os.listdir(tmp_path) if name.endswith(".json")]
    doc = json.load(open(tmp_path / report))
    assert doc["stages"]["env"]["status"] == "OK" and doc["stages"]["bench"]["status"] in ("OK", "WARN")
    assert doc["stages"]["smoke"]["status"] == "UNKNOWN"
    assert gone("train_entry.py --mode", within_s=5)
