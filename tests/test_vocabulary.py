"""The vocabulary's one table of rows (issue 43): the table checks itself when imported (an unknown kind or
space, two rows of one space that collide, a pattern RE2 cannot run), precedence is data (ranks and the
spaces' order), each space built from its source reads the lines the stack prints (real lines quoted from
public threads, or the source's documented message), and docs/failures.md says what the table holds."""

import os
import re

import pytest

from clustercheck.ranks.runs import NodeRun
from clustercheck.stages.smoke.classify import classify, is_warning
from clustercheck.vocabulary import read_line
from clustercheck.vocabulary.kinds import KIND_ORDER, KINDS, SHAPE_KINDS
from clustercheck.vocabulary.lookup import _CONTEXT, Context, Meaning, ordered, refine
from clustercheck.vocabulary.reference import BEGIN, END, markdown
from clustercheck.vocabulary.spaces import Row, VocabularyError, check
from clustercheck.vocabulary.table import ROWS

ROOT = os.path.join(os.path.dirname(__file__), "..")


def _row(space="torch", match=r"boom", kind="code", code="boom", **extra):
    return Row(space, match, kind, code, "a test", **extra)


@pytest.mark.parametrize("rows, words", [
    ([_row(kind="no-such-kind")], "kind 'no-such-kind'"),
    ([_row(space="no-such-space")], "not in SPACES"),
    ([_row(), _row(code="bang")], "have one pattern"),
    ([_row(), _row(match=r"bang", kind="oom")], "leads to 'code' and 'oom'"),
    ([_row(match=r"(?<=x)boom")], "lookaround"),
    ([_row(match=r"(?i)boom")], "global flag"),
])
def test_a_table_that_contradicts_itself_fails_naming_the_row(rows, words):
    with pytest.raises(VocabularyError, match=words.replace("(", r"\(")):
        check(rows)


def test_the_table_as_shipped_holds_and_ranks_are_the_only_order():
    check(ROWS)
    assert KIND_ORDER == sorted(KINDS, key=lambda k: KINDS[k].rank)
    assert len({k.rank for k in KINDS.values()}) == len(KINDS)
    # every kind is reached by a row, or by a log's shape (SHAPE_KINDS): a kind nothing leads to would be dead
    assert {row.kind for row in ROWS} | SHAPE_KINDS == set(KINDS) and not {row.kind for row in ROWS} & SHAPE_KINDS
    # the kinds the held-out logs' labels use (samples/failures/CONTRACT.md)
    assert {"loader", "ddp-unused", "checkpoint-mismatch", "ds-config", "hub-offline"} <= set(KINDS)


# (line, kind, code): a real line quoted from a public thread (cited), else the source's documented message.
LINES = [
    # NVML and nvidia-smi. AlexeyAB/darknet#86 (description by anonym24, 2017-05-23)
    ("Unable to determine the device handle for GPU 0000:03:00.0: GPU is lost.  Reboot the system to recover this "
     "GPU", "gpu-hardware", "NVML_ERROR_GPU_IS_LOST"),
    ("Failed to initialize NVML: Driver/library version mismatch", "cuda-setup",
     "NVML_ERROR_LIB_RM_VERSION_MISMATCH"),
    ("pynvml.nvml.NVMLError_DriverNotLoaded: Driver Not Loaded", "cuda-setup", "NVML_ERROR_DRIVER_NOT_LOADED"),
    ("subprocess.CalledProcessError: Command '['nvidia-smi']' returned non-zero exit status 15.", "gpu-hardware",
     "NVML_ERROR_GPU_IS_LOST"),
    # the CUDA libraries' statuses (torch's forms)
    ("RuntimeError: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate(handle)`", "oom",
     "CUBLAS_STATUS_NOT_INITIALIZED"),
    ("RuntimeError: cuDNN error: CUDNN_STATUS_NOT_INITIALIZED", "cuda-setup", "CUDNN_STATUS_NOT_INITIALIZED"),
    ("RuntimeError: cuFFT error: CUFFT_INTERNAL_ERROR", "cuda-error", "CUFFT_INTERNAL_ERROR"),
    ("RuntimeError: cusolver error: CUSOLVER_STATUS_EXECUTION_FAILED, when calling `cusolverDnCreate(handle)`",
     "cuda-error", "CUSOLVER_STATUS_EXECUTION_FAILED"),
    ("RuntimeError: CURAND_STATUS_ARCH_MISMATCH", "cuda-build", "CURAND_STATUS_ARCH_MISMATCH"),
    # torch's CUDA initialization. hiyouga/LlamaFactory#7888 (description by Himanshunitrr, 2025-04-28)
    ("UserWarning: CUDA initialization: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions "
     "before calling NumCudaDevices() that might have already set an error? Error 802: system not yet initialized",
     "cuda-setup", "cudaErrorSystemNotReady"),
    ("UserWarning: CUDA initialization: CUDA unknown error - this may be due to an incorrectly set up environment, "
     "e.g. changing env variable CUDA_VISIBLE_DEVICES after program start. Setting the available devices to be "
     "zero. (Triggered internally at ../c10/cuda/CUDAFunctions.cpp:108.)", "cuda-setup", "devices set to zero"),
    # the dynamic loader. Dao-AILab/flash-attention#1691; glibc's dl-version.c and dl-load.c messages
    ("ImportError: /usr/local/lib/python3.10/site-packages/flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: "
     "undefined symbol: _ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
     "loader", "undefined symbol"),
    ("OSError: libcudart.so.11.0: cannot open shared object file: No such file or directory", "loader",
     "cannot open shared object file"),
    ("ImportError: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.32' not found (required by /opt/x/_C.so)",
     "loader", "version not found"),
    ("OSError: /opt/lib/libfoo.so: wrong ELF class: ELFCLASS32", "loader", "wrong ELF class"),
    # torch's own checks (torch/nn/modules/module.py, c10d/reducer.cpp, fsdp/_flat_param.py, DataLoader.cpp)
    ("RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one. This "
     "error indicates that your module has parameters that were not used in producing loss.", "ddp-unused",
     "DDP reducer"),
    # hiyouga/ChatGLM-Efficient-Tuning#114 (description by sungh66)
    ("Parameter at index 55 has been marked as ready twice. This means that multiple autograd engine  hooks have "
     "fired for this particular parameter during this iteration.", "ddp-unused", "DDP reducer"),
    ("\tsize mismatch for head.cls_preds.0.weight: copying a param with shape torch.Size([80, 256, 1, 1]) from "
     "checkpoint, the shape in current model is torch.Size([6, 256, 1, 1]).", "checkpoint-mismatch",
     "load_state_dict"),
    ("RuntimeError: Error(s) in loading state_dict for GPT:", "checkpoint-mismatch", "load_state_dict"),
    ("ValueError: `FlatParameter` requires uniform `requires_grad`", "code", "FSDP flattening"),
    ("ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).",
     "shm", "DataLoader worker SIGBUS"),
    ("RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!",
     "code", "tensor mismatch"),
    # torch.distributed and torchelastic, old and new
    ("torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined.",
     "rendezvous", "c10d store"),
    ("RuntimeError: Timed out initializing process group in store based barrier on rank: 3, for key: "
     "store_based_barrier_key:1 (world_size=8, worker_count=4, timeout=0:30:00)", "rendezvous", "c10d store"),
    ("torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError", "rendezvous", "RendezvousError"),
    ("RuntimeError: connect() timed out. Original timeout was 1800000 ms.", "rendezvous", "c10d store"),
    # DeepSpeed's config (runtime/config.py _batch_assertion)
    ("AssertionError: Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * "
     "gradient_acc_step * world_size 16 != 2 * 1 * 4", "ds-config", "batch size"),
    # the Hugging Face hub (transformers utils/hub.py, huggingface_hub file_download.py)
    ("OSError: We couldn't connect to 'https://huggingface.co' to load this file, couldn't find it in the cached "
     "files and it looks like bert-base-uncased is not the path to a directory containing a file named config.json.",
     "hub-offline", "hub unreachable"),
    ("requests.exceptions.ConnectionError: (MaxRetryError(\"HTTPSConnectionPool(host='huggingface.co', port=443): "
     "Max retries exceeded with url: /bert-base-uncased/resolve/main/config.json (Caused by NewConnectionError("
     "'<urllib3.connection.HTTPSConnection object at 0x7f>: Failed to establish a new connection: [Errno 101] "
     "Network is unreachable'))\"), '(Request ID: 1)')", "hub-offline", "hub unreachable"),
    # Slurm
    ("srun: error: Unable to create step for job 4359715: More processors requested than permitted", "scheduler",
     "step creation"),
    ("slurmstepd: error: *** JOB 1234 ON gpu-07 CANCELLED AT 2024-03-01T10:00:00 DUE TO NODE FAILURE, SEE "
     "SLURMCTLD LOG FOR DETAILS ***", "scheduler", "node failure"),
    # NOAA-EMC/global-workflow#1301
    ("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=25981927.1. Some of your processes may have been "
     "killed by the cgroup out-of-memory handler.", "killed", "oom-kill"),
    ("srun: error: k300: task 2: Out Of Memory", "killed", "oom-kill"),
    # the driver's Xid in a pasted kernel log: tests/data/kmsg/dmesg-xid79-nvsentinel-155.txt (NVIDIA/NVSentinel#155)
    ("NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus", "gpu-hardware",
     "Xid hardware"),
    # torch 2.x's NCCL heartbeat and its store's closed connection (ProcessGroupNCCL.cpp, c10d/Utils.hpp)
    ("[rank3]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 3] Heartbeat monitor timed out! Process will be terminated "
     "after dumping debug info.", "watchdog", "NCCL watchdog"),
    ("torch.distributed.DistNetworkError: Failed to recv, got 0 bytes. Connection was likely closed. Did the remote "
     "server shutdown or crash?", "peer-lost", "store connection closed"),
    ("AssertionError: Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided", "ds-config",
     "batch size"),
    # transformers' DeepSpeed integration (integrations/deepspeed.py)
    ("ValueError: Please correct the following DeepSpeed config values that mismatch TrainingArguments values:",
     "ds-config", "transformers integration"),
    # other schedulers, the shell, the CPU allocator, glibc's malloc, aten's index check, the container runtime
    ("=>> PBS: job killed: walltime 86415 exceeded limit 86400", "scheduler", "time limit (PBS, LSF)"),
    ("/var/spool/slurmd/job123/slurm_script: line 12: 48213 Killed                  python train.py", "killed",
     "SIGKILL"),
    ("RuntimeError: [enforce fail at alloc_cpu.cpp:83] data. DefaultCPUAllocator: can't allocate memory: you tried "
     "to allocate 8589934592 bytes. Error code 12 (Cannot allocate memory)", "host-oom", "ENOMEM"),
    ("RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to allocate 8589934592 bytes.", "host-oom",
     "CPU allocator"),
    ("free(): invalid pointer", "crashed", "heap corruption"),
    ("IndexError: index out of range in self", "code", "tensor mismatch"),
    ("RuntimeError: No CUDA GPUs are available", "cuda-setup", "no driver"),
    ("nvidia-container-cli: initialization error: nvml error: driver not loaded: unknown", "cuda-setup",
     "NVML_ERROR_DRIVER_NOT_LOADED"),
    # Python's imports
    ("ImportError: cannot import name 'is_torch_xla_available' from 'transformers'", "import", "ImportError"),
]


# Issue 48's second held-out round, its build half (tests/data/heldout/issue48b/build, SOURCES.tsv): aws-ofi-nccl's
# registration failure through libfabric (NVIDIA/nccl#563), as the thread shows it (the scheduler's and MPI's new
# rows' lines are in tests/test_vocabulary_scheduler_mpi.py)
LINES += [
    ("10.0.87.143: 10.0.87.143: ip-10-0-87-143:149:298 [5] register_mr_buffers:465 NCCL WARN NET/OFI Unable to "
     "register memory (type = 1) for device 0. RC: 12, Error: Cannot allocate memory", "memlock",
     "ibv_reg_mr ENOMEM"),
    # its second batch (tests/data/heldout/issue48b/build2): NCCL with NCCL_SOCKET_IFNAME naming no interface
    # (NVIDIA/nccl#1837), Gloo's own host name resolving to no address (msr-fiddle/pipedream#32)
    ("[trainer0|0]:ncclSocketInit: connecting to address  with family 59936 is neither AF_INET(2) nor AF_INET6(10)",
     "network", "NCCL socket family"),
    ("RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:127] rp != nullptr. Unable to "
     "find address for: dgx-1.ai", "hostname", "Gloo host name"),
    # the check half, opened after it was scored: a container on Docker's bridge (NVIDIA/nccl#929)
    ("d9beab19e6d2:1791:1791 [0] misc/socket.cc:237 NCCL WARN Net : No interface found in the same subnet as remote "
     "address a.b.c.d0<1778>", "network", "NCCL no interface"),
    ("d9beab19e6d2:1791:1791 [0] bootstrap.cc:39 NCCL WARN NET/Socket : No usable listening interface found",
     "network", "NCCL no interface"),
]


# DeepSpeed's config checks, each row by the source it reads (deepspeedai/DeepSpeed at v0.3.0, v0.8.0, v0.19;
# huggingface/transformers 4.x deepspeed.py), the exception line as Python prints it.
LINES += [
    # bigcode-project/starcoder#77 (comment by Kushalamummigatti): rich's box wrapped the message after "is not"
    ("AssertionError: Check batch related parameters. train_batch_size is not", "ds-config", "batch size"),
    ("AssertionError: Micro batch size per gpu: 0 has to be greater than 0", "ds-config", "batch size"),
    ("AssertionError: Either train_batch_size or micro_batch_per_gpu needs to be provided", "ds-config",
     "batch size"),
    ("AssertionError: DeepSpeedConfig: train_micro_batch_size_per_gpu is not defined", "ds-config", "config check"),
    ("AssertionError: DeepSpeedConfig: ZeRO is only supported if fp16 is enabled", "ds-config", "config check"),
    ("AssertionError: Fp16_master_weights_and_grads is only supported with ZeRO Stage 2 for now.", "ds-config",
     "config check"),
    ("AssertionError: bfloat16 and fp16 modes cannot be simultaneously enabled", "ds-config", "config check"),
    ("ValueError: gradient_allreduce_op='sum' is not supported with ZeRO stage 3", "ds-config", "config check"),
    ("ValueError: Invalid communication_data_type. Supported data types: ['fp16', 'bf16', 'fp32']. Got: fp8",
     "ds-config", "config value"),
    ("ValueError: Duplicate keys in DeepSpeed config: ['fp16']", "ds-config", "config value"),
    ("deepspeed.runtime.config.DeepSpeedConfigError: Checkpoint config contains invalid tag_validation value of "
     "SOMETIMES, expecting one of ['IGNORE', 'WARN', 'FAIL']", "ds-config", "config value"),
    ("AssertionError: Partial offloading only supported for ZeRO Stage 3.", "ds-config", "ZeRO config"),
    ("AssertionError: Invalid optimizer offloading device specified: gpu.", "ds-config", "ZeRO config"),
    ("AssertionError: bfloat16 mode is only enabled for Zero 1,2,3 currently. got 0", "ds-config", "config check"),
    ("pydantic_core._pydantic_core.ValidationError: 1 validation error for DeepSpeedZeroConfig", "ds-config",
     "ZeRO config"),
    ("deepspeed.elasticity.config.ElasticityConfigError: One or more batch related parameters were found in your "
     "ds_config (train_batch_size, train_micro_batch_size_per_gpu, and/or gradient_accumulation_steps).",
     "ds-config", "elasticity"),
    # huggingface/transformers#11044 (comment by sajastu, 2021-06-29)
    ("ValueError: ZeRO Offload can only work with DeepSpeed optimizers", "ds-config", "transformers integration"),
    # the kernel's full neighbour table: rtr7/router7#31 (stapelberg, 2019-06-05) and, before the routing cache
    # went (3.6), QubesOS/qubes-issues#355 (marmarek, 2011)
    ("[843041.359054] neighbour: arp_cache: neighbor table overflow!", "network", "neighbour table overflow"),
    ("[250066.491572](250066.489724]) ipv4: Neighbour table overflow.", "network", "neighbour table overflow"),
    # a CUDA call failed in NCCL's CUDACHECK words is NCCL's (NVIDIA/nccl#1410, xiejibing 2024-08-21; pytorch#111187)
    ("[rank7]: Cuda failure 1 'invalid argument'", "nccl", "cudaErrorInvalidValue"),
    ("Cuda failure 'invalid argument'", "nccl", "cudaErrorInvalidValue"),
]


@pytest.mark.parametrize("line, kind, code", LINES, ids=[line[:40] for line, _, _ in LINES])
def test_each_new_space_reads_the_lines_its_source_prints(line, kind, code):
    meaning = read_line(line)
    assert meaning is not None and (meaning.kind, meaning.code) == (kind, code), meaning


def test_a_warning_is_a_cause_only_where_its_row_says_so():
    zero = [line for line, _, code in LINES if code in ("devices set to zero", "cudaErrorSystemNotReady")]
    assert zero and not any(is_warning(line) for line in zero)
    assert is_warning("/x/torch/utils/checkpoint.py:429: UserWarning: torch.utils.checkpoint: please pass in "
                      "use_reentrant=True or use_reentrant=False")
    runs = {"n1": NodeRun("n1", exit_code=1, stderr=zero[1]), "n2": NodeRun("n2", exit_code=0, stderr="")}
    assert (classify(runs, 600).kind, classify(runs, 600).nodes) == ("cuda-setup", ["n1"])


def test_the_loader_is_read_on_a_bare_line_with_no_exception_around_it():
    line = "python: error while loading shared libraries: libnccl.so.2: cannot open shared object file: No such " \
           "file or directory"
    runs = {"n1": NodeRun("n1", exit_code=127, stderr=line), "n2": NodeRun("n2", exit_code=1, stderr="")}
    cause = classify(runs, 600)
    assert (cause.kind, cause.nodes) == ("loader", ["n1"]), cause


def test_a_row_that_proves_less_than_its_kind_names_the_rank_only_where_nothing_says_more():
    abort = "torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with signal SIGABRT"
    alone = classify({"n1": NodeRun("n1", exit_code=1, stderr=abort)}, 600)
    assert (alone.kind, alone.nodes) == ("crashed", ["n1"])
    watchdog = "[rank1]:[E] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5) ran for 600000 " \
               "milliseconds before timing out."
    both = classify({"n1": NodeRun("n1", exit_code=1, stderr="\n".join([watchdog, abort]))}, 600)
    assert both.kind == "watchdog"
    # a step cancelled with no reason on one rank is Slurm's echo of another rank's OOM kill
    lines = ["2: slurmstepd: error: Detected 1 oom-kill event(s) in StepId=7.1. Some of your processes may have "
             "been killed by the cgroup out-of-memory handler.", "srun: error: k300: task 2: Out Of Memory",
             "0: slurmstepd: error: *** STEP 7.1 ON k65 CANCELLED AT 2023-04-13T18:23:49 ***"]
    cause = classify({"n1": NodeRun("n1", exit_code=1, stderr="\n".join(lines))}, 600)
    assert (cause.kind, cause.ranks) == ("killed", [2])
    cancelled = classify({"n1": NodeRun("n1", exit_code=1, stderr=lines[-1])}, 600)
    assert cancelled.kind == "scheduler"


def test_a_failed_cuda_call_is_nccls_only_in_nccls_words_and_a_kernel_fault_stays_the_gpus():
    """NCCL's "Cuda failure 'invalid argument'" is its own call refused (pytorch#111187, WSL2: first line
    ncclUnhandledCudaError), "Cuda failure 999 'unknown error'" its call failing (pytorch#170045); torch's "CUDA
    error: invalid argument" is a kernel's call; NCCL's out of memory and an
    illegal address it saw stay what CUDA says they are."""
    assert read_line("RuntimeError: CUDA error: invalid argument").kind == "cuda-error"
    assert read_line("h:1:2 [3] include/alloc.h:178 NCCL WARN Cuda failure 2 'out of memory'").kind == "oom"
    assert read_line("h:1:2 [3] misc/x.cc:1 NCCL WARN Cuda failure 'an illegal memory access was "
                     "encountered'").kind == "cuda-error"
    meaning = read_line("h:1:2 [0] misc/strongstream.cc:1 NCCL WARN Cuda failure 1 'invalid argument'")
    assert meaning.kind == "nccl" and "NCCL_P2P_DISABLE=1" in meaning.summary


def test_the_neighbour_table_overflow_says_which_sysctls_to_raise():
    meaning = read_line("neighbour: ndisc_cache: neighbor table overflow!")
    assert meaning.kind == "network" and "gc_thresh1/2/3" in meaning.summary
    assert read_line("the neighbour table overflowed yesterday") is None
    # the on-node probe (standard library only) keeps its own pattern: it reads the same real lines
    from clustercheck.onnode.kernlog import NEIGH_OVERFLOW
    real = [line for line, kind, code in LINES if code == "neighbour table overflow"]
    assert len(real) == 2 and all(NEIGH_OVERFLOW.search(line) and read_line(line) for line in real)


def test_docs_failures_md_shows_the_table_as_it_is():
    page = open(os.path.join(ROOT, "docs", "failures.md")).read()
    assert BEGIN in page and END in page
    shown = page[page.index(BEGIN):page.index(END) + len(END)]
    assert shown == markdown(), "regenerate with: python3 -m clustercheck.vocabulary.reference"


def test_what_healthy_runs_print_is_never_a_cause():
    """NCCL's INFO that no net plugin was found (tests/data/nccl-logs/socket-dockerbridge-pluginfail-2.21.5-nccl-
    issue-1504.txt), DeepSpeed's config dump and the trainer's arguments: not the loader, not a config error."""
    plugin = ("678c7278cb2d:26023:26023 [0] NCCL INFO NET/Plugin: Plugin load returned 2 : libnccl-net.so: cannot "
              "open shared object file: No such file or directory : when loading libnccl-net.so")
    assert is_warning(plugin)
    for line in ["[2024-01-01 10:00:00,000] [INFO] [config.py:1000:print]   zero_allow_untested_optimizer  False",
                 "ddp_find_unused_parameters=None,", "  world_size ................... 8",
                 "   RunTime=00:10:00 TimeLimit=1-00:00:00 TimeMin=N/A",       # scontrol show job, running
                 # c10d's success (distributed_c10d.py _store_based_barrier; tests/data/heldout/nccl/build/
                 # nvidia-nccl-676.txt): only its time-out is a rendezvous failure
                 "INFO:torch.distributed.distributed_c10d:Rank 0: Completed store-based barrier for key:"
                 "store_based_barrier_key:1 with 2 nodes.",
                 "df: /root/.triton/autotune: No such file or directory"]:   # a script's aside, nothing failed on it
        assert read_line(line) is None, line
    oom = "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    cause = classify({"n1": NodeRun("n1", exit_code=1, stderr="\n".join([plugin, oom]))}, 600)
    assert (cause.kind, cause.ranks) == ("oom", [1])


def test_context_precedence_is_each_entrys_field_never_its_place_in_the_list():
    """Two context entries that both fit one line (a rendezvous that names a link-local address) refine it by
    their precedence field: the same whichever comes first in the list, the other way round when the fields swap;
    two such entries with one precedence are refused at import."""
    rendezvous, link_local = [c for c in _CONTEXT if c.kind == "network"]
    assert rendezvous.precedence < link_local.precedence
    line = "torch.distributed: rendezvous failed: the store bound fe80::1%ib0"
    meaning = Meaning("network", "torch.distributed", "connection refused", "")
    assert re.search(rendezvous.pattern, line, re.I) and re.search(link_local.pattern, line, re.I)
    for entries in ([rendezvous, link_local], [link_local, rendezvous]):
        assert refine(meaning, line, ordered(entries, re.I)).kind == "rendezvous"
    swapped = [rendezvous._replace(precedence=link_local.precedence),
               link_local._replace(precedence=rendezvous.precedence)]
    for entries in (swapped, swapped[::-1]):
        assert refine(meaning, line, ordered(entries, re.I)).kind == "network"
    with pytest.raises(VocabularyError, match="share precedence"):
        ordered([rendezvous, Context(rendezvous.precedence, "network", r"fe80:", "network", "")])
