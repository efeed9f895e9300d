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
