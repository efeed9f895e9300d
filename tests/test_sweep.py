"""What a stopped launch leaves on a node is undone: its processes, and the build locks its ranks held when
they were killed (every later DeepSpeed start would wait on them for ever); no other lock is touched."""

import os
import subprocess
import sys

from clustercheck.onnode import buildlocks, source

SWEEP = source("sweep.py").decode()
BUILDLOCKS = os.path.dirname(buildlocks.__file__)
HOLD = """
import os, sys
sys.path.insert(0, sys.argv[3])
import buildlocks
from torch.utils.file_baton import FileBaton
buildlocks.install(sys.argv[2])
assert FileBaton(sys.argv[1]).try_acquire()
os.kill(os.getpid(), 9)   # killed holding it, as a rank the tool stops in the middle of a build
"""


def killed_holding(lock, records):
    """A real FileBaton acquired by a process that records its locks, killed before it released it."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([sys.executable, "-c", HOLD, str(lock), str(records), BUILDLOCKS], timeout=120)
    assert proc.returncode == -9 and lock.exists()


def sweep(records, tag="CLUSTERCHECK_RUN=none"):
    return subprocess.run([sys.executable, "-c", SWEEP, tag, str(records)], capture_output=True, text=True,
                          timeout=60)


def test_the_locks_the_runs_ranks_held_are_removed_and_no_other(tmp_path):
    records = tmp_path / "run" / "build-locks"
    ours = tmp_path / "torch_extensions" / "py311_cpu" / "fused_adam" / "lock"
    killed_holding(ours, records)
    theirs = tmp_path / "torch_extensions" / "py311_cpu" / "cpu_adam" / "lock"   # a build on another node
    killed_holding(theirs, tmp_path / "other-run" / "build-locks")
    proc = sweep(records)
    assert not ours.exists() and theirs.exists(), proc.stderr
    assert f"removed the build lock {ours} left by the stopped run" in proc.stderr
    assert os.listdir(records) == []


def test_a_recorded_lock_released_and_made_again_by_another_build_stays(tmp_path):
    records = tmp_path / "build-locks"
    lock = tmp_path / "torch_extensions" / "op" / "lock"
    killed_holding(lock, records)
    lock.unlink()                      # released (its rank killed before it took the record back) ...
    lock.write_text("")                # ... and made again by a build elsewhere that still runs
    sweep(records)
    assert lock.exists()


def test_a_rank_records_the_locks_it_holds_until_it_releases_them(tmp_path, monkeypatch):
    from torch.utils.file_baton import FileBaton
    monkeypatch.setattr(FileBaton, "try_acquire", FileBaton.try_acquire)   # undone after the test
    monkeypatch.setattr(FileBaton, "release", FileBaton.release)
    records = tmp_path / "build-locks"
    assert buildlocks.install(str(records))
    baton = FileBaton(str(tmp_path / "lock"))
    assert baton.try_acquire()
    [record] = os.listdir(records)
    lines = dict(line.split(" ", 1) for line in (records / record).read_text().splitlines())
    assert lines["lock"] == str(tmp_path / "lock")
    assert os.path.samefile(lines["staged"], tmp_path / "lock")   # the lock is the staged file's hard link
    assert not FileBaton(str(tmp_path / "lock")).try_acquire()   # a waiter records nothing
    assert os.listdir(records) == [record]
    baton.release()
    assert os.listdir(records) == [] and os.listdir(tmp_path) == ["build-locks"]


# The rank killed at each step of taking the lock (the calls buildlocks makes, in their order): the step
# where a SIGKILL used to leave a lock no record named was between torch's O_EXCL create and the record.
KILLED_AT = """
import os, sys
sys.path.insert(0, sys.argv[3])
import buildlocks
from torch.utils.file_baton import FileBaton
step, calls = int(sys.argv[4]), [0]
def counted(real):
    def call(*args, **kwargs):
        calls[0] += 1
        if calls[0] == step:
            os.kill(os.getpid(), 9)
        result = real(*args, **kwargs)
        calls[0] += 1
        if calls[0] == step:
            os.kill(os.getpid(), 9)
        return result
    return call
buildlocks.install(sys.argv[2])
for name in ("open", "write", "close", "link", "makedirs"):
    setattr(buildlocks.os, name, counted(getattr(os, name)))
acquired = FileBaton(sys.argv[1]).try_acquire()
print("steps", calls[0], acquired)
"""


def test_a_rank_killed_at_any_step_of_taking_the_lock_leaves_none_after_the_sweep(tmp_path):
    step, total = 1, None
    while total is None or step <= total:
        case = tmp_path / str(step)
        lock, records = case / "op" / "lock", case / "build-locks"
        lock.parent.mkdir(parents=True)
        proc = subprocess.run([sys.executable, "-c", KILLED_AT, str(lock), str(records), BUILDLOCKS, str(step)],
                              capture_output=True, text=True, timeout=120)
        if proc.returncode == 0:   # past the last step: the lock taken, the count of steps said
            total = int(proc.stdout.split()[1])
            assert lock.exists()
            break
        assert proc.returncode == -9, proc.stderr
        swept = sweep(records)
        assert not lock.exists(), f"killed at step {step}: {swept.stderr}"
        assert sorted(os.listdir(lock.parent)) == [], f"killed at step {step}"
        step += 1
    assert step > 6, "fewer steps than buildlocks makes: the kills reached nothing"


def test_a_rank_killed_while_another_job_holds_the_lock_leaves_that_lock(tmp_path):
    lock, records = tmp_path / "op" / "lock", tmp_path / "build-locks"
    killed_holding(lock, tmp_path / "other-run" / "build-locks")   # another job's, still building
    for step in range(1, 12):
        proc = subprocess.run([sys.executable, "-c", KILLED_AT, str(lock), str(records), BUILDLOCKS, str(step)],
                              capture_output=True, text=True, timeout=120)
        sweep(records)
        assert lock.exists(), f"killed at step {step}: {proc.stdout}"
        if proc.returncode == 0:
            assert proc.stdout.split()[2] == "False"
            break


def test_without_a_records_directory_nothing_is_hooked(monkeypatch):
    monkeypatch.delenv(buildlocks.ENV, raising=False)
    assert not buildlocks.install()


def test_the_processes_of_the_launch_are_killed_and_no_others(tmp_path):
    tag = "CLUSTERCHECK_RUN=test-sweep-%d" % os.getpid()
    ours = subprocess.Popen(["sleep", "60"], env=dict(os.environ, CLUSTERCHECK_RUN=tag.split("=", 1)[1]))
    theirs = subprocess.Popen(["sleep", "60"])
    try:
        sweep(tmp_path / "none", tag)
        assert ours.wait(5) == -9 and theirs.poll() is None
    finally:
        for proc in (ours, theirs):
            proc.kill()
            proc.wait()


def test_the_sweep_run_by_the_launchs_shell_spares_itself_and_the_shell(tmp_path):
    """The launch's shell exports the run's tag, so the sweep carries it too (it used to kill itself)."""
    records = tmp_path / "build-locks"
    lock = tmp_path / "torch_extensions" / "op" / "lock"
    killed_holding(lock, records)
    tag = "CLUSTERCHECK_RUN=test-shell-%d" % os.getpid()
    script = '%s -c "$SWEEP" %s %s; echo shell-went-on' % (sys.executable, tag, records)
    proc = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, SWEEP=SWEEP, CLUSTERCHECK_RUN=tag.split("=", 1)[1]))
    assert proc.returncode == 0 and "shell-went-on" in proc.stdout, proc.stderr
    assert not lock.exists()


