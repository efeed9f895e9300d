"""smoke's failure classifier on logs shaped like real torchrun failures."""

from clustercheck.ranks.runs import NodeRun
from clustercheck.stages.smoke.classify import classify
from tests.conftest import clustercheck


def run(node, code, *lines, lost=False, cut_short=False):
    return NodeRun(node, exit_code=code, lost=lost, stderr_tail=list(lines), cut_short=cut_short)


def test_import_error_beats_the_echoes_on_other_nodes():
    runs = {"n1": run("n1", 1, "[rank0]: torch.distributed.DistBackendError: Connection closed by peer [10.0.0.3]"),
            "n2": run("n2", 1, "[rank1]: ModuleNotFoundError: No module named 'deepspeed'")}
    cause = classify(runs, 60)
    assert (cause.kind, cause.nodes, cause.ranks) == ("import", ["n2"], [1])


def test_out_of_memory_is_named_with_its_ranks():
    runs = {"n1": run("n1", 1, "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"),
            "n2": run("n2", None, cut_short=True)}
    cause = classify(runs, 60)
    assert (cause.kind, cause.nodes, cause.ranks) == ("oom", ["n1"], [3])


def test_a_lost_node_is_the_cause_not_its_peers_connection_errors():
    runs = {"n1": run("n1", 1, "[rank0]: RuntimeError: Gloo connectFullMesh failed"),
            "n2": run("n2", -1, lost=True)}
    cause = classify(runs, 60)
    assert (cause.kind, cause.nodes) == ("node-down", ["n2"])


def test_rendezvous_timeout_and_hang():
    rendezvous = {"n1": run("n1", 1, "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError")}
    assert classify(rendezvous, 60).kind == "rendezvous"
    hang = {"n1": run("n1", None), "n2": run("n2", None)}
    cause = classify(hang, 60)
    assert cause.kind == "hang" and cause.nodes == ["n1", "n2"]


def test_a_relative_checkpoint_dir_is_bad_input_before_anything_runs():
    proc = clustercheck("smoke", "--checkpoint-dir", "ckpt")
    assert proc.returncode == 64
    assert "--checkpoint-dir must be an absolute path" in proc.stderr and "'ckpt'" in proc.stderr


def _finished(runs, summary=True):
    """A smoke run whose ranks all reported (the summary) and whose torchruns ended as `runs` say."""
    from clustercheck.core.inventory import Node
    from clustercheck.node.facts import Probed
    from clustercheck.ranks.runs import RanksRun
    from clustercheck.stages.smoke.facts import SmokeFacts

    events = [{"event": "summary", "mode": "ddp", "world": 4, "steps": 10, "first_loss": 5.0, "last_loss": 2.0,
               "weights_agree": True, "nonfinite": None, "losses": {}, "reference": None,
               "reference_skipped": "x", "ranks": [], "tokens_per_s": 1.0, "tokens_per_s_per_rank": 0.25,
               "peak_mem_mb": 1.0, "elapsed_s": 1.0, "node": "n1"}] if summary else []
    runs["n1"].events = events
    nodes = [Node(name) for name in runs]
    stage = RanksRun("train", runs, 1.0, {"mode": "ddp", "save_at": 5})
    return SmokeFacts(nodes, [Probed(n, facts={}) for n in nodes], stage=stage)


ABORT = ["terminate called without an active exception",
         "torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -6) local_rank: 1",
         "  exitcode  : -6 (pid: 4242)", "  error_file: <N/A>", "  traceback : Signal 6 (SIGABRT) received by PID 4242"]


def test_an_abort_at_exit_after_every_rank_reported_is_a_warning_about_teardown_not_a_crash():
    from clustercheck.stages.smoke.rules import judge_smoke

    runs = {"n1": NodeRun("n1", exit_code=0), "n2": NodeRun("n2", exit_code=1, stderr="\n".join(ABORT))}
    found = {f.check: f for f in judge_smoke(_finished(runs), 600)}
    assert "smoke.crashed" not in found and found["smoke.exit"].status.name == "WARN", found
    assert found["smoke.exit"].nodes == ["n2"] and "terminate called" in " ".join(found["smoke.exit"].evidence)


def test_an_abort_before_the_summary_is_still_a_crash():
    from clustercheck.stages.smoke.rules import judge_smoke

    runs = {"n1": NodeRun("n1", exit_code=1, stderr="\n".join(ABORT), stderr_tail=ABORT),
            "n2": NodeRun("n2", exit_code=0)}
    found = [f for f in judge_smoke(_finished(runs, summary=False), 600) if f.status.name == "FAIL"]
    assert found and found[0].check.startswith("smoke.") and found[0].nodes == ["n1"], found
