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
UNSEEN = os.path.join(os.path.dirname(__file__), "data", "failure-logs")   # issue 37's, gathered before its vocabulary
HELD = os.path.join(os.path.dirname(__file__), "data", "failure-logs-43")  # issue 43's build half, before its rows
AS_KIND = {"client-socket": "rendezvous", "oom-killer": "killed", "node-down": "peer-lost"}
# pytorch#121209's excerpt holds only torchrun's summary (exit code 1 everywhere): the NCCL error of
# the title is not in the text, so the honest answer is the rank that failed first.
FROM_TEXT_ALONE = {"nccl-summary-4rank-exitcode1-pytorch-121209.txt": "unclassified"}
ECHOES = ("peer-lost", "comms")
BETWEEN = ("network", "rendezvous", "watchdog", "nccl")   # failures between ranks: the node that printed them
# The failing rank as each log names it: global ranks ([rank3]:, [Rank 1], NCCL's "rank 2 and rank 0 both
# on"), or ("local", n) where only the node's launcher numbering is said (local_rank: 0, --local_rank=1,
# multiprocessing's "Process 1 terminated").
RANKS = {
    "op-build-fused-adam-ninja-rank1-deepspeed-6892.txt": [1],
    "op-build-ninja-build-stopped-rank0-deepspeed-6912.txt": [0],
    "op-build-fused-adam-accelerate-deepspeed-mftcoder-27.txt": ("local", [0]),
    "duplicate-gpu-ddp-8proc-launch-mambair-39.txt": [2],
    "duplicate-gpu-barrier-interleaved-megatron-lm-661.txt": [3, 7],
    "duplicate-gpu-8rank-sigterm-trl-397.txt": [3, 5, 7],
    "overflow-loss-nan-process1-detectron2-spawn-centermask2-9.txt": ("local", [1]),
    "killed-sigkill-2rank-deepspeed-anomalygpt-43.txt": ("local", [1]),
    "killed-sigkill-deepspeed-chat-deepspeed-3232.txt": ("local", [0]),
    "killed-sigkill-gptj-sft-deepspeed-trlx-410.txt": ("local", [0]),
    "killed-sigkill-8rank-wsl-deepspeed-llava-1085.txt": ("local", [7]),
    "nccl-internal-error-report-torchrun-vllm-10453.txt": [1],
    "nccl-remote-error-net-ofi-undeliverable-nccl-1928.txt": [3],
    "unclassified-no-valid-samples-torchrun-llamafactory-8323.txt": [0],
    "cuda-error-device-assert-bce-watchdog-thread-pytorch-112488.txt": [1],
    "oom-killer-sigkill-root-cause-cppo-6.txt": [0],
    "deepspeedai-deepspeed-5570.txt": [1],
    "huggingface-peft-484.txt": [0],
    "noaa-emc-global-workflow-1301.txt": [2],
    "sgl-project-sglang-851.txt": [0],
}
# Lines other ranks print around a failure, taken from the logs here: warnings and peers' echoes.
OTHER_RANKS = [
    "[W228 18:45:15.738941174 socket.cpp:462] [c10d] waitForInput: poll for socket SocketImpl(fd=11) returned 0, "
    "likely a timeout",
    "/opt/conda/lib/python3.10/site-packages/torch/distributed/c10d_logger.py:83: FutureWarning: "
    "`torch.distributed.all_gather_into_tensor` is deprecated.",
    "[WARNING] [real_accelerator.py:162:get_accelerator] No module named 'triton'",
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.2]:12717",
]


def logs(folder=DATA):
    rows = [line for line in open(os.path.join(folder, "SOURCES.md")) if line.startswith("| `")]
    for row in rows:
        name, cause = [cell.strip() for cell in row.strip().strip("|").split("|")][:2]
        name = name.strip("`")
        yield os.path.join(folder, name), FROM_TEXT_ALONE.get(name, AS_KIND.get(cause, cause))


def node_stderr(text, ranks_per_node):
    noise = [f"[rank{r}]: {line}" for r in range(1, ranks_per_node) for line in OTHER_RANKS for _ in range(12)]
    return "\n".join([text, *noise])


def test_the_corpus_is_real_and_large_enough():
    kinds = [kind for folder in (DATA, UNSEEN, HELD) for _, kind in logs(folder)]
    assert len(kinds) >= 114
    assert {"import", "oom", "killed", "nccl", "watchdog", "rendezvous", "ib", "peer-lost", "disk-full", "permission",
            "overflow", "op-build", "duplicate-gpu", "hostname", "cuda-error", "unclassified", "shm", "open-files",
            "port-in-use", "scheduler", "network", "gpu-hardware", "cuda-build", "cuda-setup", "code", "loader",
            "ddp-unused", "checkpoint-mismatch", "hub-offline"} <= set(kinds)
    for path, _ in list(logs()) + list(logs(UNSEEN)) + list(logs(HELD)):
        assert os.path.exists(path), path


@pytest.mark.parametrize("ranks_per_node", [1, 2, 8])
@pytest.mark.parametrize("path, kind", list(logs()) + list(logs(UNSEEN)) + list(logs(HELD)), ids=lambda v: os.path.basename(str(v)))
def test_each_recorded_failure_is_named_for_what_it_is(path, kind, ranks_per_node):
    name = os.path.basename(path)
    text = open(path, errors="replace").read()
    runs = {"node1": NodeRun("node1", exit_code=1, stderr=node_stderr(text, ranks_per_node)),
            "node2": NodeRun("node2", exit_code=1, stderr=node_stderr(OTHER_RANKS[-1], ranks_per_node))}
    cause = classify(runs, 600)
    assert cause.kind == kind, (cause.kind, cause.evidence)
    backwards = classify(dict(reversed(list(runs.items()))), 600)
    assert (backwards.kind, backwards.nodes, backwards.ranks) == (cause.kind, cause.nodes, cause.ranks)
    # Never a healthy node: every real cause points at the failing node; an echo at no node (its witnesses
    # are named as such), since whoever failed first said nothing.
    assert cause.nodes == ([] if kind in ECHOES else ["node1"]), cause.nodes
    if kind in ECHOES:
        assert "node1" in cause.seen and "seen from" in cause.summary
    expected = RANKS.get(name)
    if isinstance(expected, tuple):
        assert (cause.ranks, cause.local_ranks) == ([], expected[1]), (cause.ranks, cause.local_ranks)
    elif expected is not None:
        assert cause.ranks == expected, cause.ranks
    if kind == "unclassified":
        assert cause.summary.startswith("could not classify") and cause.evidence


def test_a_warning_that_names_a_missing_module_never_beats_a_real_error():
    stderr = "\n".join(["[WARNING] [real_accelerator.py] No module named 'triton'",
                        "UserWarning: No module named 'apex', falling back",
                        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
                        "unhandled system error"])
    cause = classify({"n1": NodeRun("n1", exit_code=1, stderr=stderr)}, 600)
    assert cause.kind == "nccl"
    assert is_warning("[WARNING] No module named 'triton'") and not is_warning("NCCL WARN Cuda failure 3")


# Error lines quoted in public threads where no whole log was posted.
QUOTED = [
    # NVIDIA/nccl#1664 (title, limiao66, 2025): NCCL's IB plugin spells its transport NET/IBP
    ("ib", "NET/IBP:Got completion from peer 7.6.13.83<36315> with status=12 opcode=32698 len=32696 vendor err 129 "
           "(Send)"),
    # horovod/horovod#147 (comment by EdwardZhang88, 2018-08-29): NCCL before 2.4 wrote "WARN" without "NCCL"
    ("ib", "transport/net_ib.cu:781 WARN NET/IB : Got completion with error 12, opcode 1, len0, vendor err 129"),
    # NVIDIA/nccl#1558 (nccl-invalid-argument-run-with-warn-8x4090-nccl-1558.txt): the advice is not a warning
    ("nccl", "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp"
             ":1970, invalid argument (run with NCCL_DEBUG=WARN for details), NCCL version 2.20.5"),
    # csguoh/MambaIR#39 (duplicate-gpu-ddp-8proc-launch-mambair-39.txt)
    ("nccl", "ncclInvalidUsage: This usually reflects invalid usage of NCCL library."),
]


@pytest.mark.parametrize("kind, line", QUOTED)
def test_quoted_error_lines_are_errors_of_their_kind(kind, line):
    assert not is_warning(line)
    runs = {"n1": NodeRun("n1", exit_code=1, stderr=line),
            "n2": NodeRun("n2", exit_code=1, stderr=OTHER_RANKS[-1])}
    cause = classify(runs, 600)
    assert (cause.kind, cause.nodes) == (kind, ["n1"])


def test_a_failure_nobody_can_name_is_could_not_classify_on_its_own_node_never_a_peer():
    """A rank's own error that matches no cause outranks every echo of it, whichever node is read first."""
    own = ["[rank5]: Traceback (most recent call last):", "[rank5]:   File \"train.py\", line 9, in <module>",
           "[rank5]: KeyError: 'labels'"]
    for order in (("n1", "n2"), ("n2", "n1")):
        runs = {name: NodeRun(name, exit_code=1, stderr="\n".join(own) if name == "n2" else OTHER_RANKS[-1])
                for name in order}
        cause = classify(runs, 600)
        assert (cause.kind, cause.nodes, cause.ranks) == ("unclassified", ["n2"], [5])
        assert cause.summary.startswith("could not classify") and "KeyError: 'labels'" in cause.evidence[-1]


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


@pytest.mark.parametrize("ranks_per_node", [1, 2, 8])
def test_an_echo_is_never_the_cause_beside_a_launchers_bare_child_failed(ranks_per_node):
    """bytedance/HLLM#9: torchrun's own traceback ends in ChildFailedError (no summary, no rank's error): a child
    of node1 failed and said nothing telling. The other ranks' and node2's "Connection closed by peer" are what
    they saw of it, not its cause: could not classify, on node1, never peer-lost and never node2."""
    text = open(os.path.join(HELD, "bytedance-hllm-9.txt")).read()
    runs = {"node1": NodeRun("node1", exit_code=1, stderr=node_stderr(text, ranks_per_node)),
            "node2": NodeRun("node2", exit_code=1, stderr=node_stderr(OTHER_RANKS[-1], ranks_per_node))}
    cause = classify(runs, 600)
    assert (cause.kind, cause.nodes) == ("unclassified", ["node1"]), cause
    # the same echoes with no launcher's word on any node stay an echo, seen from both, blaming neither
    echoes = {name: NodeRun(name, exit_code=1, stderr=node_stderr(OTHER_RANKS[-1], ranks_per_node))
              for name in ("node1", "node2")}
    echo = classify(echoes, 600)
    assert (echo.kind, echo.nodes, echo.seen) == ("peer-lost", [], ["node1", "node2"])



def test_a_crash_says_where_the_crashing_thread_was():
    """A rank aborted (SIGABRT) with faulthandler on, as torchelastic turns it on in its workers: the evidence
    carries the innermost frames of the thread faulthandler marks as current, not another thread's wait."""
    text = "\n".join([
        "[rank1]: step 10 loss 3.3", "Fatal Python error: Aborted", "",
        "Thread 0x00007f0000000001 (most recent call first):",
        '  File "/usr/lib/python3.11/threading.py", line 324 in wait', "",
        "Current thread 0x00007f0000000002 (most recent call first):",
        '  File "/x/deepspeed/runtime/engine.py", line 100 in destroy',
        '  File "/x/train.py", line 335 in main', ""])
    cause = classify({"n1": NodeRun("n1", exit_code=1, stderr=text)}, 600)
    assert cause.kind == "crashed"
    assert cause.evidence[1:] == ['n1: File "/x/deepspeed/runtime/engine.py", line 100 in destroy',
                                  'n1: File "/x/train.py", line 335 in main'], cause.evidence
