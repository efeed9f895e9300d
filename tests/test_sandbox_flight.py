"""While the job runs (issue 50) on a 3-node sandbox, 2 ranks per node: the user's job (tests/data/injob/
watch_train.py: DDP on Gloo) started on every node by the torchrun lines `clustercheck launch` prints, with the
check inside the job put before the script and TORCH_FR_BUFFER_SIZE set as a user would. The job's own ranks name
what is wrong while it runs: the rank that never entered a collective (in the world, in a subgroup), from the live
ranks (`clustercheck stacks`) and from the records they wrote (`clustercheck explain DIR`); a collective called with
another size (Gloo aborts: explain names a desync from the job's log); a node whose CPUs are taken mid-run, named
by --watch within 30 steps, and nobody named over 1,000 clean steps."""

import json
import os
import re
import shlex
import shutil
import subprocess
import time

import pytest

from clustercheck.core.errors import EXIT_OK
from clustercheck.onnode.sweep import kill_tagged
from clustercheck.sandbox import cgroups, faults
from tests.conftest import clustercheck
from tests.pipes import Lines, newer_than_stall
from tests.test_sandbox_injob import code_on_nodes
from tests.test_sandbox_launch import launch

pytestmark = pytest.mark.sandbox
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "tests", "data", "injob", "watch_train.py")
RANKS_PER_NODE = 2
STALL_S = 4
NAMED = re.compile(r"clustercheck injob: watch: rank (\d+) on (\S+) is slowing the job ([\d.]+)x since step (\d+) "
                   r".*?named at step (\d+)")


class Job:
    """The printed torchrun lines run on the first three nodes at once over OpenSSH, each node's output read as it
    comes; every process of the job carries a tag, so that all of them go at the end (the ranks too, which torchrun
    starts in sessions of their own)."""

    def __init__(self, box, tmp_path, name, env, options=""):
        self.box, self.nodes = box, [n.name for n in box.nodes[:3]]
        self.tag = f"CLUSTERCHECK_TEST_JOB={os.getpid()}-{time.monotonic_ns()}"   # one whole entry of environ
        self.inventory = tmp_path / "nodes.txt"      # written by launch(), with the slots
        self.reports = os.path.join(box.dir, f"flight-{name}")
        shutil.rmtree(self.reports, ignore_errors=True)
        script = os.path.join(box.dir, "watch_train.py")      # where every node sees it (their /tmp is their own)
        shutil.copy(SCRIPT, script)
        proc = launch(box, tmp_path, "--script", script, "--json", slots=RANKS_PER_NODE)
        assert proc.returncode == EXIT_OK, proc.stdout[-2000:] + proc.stderr[-2000:]
        wrapper = (f"-m clustercheck.injob --budget 30 --on-fail warn --quiet --reports-dir {self.reports} "
                   f"--stall-dump {STALL_S} {options}-- {shlex.quote(script)}")
        variables = (f"PYTHONPATH={code_on_nodes(box)} TORCH_FR_BUFFER_SIZE=2000 {self.tag} "
                     + " ".join(f"{k}={v}" for k, v in env.items()))
        self.procs, self.err, self.out = {}, {}, {}
        for node, line in json.loads(proc.stdout)["commands"]["torchrun"].items():
            assert f"--nproc-per-node {RANKS_PER_NODE} " in line and f" {shlex.quote(script)}" in line, line
            line = line.replace(f" {shlex.quote(script)}", f" {wrapper}", 1)
            self.procs[node] = subprocess.Popen(
                ["ssh", "-F", box.ssh_config, node, f"mkdir -p /tmp/flight && cd /tmp/flight && {variables} {line}"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.err[node], self.out[node] = Lines(self.procs[node].stderr), Lines(self.procs[node].stdout)

    def folder(self):
        found = [os.path.join(root, d) for root, dirs, _ in os.walk(os.path.join(self.reports, "flight-recorder"))
                 for d in dirs]
        return found[0] if len(found) == 1 else None

    def said(self, text):
        return next((at for lines in self.err.values() for at in [lines.said(text)] if at is not None), None)

    def wait_stalled(self, step, deadline_s=300):
        """Every rank's record of the stall after `step` written (each node's local rank 0 says it; every rank's
        dump is newer than the stall's start)."""
        line = f"no step for {STALL_S} s (after step {step}):"
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            said = [lines.said(line) for lines in self.err.values()]
            folder = self.folder()
            dumps = [os.path.join(folder, n) for n in os.listdir(folder)] if folder else []
            if None not in said and len(dumps) == 3 * RANKS_PER_NODE and newer_than_stall(dumps, min(said), STALL_S):
                return folder
            if any(p.poll() is not None for p in self.procs.values()):
                break
            time.sleep(0.5)
        raise AssertionError(f"no stall after step {step} dumped by every rank: {self.tail()}")

    def stop(self):
        """Every process of the job gone (killed), the nodes' pipes closed."""
        assert kill_tagged(self.tag.encode()), "the job's processes still ran 10 s after they were killed"
        for proc in self.procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def text(self, node):
        return self.out[node].text() + self.err[node].text()

    def tail(self):
        return "\n".join(f"--- {node}\n{''.join(line for _, line in self.err[node].lines)[-2000:]}"
                         for node in self.nodes)


def missing_of(doc):
    found = [f for f in doc["findings"] if f["check"] == "flight.missing"]
    assert len(found) == 1, json.dumps(doc["findings"], indent=1)
    return found[0]


def test_a_rank_stopped_after_1000_clean_steps_is_named_live_and_from_its_records_and_nobody_before(box, tmp_path):
    """Rank 3 (the second node's second rank) stops before its forward at step 1,001, so before the step's
    all_reduce; the others wait in it. Over the 1,000 steps before, --watch named nobody. `clustercheck stacks` on
    the live job names rank 3, its node and the all_reduce with its sequence number, and no other rank; the records
    each rank wrote when no step came for 4 s say the same through `clustercheck explain DIR`."""
    job = Job(box, tmp_path, "world", {"WATCH_STEPS": "1100", "WATCH_STOP_RANK": "3", "WATCH_STOP_AT": "1001",
                                       "WATCH_STOP_S": "300"}, options="--watch --watch-every 50 ")
    stopped_node = job.nodes[3 // RANKS_PER_NODE]
    try:
        folder = job.wait_stalled(1000, deadline_s=400)
        live = clustercheck("stacks", str(job.inventory), "-F", job.box.ssh_config, "--match", "watch_train.py",
                            "--json", timeout=180)
    finally:
        job.stop()
    stacks = json.loads(live.stdout)
    said = missing_of(stacks["flight_recorder"])
    assert said["summary"].startswith(f"rank(s) 3 on {stopped_node} never entered all_reduce #"), said["summary"]
    assert said["nodes"] == [stopped_node] and stacks["flight_recorder"]["stopped"] == [3], json.dumps(said)
    waiting = " ".join(said["evidence"])
    assert all(f"rank {r}: waits in all_reduce #" in waiting for r in (0, 1, 2, 4, 5)), waiting
    assert not [n for n in job.nodes if "is slowing the job" in job.text(n)], job.tail()
    explained = clustercheck("explain", folder, "--json", timeout=180)
    doc = json.loads(explained.stdout)
    assert doc["flight_recorder"]["stopped"] == [3], explained.stdout[-3000:]
    from_files = missing_of(doc)
    assert from_files["summary"].startswith("rank(s) 3 never entered all_reduce #"), from_files["summary"]
    seq = said["summary"].split("#", 1)[1].split()[0]
    assert from_files["summary"].split("#", 1)[1].split()[0] == seq      # the same collective, live and on disk
    assert explained.returncode == 2


def test_a_rank_missing_from_a_subgroups_all_reduce_names_the_subgroup(box, tmp_path):
    """Ranks 2-5 (the second and third nodes) all_reduce in a group of their own after each step; rank 4 stops
    before the subgroup's at step 30. The records name the subgroup and its ranks, rank 4 as the one that never
    entered it, and where ranks 2, 3 and 5 wait."""
    job = Job(box, tmp_path, "subgroup", {"WATCH_STEPS": "200", "WATCH_SUBGROUP": "2,3,4,5", "WATCH_STOP_IN":
                                          "subgroup", "WATCH_STOP_RANK": "4", "WATCH_STOP_AT": "30",
                                          "WATCH_STOP_S": "300"})
    try:
        folder = job.wait_stalled(30)
    finally:
        job.stop()
    explained = clustercheck("explain", folder, "--json", timeout=180)
    doc = json.loads(explained.stdout)
    said = missing_of(doc)
    assert said["summary"].startswith("rank(s) 4 never entered all_reduce #"), said["summary"]
    assert "ranks 2-5" in said["summary"] and "the world" not in said["summary"], said["summary"]
    waiting = " ".join(said["evidence"])
    assert all(f"rank {r}: waits in all_reduce #" in waiting for r in (2, 3, 5)), waiting
    assert doc["flight_recorder"]["stopped"] == [4] and explained.returncode == 2


def test_a_collective_called_with_another_size_is_named_a_desync_from_the_jobs_log(box, tmp_path):
    """At step 20 rank 3 all_reduces 4,096 numbers where the others give 1,024: Gloo checks the sizes it receives
    and the rank with the smaller buffer aborts (the others may wait on, in Gloo's next read, until its timeout: the
    job is stopped a few seconds after the abort, as a user would); explain on the nodes' logs names a desync in the
    code, with Gloo's words."""
    job = Job(box, tmp_path, "desync", {"WATCH_STEPS": "200", "WATCH_ODD_RANK": "3", "WATCH_STOP_AT": "20"})
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and job.said("op.preamble.length") is None and \
                any(p.poll() is None for p in job.procs.values()):
            time.sleep(0.5)
        time.sleep(5)
    finally:
        job.stop()
    logs = tmp_path / "logs"
    logs.mkdir()
    for node in job.nodes:
        (logs / f"{node}.log").write_text(job.text(node))
    assert job.said("op.preamble.length") is not None, job.tail()
    explained = clustercheck("explain", str(logs), "--json", timeout=180)
    doc = json.loads(explained.stdout)
    cause = doc["cause"] or {}
    assert cause.get("kind") == "desync", json.dumps(cause, indent=1)[:3000] + job.tail()
    assert "op.preamble.length <= op.nbytes" in " ".join(cause["evidence"]), cause["evidence"]
    assert "same shapes and dtypes" in cause["remedy"]


def test_a_collective_called_with_another_size_that_hangs_is_named_from_the_records(box, tmp_path):
    """8 numbers against 4 among 6 ranks: the ring's pieces are too small for Gloo's size check and the ranks hang,
    as NCCL's do on any mismatch. The records each rank wrote once no step came name the all_reduce, its sequence
    number, and rank 3 as the one that called it with other sizes."""
    job = Job(box, tmp_path, "desync-hang", {"WATCH_STEPS": "200", "WATCH_ODD_RANK": "3", "WATCH_STOP_AT": "20",
                                             "WATCH_ODD_SIZES": "8,4"})
    try:
        folder = job.wait_stalled(19)
    finally:
        job.stop()
    explained = clustercheck("explain", folder, "--json", timeout=180)
    doc = json.loads(explained.stdout)
    found = [f for f in doc["findings"] if f["check"] == "flight.mismatch"]
    assert len(found) == 1, json.dumps(doc["findings"], indent=1)[:4000]
    assert "rank(s) 3" in found[0]["summary"] and "all_reduce" in found[0]["summary"], found[0]["summary"]
    assert doc["flight_recorder"]["mismatch"], explained.stdout[-3000:]
    assert explained.returncode == 2


def test_a_node_whose_cpus_are_taken_mid_run_is_named_by_the_watch_within_30_steps(box, tmp_path):
    """Once the job trains, the second node's ranks are put under a CPU quota of 0.1 CPUs: they are frozen in bursts
    (90 ms of each 100 ms) wherever in the step the quota runs out, and every rank waits for them in the all_reduce.
    --watch names a rank of that node from its threads' wait for a CPU (the window's numbers rank 0 judged are kept
    in a file, said when it does not), and no other node, within 30 steps of the step it dates the slowdown from."""
    numbers = os.path.join(box.dir, "quota-windows.jsonl")
    if os.path.exists(numbers):
        os.unlink(numbers)
    job = Job(box, tmp_path, "quota", {"WATCH_STEPS": "3000", "CLUSTERCHECK_WATCH_NUMBERS": numbers},
              options="--watch --watch-every 10 --watch-windows 2 ")
    slow = job.nodes[1]
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and job.said("READY (") is None and \
                all(p.poll() is None for p in job.procs.values()):
            time.sleep(0.5)           # the check's verdict (READY or, as warned, NOT READY): the job trains next
        assert job.said("READY (") is not None, job.tail()
        time.sleep(5)                 # some windows of normal steps first: the ranks' own best
        assert cgroups.cpu_quota_running(box, slow, 0.1, "watch_train.py") >= RANKS_PER_NODE   # its agent too
        while time.monotonic() < deadline and job.said("is slowing the job") is None:
            time.sleep(0.5)
    finally:
        job.stop()
    named = [m for node in job.nodes for m in NAMED.findall(job.text(node))]
    assert not [m for m in named if m[1] != slow], job.tail()      # a healthy node is never named
    watch = [line for node in job.nodes for _, line in job.err[node].lines if "injob: watch" in line]
    kept = open(numbers).read()[-3000:] if os.path.exists(numbers) else "(no window judged)"
    assert named, "\n".join(watch[-20:] + [kept]) or job.tail()
    rank, host, _, since, at = named[0]
    assert host == slow and int(rank) // RANKS_PER_NODE == 1, job.tail()
    assert int(at) - int(since) <= 30, job.tail()


def test_a_link_slowed_mid_run_is_named_from_the_ranks_sockets_and_no_rank_is_blamed(box, tmp_path):
    """Once the job trains, the second node's link is slowed to 20 Mbit/s both ways: every rank waits alike in the
    all_reduce, so no rank's own work grew. --watch says the job's steps are slower and names that node's link from
    what the ranks' own sockets carried (TCP's counters), and names no rank."""
    job = Job(box, tmp_path, "link", {"WATCH_STEPS": "3000"}, options="--watch --watch-every 10 --watch-windows 2 ")
    slow = job.nodes[1]
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and job.said("READY (") is None and \
                all(p.poll() is None for p in job.procs.values()):
            time.sleep(0.5)
        assert job.said("READY (") is not None, job.tail()
        time.sleep(5)
        faults.slow_link(box, slow, 20)
        while time.monotonic() < deadline and job.said(f"{slow}'s link moves the job's traffic") is None:
            time.sleep(0.5)
    finally:
        job.stop()
    lines = [line for node in job.nodes for _, line in job.err[node].lines if "clustercheck injob: watch:" in line]
    assert not [m for node in job.nodes for m in NAMED.findall(job.text(node))], "\n".join(lines)   # no rank blamed
    said = [line for line in lines if f"{slow}'s link moves the job's traffic" in line]
    assert said and "the job's steps are" in said[0] and "every rank only waits for it" in said[0], "\n".join(lines)
    assert not [line for line in lines if "link moves" in line and f"{slow}'s link" not in line], "\n".join(lines)
