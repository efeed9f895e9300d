"""What a stopped launch leaves on a node is undone: its processes, and the build lock of a DeepSpeed op
build it killed half way (every later DeepSpeed start would wait on it for ever), unless a build still runs."""

import os
import shutil
import subprocess
import sys
import time

from clustercheck.onnode import source

SWEEP = source("sweep.py").decode()


def layout(tmp_path):
    root = tmp_path / "torch_extensions"
    old = root / "py311_cpu" / "cpu_adam"
    new = root / "py311_cpu" / "fused_adam"
    old.mkdir(parents=True)
    new.mkdir(parents=True)
    (old / "lock").write_text("")
    past = time.time() - 3600
    os.utime(old / "lock", (past, past))   # another run's, before this launch started
    stamp = tmp_path / ".started"
    stamp.write_text("")
    os.utime(stamp, (past + 60, past + 60))
    (new / "lock").write_text("")          # this launch's build, killed half way
    return root, stamp, old / "lock", new / "lock"


def sweep(root, stamp, tag="CLUSTERCHECK_RUN=none"):
    return subprocess.run([sys.executable, "-c", SWEEP, tag, str(stamp)], capture_output=True, text=True,
                          env=dict(os.environ, TORCH_EXTENSIONS_DIR=str(root)), timeout=60)


def test_the_lock_of_a_build_the_launch_killed_is_removed_and_an_older_one_kept(tmp_path):
    root, stamp, old, new = layout(tmp_path)
    proc = sweep(root, stamp)
    assert not new.exists() and old.exists(), proc.stderr
    assert f"removed the build lock {new}" in proc.stderr


def test_a_lock_stays_while_a_build_runs_on_the_node(tmp_path):
    root, stamp, old, new = layout(tmp_path)
    ninja = tmp_path / "ninja"
    shutil.copy("/bin/sleep", ninja)
    build = subprocess.Popen([str(ninja), "30"])
    try:
        time.sleep(0.2)
        sweep(root, stamp)
        assert new.exists() and old.exists()
    finally:
        build.kill()
        build.wait()


def test_the_processes_of_the_launch_are_killed_and_no_others(tmp_path):
    tag = "CLUSTERCHECK_RUN=test-sweep-%d" % os.getpid()
    ours = subprocess.Popen(["sleep", "60"], env=dict(os.environ, CLUSTERCHECK_RUN=tag.split("=", 1)[1]))
    theirs = subprocess.Popen(["sleep", "60"])
    try:
        sweep(tmp_path / "none", tmp_path / "no-stamp", tag)
        assert ours.wait(5) == -9 and theirs.poll() is None
    finally:
        for proc in (ours, theirs):
            proc.kill()
            proc.wait()
