"""`clustercheck explain` on users' own logs (issue 37): every recorded failure log of tests/data names the same
node and cause as smoke's classifier does on it, whatever shape the lines come in (a directory of per-rank
files, srun labels, mpirun tags, host prefixes); outputs clustercheck reads are judged as the stages judge them;
what cannot be read is bad input, and a log with nothing in it is UNKNOWN, never READY. And the error spaces
themselves: each entry found in every form the stack prints it, refined by its context."""

import json
import os

import pytest

from clustercheck.explain.reader import input_files, origin, read_logs
from clustercheck.explain.verdict import explain
from clustercheck.ranks.runs import NodeRun
from clustercheck.stages.smoke.classify import classify
from clustercheck.vocabulary import read_line
from tests.conftest import clustercheck
from tests.test_smoke_classify import HELD, UNSEEN, logs

DATA = os.path.join(os.path.dirname(__file__), "data")


@pytest.mark.parametrize("path, kind", list(logs()) + list(logs(UNSEEN)) + list(logs(HELD)), ids=lambda v: os.path.basename(str(v)))
def test_explain_names_what_smoke_names_on_every_recorded_failure(path, kind):
    text = open(path, errors="replace").read()
    smoke = classify({"log": NodeRun("log", exit_code=1, stderr=text)}, 600)
    result = explain([path])
    assert result.cause["kind"] == smoke.kind == kind, (result.cause, smoke.kind)
    assert result.cause["ranks"] == smoke.ranks or not smoke.ranks
    assert result.exit_code == (3 if kind in ("unclassified", "peer-lost", "comms") else 2)


def test_a_directory_of_per_rank_files_names_the_failing_rank_and_node_and_no_healthy_one(tmp_path):
    """Eight ranks on two nodes, one file each: node2's rank 6 ran out of memory, the others only echo."""
    oom = open(os.path.join(DATA, "smoke-logs", "oom-cuda-8gpu-summary-llamafactory-257.txt")).read()
    echo = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.2]:1\n"
    for rank in range(8):
        node = "node1" if rank < 4 else "node2"
        (tmp_path / f"{node}-rank{rank}.log").write_text(("step 10 loss 1.2\n" * 50) + (oom if rank == 6 else echo))
    result = explain([str(tmp_path)])
    assert result.cause["kind"] == "oom" and result.cause["nodes"] == ["node2"] and result.exit_code == 2
    assert result.findings[0].nodes == ["node2"]


def test_launcher_prefixes_tell_which_node_and_rank_printed_a_line():
    assert origin("3: RuntimeError: CUDA error: an illegal memory access was encountered", "log") == (
        "log", "[rank3]: RuntimeError: CUDA error: an illegal memory access was encountered")
    assert origin("[1,12]<stderr>:torch.OutOfMemoryError: CUDA out of memory.", "log")[1].startswith("[rank12]: ")
    assert origin("gpu-node-07: [rank9]: OSError: [Errno 28] No space left on device", "log") == (
        "gpu-node-07", "[rank9]: OSError: [Errno 28] No space left on device")
    assert origin("RuntimeError: boom", "log") == ("log", "RuntimeError: boom")            # not a host prefix
    assert origin("node155:3054646:3054695 [1] transport/nvls.cc:246 NCCL WARN Cuda failure", "log")[0] == "node155"
    assert origin("(RayTrainWorker pid=3946, ip=10.0.0.5) RuntimeError: x", "log") == ("10.0.0.5", "RuntimeError: x")


def test_recorded_outputs_are_judged_as_the_stages_judge_them():
    dcgm = explain([os.path.join(DATA, "dcgm", "diag-r3-text-3.3.9-4xa10g-targeted-power-fail.txt")])
    assert any(f.status.name == "FAIL" and "Targeted Power failed" in f.summary for f in dcgm.findings)
    xml = explain([os.path.join(DATA, "nvidia-smi", "h100-x8-driver-580.xml")])
    assert xml.findings and xml.exit_code in (0, 1, 2)
    kmsg = explain([os.path.join(DATA, "kmsg", "dmesg-xid79-nvsentinel-155.txt")])
    assert any("Xid 79" in f.summary for f in kmsg.findings) and kmsg.exit_code == 2


def test_a_log_with_nothing_in_it_is_unknown_never_ready(tmp_path):
    path = tmp_path / "train.log"
    path.write_text("step 1 loss 2.0\nstep 2 loss 1.9\n" * 1000)
    proc = clustercheck("explain", str(path), "--json")
    doc = json.loads(proc.stdout)
    assert proc.returncode == 3 and doc["verdict"] == "UNKNOWN"
    [finding] = doc["findings"]
    assert finding["check"] == "explain.no-end" and "2,000 line(s) in 1 file(s), 0 recognised" in finding["summary"]


@pytest.mark.parametrize("content, words", [
    (b"", ["an empty file"]),
    (b"\x7fELF\x02\x01\x01\x00\x00\x00" * 10, ["a binary file"]),
    ("step 1\n".encode("utf-16"), ["UTF-16"]),
    (bytes(range(0x80, 0x100)) * 50, ["not UTF-8"]),
])
def test_what_cannot_be_read_as_a_log_is_bad_input_naming_the_file(tmp_path, content, words):
    path = tmp_path / "job.log"
    path.write_bytes(content)
    proc = clustercheck("explain", str(path))
    assert proc.returncode == 64 and str(path) in proc.stderr and "Traceback" not in proc.stderr
    assert all(w in proc.stderr for w in words), proc.stderr


def test_a_missing_path_and_a_directory_of_too_many_files_are_bad_input(tmp_path):
    assert clustercheck("explain", str(tmp_path / "nope.log")).returncode == 64
    many = tmp_path / "many"
    many.mkdir()
    for i in range(4097):
        (many / f"f{i}.log").write_text("x\n")
    with pytest.raises(Exception, match="more than 4,096 files"):
        input_files([str(many)])


def test_a_ten_megabyte_line_is_read_cut_and_the_error_after_it_found(tmp_path):
    path = tmp_path / "job.log"
    with open(path, "w") as handle:
        handle.write("x" * (10 * 2 ** 20) + " error here\n")
        handle.write("[rank3]: OSError: [Errno 24] Too many open files\n")
    result = explain([str(path)])
    assert result.cause["kind"] == "open-files" and result.cause["ranks"] == [3]
    assert result.view.cut_lines == 1


# ---- the error spaces --------------------------------------------------------------------------------------
@pytest.mark.parametrize("line, kind, code", [
    ("RuntimeError: CUDA error: an illegal memory access was encountered", "cuda-error", "cudaErrorIllegalAddress"),
    ("THCudaCheck FAIL file=x line=1 error=35 : cuda runtime error (35) : CUDA driver version is insufficient",
     "cuda-setup", "cudaErrorInsufficientDriver"),
    ("CUDA_ERROR_NO_BINARY_FOR_GPU", "cuda-build", "cudaErrorNoKernelImageForDevice"),
    ("cudaErrorECCUncorrectable", "gpu-hardware", "cudaErrorECCUncorrectable"),
    ("h:1:2 [3] include/alloc.h:178 NCCL WARN Cuda failure 2 'out of memory'", "oom", "cudaErrorMemoryAllocation"),
    ("OSError: [Errno 28] No space left on device: '/dev/shm/x'", "shm", "ENOSPC"),
    ("OSError: [Errno 28] No space left on device: '/ckpt/step_100'", "disk-full", "ENOSPC"),
    ("OSError: [Errno 24] Too many open files", "open-files", "EMFILE"),
    ("ENOMEM while mapping", "host-oom", "ENOMEM"),
    ("torch.distributed.DistNetworkError: Connection refused (TCPStore at 10.0.0.1:29500)", "rendezvous",
     "ECONNREFUSED"),
    ("h:1:1 [0] NCCL WARN socketPollConnect: connect returned No route to host, retrying", "network", "EHOSTUNREACH"),
    ("torch.distributed.elastic.multiprocessing.api: failed (exitcode: -9) local_rank: 0", "killed", "SIGKILL"),
    ("Signal 11 (SIGSEGV) received by PID 6421", "crashed", "SIGSEGV"),
    ("RuntimeError: DataLoader worker (pid 1234) is killed by signal: Bus error.", "shm", "SIGBUS"),
    ("slurmstepd: error: *** STEP 1.0 ON n1 CANCELLED AT 2024-01-01T00:00:00 DUE TO TIME LIMIT ***", "scheduler",
     "time limit"),
    ("torch.distributed.DistBackendError: NCCL error in: x.cpp:1, remote process exited or there was a network "
     "error, NCCL version 2.21.5", "nccl", "ncclRemoteError"),
    ("error: unrecognized arguments: --local-rank=0", "launch-args", "--local-rank"),
])
def test_each_space_is_read_in_the_forms_the_stack_prints_it(line, kind, code):
    meaning = read_line(line)
    assert (meaning.kind, meaning.code) == (kind, code), meaning


def test_a_line_that_only_advises_is_never_a_cause():
    assert read_line("NCCL error: run with NCCL_DEBUG=INFO for details") is None
    assert read_line("Set TORCH_CPP_LOG_LEVEL=INFO and NCCL_DEBUG=INFO for details") is None


def test_the_logs_are_read_with_a_bounded_memory_whatever_their_size(tmp_path):
    """2 million lines, 5 of them errors: only candidates are kept, per node at most KEPT_PER_NODE."""
    path = tmp_path / "big.log"
    with open(path, "w") as handle:
        for i in range(200):
            handle.write("step %d loss 1.0 lr 3e-4\n" % i * 10000)
        handle.write("[rank2]: OSError: [Errno 28] No space left on device\n")
    view = read_logs([str(path)])
    assert sum(len(lines) for lines in view.lines.values()) < 10


def test_ranks_of_one_node_failing_alike_name_the_one_torchrun_saw_fail_first():
    """Three ranks of one node died of SIGSEGV together (open-mmlab/Amphion#167, issue 48b's check half, opened):
    torchrun's summary names rank 0 as the first observed failure; explain names rank 0 as failing first and says
    ranks 1 and 2 failed the same way, never "rank 0, 1, 2 failed first"."""
    path = os.path.join(DATA, "heldout", "issue48b", "check", "failures", "open-mmlab-amphion-167.txt")
    result = explain([path])
    assert result.cause["kind"] == "crashed" and result.cause["ranks"] == [0], result.cause
    assert any("rank(s) 1, 2 failed the same way" in line for line in result.cause["evidence"]), result.cause
    smoke = classify({"node1": NodeRun("node1", exit_code=1, stderr=open(path).read())}, 600)
    assert smoke.ranks == [0] and smoke.nodes == ["node1"]


def test_a_virtual_interface_listed_second_by_ncclsocket_beside_infiniband_is_no_fallback():
    """NVIDIA/nccl-tests#29 (issue 48b's build half): `NET/Socket : Using [0]enp41s0f1 [1]virbr0` on a job on IB,
    out-of-band on enp41s0f1: the bridge carries nothing of the job (the socket net is not used, the bootstrap is
    the first interface): no bootstrap or fallback finding; on sockets the same list would be one."""
    path = os.path.join(DATA, "heldout", "issue48b", "build", "nccl", "nvidia-nccl-tests-29.txt")
    result = explain([path])
    assert {p["network"] for p in result.nccl.values()} == {"InfiniBand"}
    assert not [f for f in result.findings if f.check in ("nccl.bootstrap", "nccl.transport")], result.findings
    assert not any(p["fallback"] for p in result.nccl.values())


@pytest.mark.parametrize("last", [
    "initializing ddp: GLOBAL_RANK: 0, MEMBER: 1/4",                         # Lightning 1.x
    "Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/4",                 # Lightning 2.x
    "INFO:torch.distributed.elastic.agent.server.api:[default] Rendezvous'ing worker group",
])
def test_a_log_whose_last_words_are_the_ranks_starting_is_a_set_up_that_never_finished(tmp_path, last):
    """Lightning-AI/pytorch-lightning#6206 (issue 48b's check half, opened): the log ends at Lightning's DDP
    initialisation, nothing after: UNKNOWN as a hang in progress (or a cut log), never READY."""
    log = tmp_path / "job.log"
    log.write_text("GPU available: True, used: True\nTPU available: None, using: 0 TPU cores\n" + last + "\n")
    result = explain([str(log)])
    assert result.exit_code == 3 and any(f.check == "explain.hang" for f in result.findings), result.findings
