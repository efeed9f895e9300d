"""What a stopped launch leaves on a node is undone: its processes, and the build lock of a DeepSpeed op
build it killed half way (every later DeepSpeed start would wait on it for ever), unless a build still runs."""

import os
import shutil
import subprocess
import sys
import time

import pytest

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


def sweep(root, stamp, tag="CLUSTERCHECK_RUN=none", *rc):
    return subprocess.run([sys.executable, "-c", SWEEP, tag, str(stamp), *rc], capture_output=True, text=True,
                          env=dict(os.environ, TORCH_EXTENSIONS_DIR=str(root)), timeout=60)


def test_the_lock_of_a_build_the_launch_killed_is_removed_and_an_older_one_kept(tmp_path):
    root, stamp, old, new = layout(tmp_path)
    proc = sweep(root, stamp)
    assert not new.exists() and old.exists(), proc.stderr
    assert f"removed the build lock {new}" in proc.stderr


def test_after_a_run_that_ended_well_every_lock_stays_and_after_one_that_failed_it_goes(tmp_path):
    """torchrun's 0: its ranks released their locks; one left is someone else's, maybe on another node."""
    root, stamp, old, new = layout(tmp_path)
    sweep(root, stamp, "CLUSTERCHECK_RUN=none", "0")
    assert new.exists() and old.exists()
    sweep(root, stamp, "CLUSTERCHECK_RUN=none", "1")
    assert not new.exists() and old.exists()


def fake_compiler(tmp_path, cwd):
    ninja = tmp_path / "ninja"
    shutil.copy("/bin/sleep", ninja)
    return subprocess.Popen([str(ninja), "30"], cwd=cwd)


def test_a_lock_stays_while_a_compiler_works_in_its_directory(tmp_path):
    root, stamp, old, new = layout(tmp_path)
    build = fake_compiler(tmp_path, new.parent)
    try:
        time.sleep(0.2)
        proc = sweep(root, stamp)
        assert new.exists() and old.exists()
        assert f"kept the build lock {new}: process {build.pid} owns it" in proc.stderr
    finally:
        build.kill()
        build.wait()


def test_a_compile_elsewhere_on_the_node_does_not_keep_the_stopped_runs_lock(tmp_path):
    root, stamp, old, new = layout(tmp_path)
    build = fake_compiler(tmp_path, tmp_path)
    try:
        time.sleep(0.2)
        sweep(root, stamp)
        assert not new.exists() and old.exists()
    finally:
        build.kill()
        build.wait()


def test_a_lock_held_open_by_a_live_process_stays(tmp_path):
    root, stamp, old, new = layout(tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", "import os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY); "
                               "print(fd, flush=True); time.sleep(30)", str(new)], stdout=subprocess.PIPE)
    try:
        holder.stdout.readline()
        proc = sweep(root, stamp)
        assert new.exists(), proc.stderr
        assert f"kept the build lock {new}: process {holder.pid} owns it" in proc.stderr
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving the lock to another user needs root")
def test_another_users_lock_stays(tmp_path):
    root, stamp, old, new = layout(tmp_path)
    os.chown(new, 65534, 65534)
    sweep(root, stamp)
    assert new.exists()


def test_the_sweep_run_by_the_launchs_shell_spares_itself_and_the_shell(tmp_path):
    """The launch's shell exports the run's tag, so the sweep and the shell carry it too."""
    root, stamp, old, new = layout(tmp_path)
    tag = "CLUSTERCHECK_RUN=test-shell-%d" % os.getpid()
    script = "%s -c \"$SWEEP\" %s %s; echo shell-went-on" % (sys.executable, tag, stamp)
    proc = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, SWEEP=SWEEP, TORCH_EXTENSIONS_DIR=str(root),
                                   CLUSTERCHECK_RUN=tag.split("=", 1)[1]))
    assert proc.returncode == 0 and "shell-went-on" in proc.stdout, proc.stderr
    assert not new.exists() and old.exists()


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
