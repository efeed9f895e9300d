"""smoke's failure classifier on 36 failure logs users posted in public issue threads
(tests/data/smoke-logs/SOURCES.md names each), replayed as a node's stderr at 1, 2 and 8 ranks
per node: with more ranks, the other local ranks' warnings and their echoes of the failure
(recorded lines, from the same corpus) come after the telling lines and fill the tail, and a
second node only echoes. The cause must be found all the same."""

import os

import pytest

from clustercheck.ranks.runs import NodeRun
from clustercheck.stages.smoke.classify import classify, is_warning, torchrun_failures

DATA = os.path.join(os.path.dirname(__file__), "data", "smoke-logs")
AS_KIND = {"client-socket": "rendezvous", "oom-killer": "killed", "node-down": "peer-lost"}
# pytorch#121209's excerpt holds only torchrun's summary (exit code 1 everywhere): the NCCL error of
# the title is not in the text, so the honest answer is the rank that failed first.
FROM_TEXT_ALONE = {"nccl-summary-4rank-exitcode1-pytorch-121209.txt": "error"}
# Lines other ranks print around a failure, taken from the logs here: warnings and peers' echoes.
OTHER_RANKS = [
    "[W228 18:45:15.738941174 socket.cpp:462] [c10d] waitForInput: poll for socket SocketImpl(fd=11) returned 0, "
    "likely a timeout",
    "/opt/conda/lib/python3.10/site-packages/torch/distributed/c10d_logger.py:83: FutureWarning: "
    "`torch.distributed.all_gather_into_tensor` is deprecated.",
    "[WARNING] [real_accelerator.py:162:get_accelerator] No module named 'triton'",
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.2]:12717",
]


def logs():
    rows = [line for line in open(os.path.join(DATA, "SOURCES.md")) if line.startswith("| `")]
    for row in rows:
        name, cause = [cell.strip() for cell in row.strip().strip("|").split("|")][:2]
        name = name.strip("`")
        yield name, FROM_TEXT_ALONE.get(name, AS_KIND.get(cause, cause))


def node_stderr(text, ranks_per_node):
    noise = [f"[rank{r}]: {line}" for r in range(1, ranks_per_node) for line in OTHER_RANKS for _ in range(12)]
    return "\n".join([text, *noise])


def test_the_corpus_is_real_and_large_enough():
    kinds = [kind for _, kind in logs()]
    assert len(kinds) >= 16
    assert {"import", "oom", "killed", "nccl", "watchdog", "rendezvous", "ib", "peer-lost"} <= set(kinds)


@pytest.mark.parametrize("ranks_per_node", [1, 2, 8])
@pytest.mark.parametrize("name, kind", list(logs()))
def test_each_recorded_failure_is_named_for_what_it_is(name, kind, ranks_per_node):
    text = open(os.path.join(DATA, name)).read()
    runs = {"node1": NodeRun("node1", exit_code=1, stderr=node_stderr(text, ranks_per_node)),
            "node2": NodeRun("node2", exit_code=1, stderr=node_stderr(OTHER_RANKS[-1], ranks_per_node))}
    cause = classify(runs, 600)
    assert cause.kind == kind, (cause.kind, cause.evidence)
    if kind not in ("peer-lost",):   # an echo points at its own node; every real cause at the failing one
        assert cause.nodes == ["node1"], cause.nodes


def test_a_warning_that_names_a_missing_module_never_beats_a_real_error():
    stderr = "\n".join(["[WARNING] [real_accelerator.py] No module named 'triton'",
                        "UserWarning: No module named 'apex', falling back",
                        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
                        "unhandled system error"])
    cause = classify({"n1": NodeRun("n1", exit_code=1, stderr=stderr)}, 600)
    assert cause.kind == "nccl"
    assert is_warning("[WARNING] No module named 'triton'") and not is_warning("NCCL WARN Cuda failure 3")


def test_torchrun_summary_names_the_rank_host_and_signal():
    text = open(os.path.join(DATA, "oom-killer-sigkill-root-cause-cppo-6.txt")).read()
    [root] = [e for e in torchrun_failures(text) if e["root"]]
    assert root["rank"].startswith("0") and root["exitcode"].startswith("-9")
    cause = classify({"node1": NodeRun("node1", exit_code=1, stderr=text)}, 600)
    assert cause.kind == "killed" and cause.ranks == [0]
    assert "signal 9 (SIGKILL)" in cause.evidence[0]


def _ranks(forwards, step_ms=30.0):
    return {"mode": "ddp", "tokens_per_s": 50000.0, "tokens_per_s_per_rank": 16000.0, "peak_mem_mb": 354.0,
            "ranks": [{"node": f"n{i + 1}", "rank": i, "tokens_per_s": 16000.0, "step_ms": step_ms,
                       "forward_ms": fwd} for i, fwd in enumerate(forwards)]}


def test_a_straggler_is_named_and_scheduling_noise_is_not():
    """Seen on the 2-core sandbox: one node's forward 8.8 ms against 5.6 ms in a 30 ms step (ranks
    sharing two cores) was called a straggler. A node whose forward costs the job a fifth of its
    step is one."""
    from types import SimpleNamespace

    from clustercheck.core.result import Status
    from clustercheck.stages.smoke.rules import throughput
    [noise] = throughput(SimpleNamespace(summary=_ranks([5.6, 5.1, 8.8])))
    assert noise.check == "smoke.throughput" and noise.status is Status.OK
    [slow] = throughput(SimpleNamespace(summary=_ranks([5.6, 5.1, 14.0])))
    assert slow.check == "smoke.straggler" and slow.status is Status.WARN and slow.nodes == ["n3"]
