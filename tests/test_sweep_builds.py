"""Runs stopped at many points of a real torch C++ extension build, and of the load of one already built,
leave no lock that the next start waits on for ever; a build of another job keeps its lock and finishes.

The op is a small C++ library built by torch.utils.cpp_extension.load (ninja, c++, the linker), as
DeepSpeed builds its ops, on the CPU. Each run carries a run tag, as the ranks of a launch do, and is
stopped where it is seen to be (the lock made, ninja started, cc1plus compiling, the linker linking):
frozen (the sweep then kills it, as when the tool stops a launch) or killed (torchrun killed its ranks
before the sweep ran). The sweep then runs as the launch's shell runs it, and the next load must get past
the lock; a chain of such runs ends with a load that must succeed, bounded by a deadline."""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from clustercheck.core.inventory import Node
from clustercheck.onnode import buildlocks, source
from clustercheck.ranks.runs import Launch
from clustercheck.ranks.torchrun import env_file, launch_env, run_tag, torchrun_command

pytest.importorskip("torch.utils.cpp_extension")

SWEEP = source("sweep.py").decode()
BUILDLOCKS = os.path.dirname(buildlocks.__file__)
LOAD_DEADLINE_S = 240   # a hung load waits on the lock for ever; a build on a busy 2-core host takes seconds
OP = r"""
#include <map>
#include <regex>
#include <sstream>
#include <string>
extern "C" int clustercheck_words(const char *text) {
    std::regex word("([a-z]+)([0-9]*)");
    std::map<std::string, int> seen;
    std::stringstream words(text);
    std::string one;
    while (words >> one) if (std::regex_match(one, word)) seen[one] += 1;
    return (int)seen.size();
}
"""
LOAD = """
import ctypes, os, sys, torch.utils.cpp_extension as ext
sys.path.insert(0, os.environ["BUILDLOCKS_DIR"])
import buildlocks
buildlocks.install()   # as train_entry.py does in every rank: $CLUSTERCHECK_LOCK_RECORDS
path = ext.load("clustercheck_words", [sys.argv[1]], build_directory=sys.argv[2], is_python_module=False)
print(ctypes.CDLL(path).clustercheck_words(b"a1 b2 a1 c"))
"""
# Where a build is stopped: (what is seen, how it is stopped); each point is reached only if the earlier
# stopped runs left nothing to wait on.
BUILD_POINTS = (("lock", signal.SIGSTOP), ("ninja", signal.SIGKILL), ("cc1plus", signal.SIGSTOP),
                ("cc1plus", signal.SIGKILL), ("ld", signal.SIGSTOP))
LOAD_POINTS = (("lock", signal.SIGSTOP), ("ninja", signal.SIGKILL), ("lock", signal.SIGKILL),
               ("ninja", signal.SIGSTOP))


class Op:
    def __init__(self, tmp_path, tag):
        self.source = tmp_path / "words.cpp"
        self.source.write_text(OP)
        self.build = tmp_path / "torch_extensions" / "py_cpu" / "clustercheck_words"
        self.build.mkdir(parents=True)
        self.lock = self.build / "lock"
        self.records = tmp_path / "run" / "build-locks"
        self.tag = tag
        self.env = dict(os.environ, CLUSTERCHECK_RUN=tag.split("=", 1)[1], MAX_JOBS="1", BUILDLOCKS_DIR=BUILDLOCKS,
                        CLUSTERCHECK_LOCK_RECORDS=str(self.records),
                        TORCH_EXTENSIONS_DIR=str(tmp_path / "torch_extensions"))

    def start(self, env=None):
        return subprocess.Popen([sys.executable, "-c", LOAD, str(self.source), str(self.build)],
                                env=env or self.env, start_new_session=True, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def sweep(self):
        return subprocess.run([sys.executable, "-c", SWEEP, self.tag, str(self.records)], env=self.env,
                              capture_output=True, text=True, timeout=60)


def processes(marker, names=None):
    """{pid: program} of the processes whose environment holds `marker` (ninja starts each compiler in a
    process group of its own: the environment, inherited, is what they share with the run), of `names` only
    if given."""
    found = {}
    for pid in os.listdir("/proc"):
        try:
            name = open(f"/proc/{pid}/comm").read().strip() if pid.isdigit() else None
            if name and (names is None or name in names) and \
                    marker.encode() in open(f"/proc/{pid}/environ", "rb").read().split(b"\0"):
                found[int(pid)] = name
        except OSError:
            pass
    return found


def stop_at(run, op, seen, how, marker=None):
    """Stop the run the moment `seen` shows; False if it ended first. SIGSTOP freezes all its processes
    (the sweep kills them); SIGKILL kills its process group (Python and ninja, as torchrun kills its ranks),
    and the compiler, in a group of its own, runs on."""
    marker = marker or op.tag
    while run.poll() is None:   # a short sleep each time: the scheduler wakes a sleeper first on a busy host
        if (seen == "lock" and op.lock.exists()) or (seen != "lock" and processes(marker, (seen,))):
            # a process listed a moment ago may have ended since (a compiler finishing): it is gone, as wanted
            with contextlib.suppress(ProcessLookupError):
                if how == signal.SIGKILL:
                    os.killpg(run.pid, how)
            for pid in processes(marker) if how == signal.SIGSTOP else ():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, how)
            return True
        time.sleep(0.001)
    return False


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def loads(op, env=None):
    run = op.start(env)
    try:
        out, err = run.communicate(timeout=LOAD_DEADLINE_S)
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
        pytest.fail(f"the load still waited after {LOAD_DEADLINE_S} s (lock {op.lock} exists: {op.lock.exists()})")
    assert run.returncode == 0 and out.strip() == "3", err[-2000:]


def stop_runs(op, points):
    """Each point: a run stopped there, the sweep, then no lock left. Returns the points really reached."""
    reached = []
    for seen, how in points:
        run = op.start()
        stopped = stop_at(run, op, seen, how)
        left = op.lock.exists()
        swept = op.sweep()
        run.wait(30)   # killed by the sweep if frozen: it is gone once the sweep returns
        assert not op.lock.exists(), f"stopped at {seen} ({how.name}): {swept.stderr}"
        if stopped and left:
            reached.append(seen)
            assert "removed the build lock" in swept.stderr
    return reached


def test_runs_stopped_across_a_build_and_a_load_leave_no_lock_and_the_next_load_succeeds(tmp_path):
    op = Op(tmp_path, "CLUSTERCHECK_RUN=test-build-%d" % os.getpid())
    reached = stop_runs(op, BUILD_POINTS)
    # the lock, ninja and the compiler are seconds long: a test that never stopped a build there proves nothing
    assert {"lock", "ninja", "cc1plus"} <= set(reached), reached
    loads(op)
    assert (op.build / "clustercheck_words.so").exists() and not op.lock.exists()
    reached = stop_runs(op, LOAD_POINTS)
    assert reached, "no load was stopped while it held the lock"
    loads(op)


def test_a_build_of_another_job_keeps_its_lock_and_finishes(tmp_path):
    op = Op(tmp_path, "CLUSTERCHECK_RUN=test-other-%d" % os.getpid())
    marker = "OTHER_JOB=%d" % os.getpid()
    other_env = {k: v for k, v in op.env.items() if k != "CLUSTERCHECK_RUN"}   # its own run, its own records
    other = op.start(dict(other_env, OTHER_JOB=marker.split("=")[1],
                          CLUSTERCHECK_LOCK_RECORDS=str(tmp_path / "other-run" / "build-locks")))
    try:
        assert stop_at(other, op, "cc1plus", signal.SIGSTOP, marker), "the other job's build ended before it compiled"
        swept = op.sweep()
        assert op.lock.exists(), swept.stderr
        assert "removed" not in swept.stderr
        for pid in processes(marker):
            os.kill(pid, signal.SIGCONT)
        out, err = other.communicate(timeout=LOAD_DEADLINE_S)
        assert other.returncode == 0 and out.strip() == "3", err[-2000:]
        assert not op.lock.exists()
    finally:
        for pid in processes(marker):
            os.kill(pid, signal.SIGKILL)
        if other.poll() is None:
            other.kill()
        other.wait()


def test_a_launch_stopped_as_the_tool_stops_it_while_its_rank_compiles_leaves_no_lock(tmp_path):
    """The launch's own shell (ranks/torchrun.py) with a one-node torchrun whose rank builds the op: TERM
    to its process group once the compiler runs and KILL a second later, as the transport stops a job."""
    op = Op(tmp_path, "CLUSTERCHECK_RUN=unused")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    script = run_dir / "rank.py"
    script.write_text(LOAD)
    node = Node(name="n1", python=sys.executable)
    launch = Launch(name="smoke", script_paths={"n1": str(script)}, args=[str(op.source), str(op.build)],
                    nproc={"n1": 1}, rdzv_port=free_port(), timeout_s=60,
                    env={"TORCH_EXTENSIONS_DIR": op.env["TORCH_EXTENSIONS_DIR"], "MAX_JOBS": "1",
                         "BUILDLOCKS_DIR": BUILDLOCKS})
    run_id = "test-launch-%d" % os.getpid()
    (run_dir / "env").write_bytes(env_file(launch_env(node, launch, None, run_id)))
    command = torchrun_command(node, launch, 1, "127.0.0.1", run_id, str(run_dir / "env"))
    marker = "CLUSTERCHECK_RUN=" + run_tag(run_id, node)
    shell = subprocess.Popen(["/bin/sh", "-c", command], start_new_session=True, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        while shell.poll() is None and not processes(marker, ("cc1plus",)):
            time.sleep(0.01)
        assert shell.poll() is None and op.lock.exists(), "the rank's build ended before the compiler was seen"
        os.killpg(shell.pid, signal.SIGTERM)
        time.sleep(1)
        os.killpg(shell.pid, signal.SIGKILL)
        shell.wait()
        deadline = time.monotonic() + 60
        while processes(marker) and time.monotonic() < deadline:   # the sweep carries the run's tag too
            time.sleep(0.05)
        assert not processes(marker) and not op.lock.exists()
    finally:
        for pid in processes(marker):
            os.kill(pid, signal.SIGKILL)
        if shell.poll() is None:
            os.killpg(shell.pid, signal.SIGKILL)
            shell.wait()
    loads(op)
