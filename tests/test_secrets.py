"""Secrets never leave the process that holds them: while preflight runs env, net, bench and smoke on this
machine with secret-named variables set, no command line of any process shows a secret's value, and no
report or JSON document carries one."""

import os
import secrets
import subprocess
import sys
import threading
import time

from tests.conftest import ROOT


def command_lines_holding(value: bytes, stop: threading.Event, seen: list) -> None:
    """Every process's command line, sampled until stop: those that hold value (this test's own excepted)."""
    me = str(os.getpid())
    while not stop.is_set():
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or pid == me:
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as handle:
                    line = handle.read()
            except OSError:
                continue
            if value in line:
                seen.append(line.replace(b"\0", b" ")[:300])
        time.sleep(0.05)


def test_no_secret_on_any_command_line_or_in_any_report(tmp_path):
    token = secrets.token_hex(20)
    url_password = secrets.token_hex(6)
    env = dict(os.environ, PYTHONPATH=ROOT,
               NCCL_NET_PLUGIN_AUTH_TOKEN=token, GLOO_APIKEY=token, MASTER_PASSPHRASE=token, TORCH_X_SECRET=token,
               NCCL_DEBUG=f"http://user:{url_password}@proxy.invalid:8080")   # an allowed name, a credential value
    stop, seen = threading.Event(), []
    sampler = threading.Thread(target=command_lines_holding, args=(token.encode(), stop, seen), daemon=True)
    sampler.start()
    try:
        proc = subprocess.run([sys.executable, "-m", "clustercheck", "preflight", "--json", "--reports-dir",
                               str(tmp_path), "--smoke-steps", "12"], capture_output=True, text=True,
                              timeout=600, env=env, cwd=tmp_path)
    finally:
        stop.set()
        sampler.join(5)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    assert '"bench"' in proc.stdout and '"smoke"' in proc.stdout   # the launching stages ran
    assert not seen, seen[:3]
    written = [proc.stdout, proc.stderr] + [open(os.path.join(tmp_path, name), errors="replace").read()
                                            for name in os.listdir(tmp_path) if name.endswith((".md", ".json"))]
    assert len(written) >= 4
    for text in written:
        assert token not in text and url_password not in text
    assert "(set; value not shown, #" in proc.stdout and "http://user:***@proxy.invalid:8080" in proc.stdout
