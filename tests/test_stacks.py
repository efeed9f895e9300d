"""Stacks: parsing what py-spy and faulthandler print, folding alike processes, naming the odd rank."""

import glob
import json
import os

from clustercheck.onnode.stacks_probe import catches, faulthandler_frames, py_spy_frames, short
from clustercheck.ranks.forensics import evidence_lines, hang_report, judge_stacks
from clustercheck.ranks.runs import NodeRun
from clustercheck.ranks.stack_gather import read_stacks
from clustercheck.ranks.stacks import ProcessStack, fold_stacks, ranges, render_stacks
from clustercheck.stages.smoke.classify import classify

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "stacks")
WAIT = [("_engine_run_backward", "torch/autograd/graph.py", 829), ("backward", "torch/_tensor.py", 623),
        ("main", "train.py", 405)]
FROZEN = [("step", "hang.py", 65), ("main", "train.py", 416)]


def rank(node, number, frames=WAIT, state="S", collective=("all_reduce", 25), step=6):
    return ProcessStack(node=node, pid=1000 + number, rank=number, state=state,
                        state_text="stopped (SIGSTOP or a debugger)" if state == "T" else "sleeping",
                        frames=list(frames), step=None if state == "T" else step,
                        collective=None if state == "T" else {"name": collective[0], "seq": collective[1],
                                                              "state": "scheduled"})


def test_py_spy_json_gives_the_main_thread_first():
    with open(os.path.join(DATA, "py_spy_dump_two_threads.json")) as handle:
        threads = py_spy_frames(json.load(handle))
    assert threads[0]["main"] and threads[0]["frames"][0][0] == "waiting_for_peers"
    assert [t["name"] for t in threads] == ["MainThread", "beat"]


def test_faulthandler_text_gives_the_main_thread_first():
    with open(os.path.join(DATA, "faulthandler_two_threads.txt")) as handle:
        threads = faulthandler_frames(handle.read())
    assert threads[0]["frames"][0] == ["waiting_for_peers", "fh.py", 8]
    assert threads[1]["frames"][0][0] == "beat"
    assert short("/x/lib/python3.11/site-packages/torch/distributed/c10d.py") == "torch/distributed/c10d.py"


def test_a_signal_is_sent_only_to_a_process_that_catches_it():
    assert catches({"SigCgt": "0000000000000800"}, 12)       # SIGUSR2 is bit 11
    assert not catches({"SigCgt": "0000000000004000"}, 12)
    assert not catches({}, 12)


def test_ranges_and_folding_put_the_odd_process_first():
    assert ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    stacks = [rank(f"n{1 + r // 2}", r) for r in range(8) if r != 5] + [rank("n3", 5, frames=FROZEN, state="T")]
    groups = fold_stacks(stacks)
    assert [len(g.members) for g in groups] == [1, 7]
    assert groups[0].who == "rank 5 on n3"
    assert groups[1].who == "ranks 0-4,6-7 on n[1-4]"
    text = render_stacks(groups, {"n9": "no answer"})
    assert text.index("rank 5 on n3") < text.index("ranks 0-4,6-7")
    assert "could not look at n9: no answer" in text


def test_the_stopped_rank_is_named_and_the_others_wait_in_the_same_collective():
    stacks = [rank(f"n{1 + r // 2}", r) for r in range(8) if r != 5] + [rank("n3", 5, frames=FROZEN, state="T")]
    verdict = judge_stacks(stacks, {}, expected_ranks=8)
    assert verdict.summary.startswith("rank 5 on n3 is stopped (SIGSTOP or a debugger) at step (hang.py:65); "
                                      "the other 7 wait in all_reduce #25 (step 6)")
    assert [p.rank for p in verdict.odd] == [5]
    summary, evidence, nodes, ranks = hang_report(20.4, verdict, 600)
    assert summary.startswith("no progress for 20 s: rank 5 on n3")
    assert nodes == ["n3"] and ranks == [5]
    assert evidence[0].startswith("rank 5 on n3 is stopped") and "main (train.py:416)" in evidence[0]


def test_a_rank_behind_in_another_collective_is_odd():
    stacks = [rank("n1", r) for r in range(3)] + [rank("n2", 3, collective=("all_reduce", 24), step=5)]
    verdict = judge_stacks(stacks, {})
    assert verdict.summary.startswith("rank 3 on n2 is in all_reduce #24 (step 5); the other 3 wait in all_reduce #25")


def test_all_alike_says_none_is_odd_and_ranks_not_found_are_counted():
    verdict = judge_stacks([rank("n1", r) for r in range(4)], {"n2": "connection refused"}, expected_ranks=8)
    assert "all 4 ranks wait in all_reduce #25 (step 6): none is odd" in verdict.summary
    assert "4 rank(s) not found" in verdict.summary and "n2: could not look (connection refused)" in verdict.summary
    assert not verdict.odd


def test_a_stall_is_a_hang_naming_the_odd_rank_whatever_the_logs_say():
    stacks = [rank("n1", 0), rank("n1", 1), rank("n2", 2), rank("n2", 3, frames=FROZEN, state="T")]
    runs = {"n1": NodeRun("n1", stderr="[rank0]: Gloo connection closed by peer\n"), "n2": NodeRun("n2")}
    cause = classify(runs, 600, stalled_s=31.0, forensics=judge_stacks(stacks, {}))
    assert cause.kind == "hang" and cause.nodes == ["n2"] and cause.ranks == [3]
    assert "the other 3 wait in all_reduce #25" in cause.summary
    assert any("rank 3 on n2 is stopped" in line for line in cause.evidence)


def test_read_stacks_takes_the_probe_document():
    doc = {"processes": [{"pid": 7, "rank": "2", "state": "S", "state_text": "sleeping", "source": "py-spy",
                          "threads": [{"name": "MainThread", "frames": [["f", "x.py", 3]], "main": True}],
                          "hook": {"step": 4, "phase": "training",
                                   "collectives": [{"name": "broadcast", "seq": 9, "state": "scheduled"}]}},
                         {"pid": 8, "rank": None, "state": "T", "threads": None, "problem": "stopped"}]}
    first, second = read_stacks("n1", doc)
    assert first.rank == 2 and first.in_collective == "broadcast #9" and first.where == "f (x.py:3)"
    assert second.rank is None and second.label == "pid 8" and not second.known
    assert evidence_lines(judge_stacks([first, second], {}))


def test_ties_blame_the_rank_outside_the_collective_or_behind_it_and_never_one_that_did_not_answer():
    reading = [("read", "io.py", 10), ("main", "train.py", 50)]
    stuck = ProcessStack("n1", 1, 0, "D", "in uninterruptible I/O (D)", reading)
    waiting = rank("n2", 1)
    verdict = judge_stacks([stuck, waiting], {})
    assert [p.rank for p in verdict.odd] == [0], verdict.summary
    behind = [rank("n1", r, collective=("all_reduce", 24), step=5) for r in range(4)]
    ahead = [rank("n2", r, collective=("all_reduce", 25)) for r in range(4, 8)]
    verdict = judge_stacks(behind + ahead, {})
    assert sorted(p.rank for p in verdict.odd) == [0, 1, 2, 3], verdict.summary
    mute = [ProcessStack("n2", 10 + r, r, "S", "sleeping", [], problem="py-spy failed: Operation not permitted")
            for r in range(4, 8)]
    verdict = judge_stacks([rank("n1", r) for r in range(4)] + mute, {})
    assert not verdict.odd and "ranks 4-7 on n2 did not answer (py-spy failed" in verdict.summary
    even = [rank("n1", 0, frames=reading, collective=("x", 1)), rank("n2", 1, frames=WAIT, collective=("x", 1))]
    assert judge_stacks(even, {}).summary.startswith("no group of ranks stands out")


def _py_spy_text_main_thread(name):
    """The main thread's frames of a `py-spy dump` (text), innermost first."""
    import re
    text = open(os.path.join(DATA, name)).read()
    block = text.split('"MainThread"', 1)[1].split("\nThread ", 1)[0]
    return [(f, p, int(n)) for f, p, n in re.findall(r"^\s+(\S+) \((.+):(\d+)\)$", block, flags=re.M)]


def test_ranks_waiting_on_a_stale_build_lock_are_named_for_it_not_for_their_last_collective():
    """DeepSpeedExamples#302: every rank waits in FileBaton.wait under _jit_compile. The flight recorder's
    last collective (a barrier, completed) is not where they are, and --timeout can never help."""
    frames = _py_spy_text_main_thread("py_spy_dump_filebaton_deepspeedexamples_302.txt")
    assert frames[0][:2] == ("wait", "torch/utils/file_baton.py")
    stacks = [rank(f"n{1 + r // 2}", r, frames=frames, collective=("barrier", 6)) for r in range(4)]
    for p in stacks:
        p.collective["state"] = "completed"
    assert stacks[0].activity == "build-lock" and stacks[0].in_collective == ""
    runs = {"n1": NodeRun("n1"), "n2": NodeRun("n2")}
    cause = classify(runs, 600, stalled_s=120.0, forensics=judge_stacks(stacks, {}))
    assert cause.kind == "hang"
    where = "waiting on torch's C++ extension build lock at wait (torch/utils/file_baton.py:42)"
    assert where in cause.summary, cause.summary
    assert "barrier" not in cause.summary and "none is odd" not in cause.summary
    assert "build lock" in cause.remedy and "--timeout" not in cause.remedy


def test_what_a_stack_shows_a_rank_doing():
    import_frames = [("_find_and_load", "<frozen importlib._bootstrap>", 1176), ("<module>", "train.py", 3)]
    save_frames = [("write", "torch/serialization.py", 480), ("save", "torch/serialization.py", 850),
                   ("main", "train.py", 40)]
    compile_frames = [("_run_ninja_build", "torch/utils/cpp_extension.py", 2100), ("jit_load", "builder.py", 480)]
    assert rank("n1", 0, frames=import_frames).activity == "import"
    assert rank("n1", 0, frames=save_frames).activity == "filesystem"
    assert rank("n1", 0, frames=compile_frames).activity == "compile"
    assert rank("n1", 0).activity == "" and rank("n1", 0).in_collective == "all_reduce #25"
    # one rank compiles while the others wait on its lock: the compiling one is odd, and the remedy is time
    lock = _py_spy_text_main_thread("py_spy_dump_filebaton_deepspeedexamples_302.txt")
    stacks = [rank("n1", 0, frames=compile_frames)] + [rank("n1", r, frames=lock) for r in (1, 2, 3)]
    verdict = judge_stacks(stacks, {})
    assert [p.rank for p in verdict.odd] == [0] and "compiling a C++ op" in verdict.summary
    assert "raise --timeout" in verdict.remedy


def test_a_stalled_runs_hang_evidence_carries_what_the_ranks_flight_recorder_records_say():
    """bench's and smoke's ranks run with the recorder on and answer the stacks probe with their record: the
    hang evidence says what `clustercheck stacks` and `explain DIR` say, the collective some ranks never entered
    (the real Gloo records of tests/data/flight-recorder/hang-world: rank 2 never entered all_reduce #8), and
    where no stack stands out (every rank's main thread in the same wait), the records name the node."""
    records = {int(os.path.basename(p).split("_")[-1].split(".")[0]): json.load(open(p))
               for p in glob.glob(os.path.join(os.path.dirname(DATA), "flight-recorder", "hang-world", "json", "*"))}
    stacks = [ProcessStack(node=f"n{r // 2 + 1}", pid=1000 + r, rank=r, state="S", state_text="sleeping",
                           frames=list(WAIT), flight=records[r]) for r in sorted(records)]
    forensics = judge_stacks(stacks, {})
    assert not forensics.odd and [f.check for f in forensics.flight] == ["flight.missing"], forensics
    summary, evidence, nodes, _ = hang_report(31.0, forensics, 600)
    assert nodes == ["n2"], (nodes, evidence)
    assert any(line.startswith("Flight Recorder: rank(s) 2 on n2 never entered all_reduce #8 of the world")
               for line in evidence), evidence
    cause = classify({"n1": NodeRun("n1"), "n2": NodeRun("n2")}, 600, stalled_s=31.0, forensics=forensics)
    assert cause.kind == "hang" and cause.nodes == ["n2"] and "never called this collective" in cause.remedy


def test_two_jobs_on_one_node_are_each_judged_on_their_own_ranks_records():
    """`clustercheck stacks --match train.py` on a node that runs two jobs (two users', or two of CI's tests): both
    have ranks 0 to 3, and judged as one, their records read as two jobs' and named nothing (seen in CI: a test's
    job beside the sandbox's). Each job is judged on its own ranks, and each finding says which job: here both
    jobs hang the same way (the real records of hang-world, rank 2 never entered all_reduce #8)."""
    records = {int(os.path.basename(p).split("_")[-1].split(".")[0]): json.load(open(p))
               for p in glob.glob(os.path.join(os.path.dirname(DATA), "flight-recorder", "hang-world", "json", "*"))}
    jobs = {"10.0.0.1:29500": "n1", "10.0.0.9:29511 (run 7)": "n2"}
    stacks = [ProcessStack(node=node, pid=1000 * k + r, rank=r, state="S", state_text="sleeping", frames=list(WAIT),
                           flight=records[r], job=job) for k, (job, node) in enumerate(jobs.items(), 1)
              for r in sorted(records)]
    forensics = judge_stacks(stacks, {})
    missing = sorted(f.summary for f in forensics.flight if f.check == "flight.missing")
    assert len(missing) == 2, forensics.flight
    for summary, (job, node) in zip(missing, jobs.items()):
        assert summary.startswith(f"the job at {job}: rank(s) 2 on {node} never entered all_reduce #8"), summary
