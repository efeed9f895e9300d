"""What a failed run's lines say: the vocabulary of causes, and how one line reads.

Each cause has a kind, the pattern of a line that shows it, its tier, a summary and a remedy.
The tier says how much a line proves about the node that printed it:

- ROOT: the node's own failure (an import, out of memory, SIGKILL, a full disk...);
- OWN: an error of the node's own that matches no known cause ("could not classify"): still
  the node's own, so it outranks what the others say about it;
- LINK: a failure between ranks (NCCL, a watchdog timeout, the rendezvous): the cause when
  nothing on any node says more, else the others' view of a rank that had already failed;
- FAILED: the node's launcher says its rank failed, and the rank said nothing telling (its error
  line was cut, or it printed none): still more than a peer's echo;
- ECHO: a peer went away; never the cause when anything else is found.

One line is read for: is it a warning (never counts), an error line at all, a launcher's
wrapper around a rank's failure (ChildFailedError, CalledProcessError: the rank's own line says
more), and which rank printed it, global (`[rank3]:`, torchrun's summary) or local to its node
(`[default1]:`, `local_rank: 1`, `--local_rank=1`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from clustercheck.vocabulary import read_line

ROOT, OWN, LINK, FAILED, ECHO = 0, 1, 2, 3, 4
REMEDY_NET = "run clustercheck net and bench: a blocked port, a wrong interface (NCCL_SOCKET_IFNAME) or a dead peer"


@dataclass(frozen=True)
class Signature:
    kind: str
    tier: int
    pattern: Optional["re.Pattern[str]"]     # None: an entry of the error spaces (clustercheck/vocabulary)
    summary: str
    remedy: str


def _sig(kind: str, tier: int, pattern: str, summary: str, remedy: str) -> Signature:
    return Signature(kind, tier, re.compile(pattern), summary, remedy)


# The most telling first: within a tier, the first that matches a line names it.
SIGNATURES: List[Signature] = [
    _sig("op-build", ROOT, r"Error building extension|Error compiling objects for extension|ninja: build stopped|"
                           r"Ninja is required to load C\+\+ extensions|CUDA_HOME does not exist|"
                           r"CUDA_HOME environment variable is not set|MissingCUDAException|nvcc: not found|"
                           r"nvcc fatal|(?:No such file or directory|command not found):? '?nvcc|Command '\['ninja'",
         "a DeepSpeed / torch C++ op failed to build on the node",
         "install the CUDA toolkit (nvcc) matching torch's CUDA and set CUDA_HOME, and ninja; or pre-build the ops "
         "(DS_BUILD_OPS=1 pip install deepspeed) so no node compiles at start"),
    _sig("import", ROOT, r"\b(ModuleNotFoundError|ImportError)\b|No module named '",
         "a module does not import",
         "install it into the interpreter that trains on that node, or name the right one with python= "
         "(clustercheck env shows what each node has)"),
    _sig("duplicate-gpu", ROOT, r"Duplicate GPU detected",
         "two ranks on one GPU (NCCL: Duplicate GPU detected)",
         "give each local rank its own device (torch.cuda.set_device(local_rank) before the process group, "
         "CUDA_VISIBLE_DEVICES not narrowed per rank) and no more ranks per node than GPUs"),
    _sig("oom", ROOT, r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|Cannot allocate memory|"
                      r"\[Errno 12\]",
         "out of memory",
         "lower --micro-batch, use zero3 / zero3-offload / fsdp, or activation checkpointing; `clustercheck plan` "
         "shows what fits"),
    _sig("disk-full", ROOT, r"No space left on device|\[Errno 28\]|\bENOSPC\b|Disk quota exceeded|\[Errno 122\]",
         "a disk or quota filled up (No space left on device)",
         "free space on that node's checkpoint / cache filesystem (df -h), or point the output, "
         "TMPDIR and caches at one with room for every checkpoint"),
    _sig("ssh", ROOT, r"Permission denied \((publickey|password|gssapi)|Host key verification failed",
         "the launcher could not log in to a node over SSH",
         "let the launching node log in to every node without a password (ssh-copy-id) and accept their host keys "
         "once; clustercheck net checks it"),
    _sig("permission", ROOT, r"Permission denied|PermissionError|\[Errno 13\]|\bEACCES\b|Read-only file system|"
                             r"\[Errno 30\]",
         "a rank may not write (or read) a path it needs",
         "make the output / cache directory writable by the training user on every node (a shared path "
         "mounted read-only or owned by another user), or point it elsewhere"),
    _sig("hostname", ROOT, r"Could not resolve hostname|Name or service not known|nodename nor servname|"
                           r"Temporary failure in name resolution|getaddrinfo failed|No address associated with "
                           r"hostname|[Uu]nknown host\b|failed to resolve",
         "a host name does not resolve",
         "make every name in the hostfile / MASTER_ADDR resolve on every node (/etc/hosts or DNS), or use "
         "addresses; clustercheck net checks names between every pair"),
    _sig("overflow", ROOT, r"loss scale already at minimum|[Ll]oss (is|became|=) ?(nan|NaN|inf|Inf)|FloatingPointError|"
                           r"[Nn]on-finite loss|NaN or Inf found in input tensor|[Ll]oss is not finite",
         "the loss overflowed (fp16 loss scale at its minimum, or NaN / Inf)",
         "train in bf16 (or fp32) instead of fp16, lower the learning rate, clip gradients; check the data for "
         "empty or broken samples"),
    _sig("killed", ROOT, r"Signal 9 \(SIGKILL\)|exitcode\s*:\s*-9\b|exit(ed)? with (exit )?code -9|Signals\.SIGKILL|"
                         r"return code = -9\b|killed by signal: Killed|terminated with signal SIGKILL",
         "a rank was killed (SIGKILL): the kernel's OOM killer, or someone killed it",
         "look at the node's kernel log (dmesg: 'Out of memory: Killed process'); lower host memory use (data "
         "workers, CPU offload) or add memory"),
    _sig("ib", ROOT, r"NET/IBP?\s*:.*(completion|status|error)|ibv_\w+\s+failed|IBV_WC_\w+",
         "an InfiniBand transfer failed",
         "check the InfiniBand fabric and the HCAs on those nodes (ibstat, link errors); retry with NCCL_IB_DISABLE=1 "
         "to confirm, then set NCCL_IB_HCA to the ports that work"),
    _sig("cuda-error", ROOT, r"CUDA error: (an illegal memory access|device-side assert|unspecified launch failure|"
                             r"misaligned address|an illegal instruction|uncorrectable ECC|unknown error)|"
                             r"CUDA kernel errors might be asynchronously reported|Assertion `.*` failed",
         "a CUDA kernel failed on the GPU",
         "a device-side assert is usually an index out of range (labels against the vocabulary, padding ids); an "
         "illegal access or ECC error: check the GPU (clustercheck env: Xid, ECC) and rerun with "
         "CUDA_LAUNCH_BLOCKING=1 to find the kernel"),
    _sig("crashed", ROOT, r"Signal (11|7|4) \(SIG(SEGV|BUS|ILL)\)|exitcode\s*:\s*-(11|7|4)\b|Segmentation fault|"
                          r"Fatal Python error|return code = -(11|7|4)\b",
         "a rank crashed in native code (SIGSEGV / SIGBUS)",
         "check that torch, NCCL and the driver match on every node (clustercheck env); a debug setting can crash "
         "too (in torch 2.13, DDP segfaults while it is built under TORCH_DISTRIBUTED_DEBUG=DETAIL)"),
    _sig("watchdog", LINK, r"Watchdog caught collective operation timeout|\bran for \d+ milliseconds before timing out",
         "a collective timed out: one rank stopped answering (stuck, dead or very slow)",
         "find the rank the others waited for (clustercheck bench --pairwise, clustercheck net); rerun with "
         "TORCH_NCCL_DUMP_ON_TIMEOUT=1 for the ranks' traces"),
    _sig("nccl", LINK, r"(?i)\bnccl error\b|nccl(InternalError|SystemError|UnhandledCudaError|InvalidUsage|"
                       r"InvalidArgument|RemoteError)|DistBackendError|NCCL WARN Cuda failure",
         "NCCL failed between ranks", REMEDY_NET + "; NCCL_DEBUG=INFO names the transport"),
    _sig("rendezvous", LINK, r"Rendezvous(Timeout|Closed|Connection)Error|client socket has timed out|"
                             r"DistNetworkError|The server socket has failed to listen|failed to bind|"
                             r"Address already in use|[Ww]ait timeout|rendezvous.*timed out|\[c10d\].*timed out after",
         "the nodes did not meet at the rendezvous (the c10d store)",
         "start on every node, keep the rendezvous port open and free on the first node, and use the same "
         "endpoint everywhere (clustercheck net)"),
    _sig("peer-lost", ECHO, r"Connection closed by (remote )?peer|Connection reset by peer|Broken pipe",
         "a peer went away mid-run (its rank or node died)",
         "find the node that died first (its own log, dmesg); clustercheck env on it"),
    _sig("comms", ECHO, r"\bGloo\b|ProcessGroup\w*Error|Socket Timeout",
         "a collective failed between ranks", REMEDY_NET),
]
KINDS = [s.kind for s in SIGNATURES]
BY_KIND = {s.kind: s for s in SIGNATURES}

# Not errors: Python's and c10's warnings, DeepSpeed's [WARNING] lines (they name optional modules).
_WARNING = re.compile(r"\b\w*Warning\b|\[WARNING\]|^\s*WARNING\b|^\s*\[?W\d{4}|warnings\.warn|\bWARN(?!\s*\w*Error)")
# Printed by healthy runs too: a host without IPv6 makes c10d say so at every start.
_NOISE = re.compile(r"The IPv6 network addresses of .* cannot be retrieved")
# ...but NCCL writes its errors at WARN level ("NCCL WARN", "net_ib.cu:781 WARN" before 2.4), and c10d its
# store's socket timeouts.
_ERROR_AT_WARN_LEVEL = re.compile(r"NCCL WARN|\.(cc|cu|c|h):\d+ WARN |\[c10d\].*timed out after")
# How an NCCL error tells the reader to turn on its logs: an advice inside an error, not a warning.
_DEBUG_ADVICE = re.compile(r"\(?run with NCCL_DEBUG=\w+[^)]*\)?|NCCL_DEBUG=WARN|TORCH_CPP_LOG_LEVEL=\w+")
_PREFIX = re.compile(r"^\s*(?:\[(?:default|rank)?\d+\]:?\s*)+")
# A raised exception's last line ("torch.OutOfMemoryError: ...", "KeyError: 'labels'") or a logger's error.
_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Exit|Failure)\b(?::|$)|"
                        r"^(?:\[?(?:ERROR|FATAL|CRITICAL)\]?[\s:])|^(?:Error|error|FATAL|fatal):\s")
# A launcher reporting a rank's failure: the rank's own lines say why; these say which and how it ended.
WRAPPER = re.compile(r"ChildFailedError|CalledProcessError|ProcessRaisedException|ProcessExitedException|"
                     r"SignalException|KeyboardInterrupt|SystemExit|exits with return code|failed \(exitcode:|"
                     r"sigkill_handler|closing signal SIGTERM|error_handler|Signal 15 \(SIGTERM\)|Killing subprocess|"
                     r"process \d+ terminated with exit code|terminated with the following error|"
                     r"returned non-zero exit status|"
                     r"^\s*(?:Traceback|Root Cause|Failures:)|"
                     r"^\s*(?:time|host|rank|exitcode|error_file|traceback)\s+:")


def is_warning(line: str) -> bool:
    if _NOISE.search(line):
        return True
    body = _DEBUG_ADVICE.sub("", _PREFIX.sub("", line))
    if re.match(r"(?:[\w]+\.)*\w+(?:Error|Exception)\b", body.strip()) and not re.match(r"\w*Warning", body.strip()):
        return False   # a raised exception is an error whatever advice its text carries
    return bool(_WARNING.search(body)) and not _ERROR_AT_WARN_LEVEL.search(line)


# Which cause says most when one rank shows several, most telling first: the scheduler's verdict ends everything,
# a cause of the node's own outranks what its kernels or its peers then report.
KIND_ORDER = ["scheduler", "op-build", "import", "launch-args", "duplicate-gpu", "gpu-hardware", "cuda-build",
              "cuda-setup", "oom", "host-oom", "shm", "open-files", "disk-full", "ssh", "permission", "missing-file",
              "hostname", "port-in-use", "overflow", "killed", "ib", "cuda-error", "code", "crashed", "watchdog",
              "network", "nccl", "rendezvous", "peer-lost", "comms"]
_FROM_SPACES: Dict[Tuple[str, str], Signature] = {}


def rank(signature: Signature) -> int:
    """How telling a cause is among those one rank showed (lower: more)."""
    return KIND_ORDER.index(signature.kind) if signature.kind in KIND_ORDER else len(KIND_ORDER)


def signature_of(line: str) -> Optional[Signature]:
    """The cause a line shows, or None: the entry of the error spaces it names (clustercheck/vocabulary), refined
    by its context, else a pattern of the project's own (a build, a loss, DeepSpeed's and Gloo's words)."""
    meaning = read_line(line)
    if meaning is not None:
        key = (meaning.kind, meaning.summary)
        if key not in _FROM_SPACES:
            _FROM_SPACES[key] = Signature(meaning.kind, meaning.tier, None, meaning.summary, meaning.remedy)
        return _FROM_SPACES[key]
    return next((s for s in SIGNATURES if s.pattern.search(line)), None)


def is_error(line: str) -> bool:
    """A line that reports an error in its own words: an exception, a logger's ERROR line."""
    return bool(_EXCEPTION.match(_PREFIX.sub("", line).strip()))


def is_wrapper(line: str) -> bool:
    return bool(WRAPPER.search(_PREFIX.sub("", line)))


def ranks_of(line: str) -> Tuple[Optional[int], Optional[int]]:
    """(global rank, local rank) a line names, each None when it does not."""
    match = (re.match(r"\s*\[rank(\d+)\]:", line) or re.search(r"\[Rank (\d+)\]", line)
             or re.search(r"\brank (\d+) and rank \d+ both on", line))
    if match:
        return int(match.group(1)), None
    local = (re.match(r"\s*\[default(\d+)\]:", line) or re.search(r"\blocal_rank\s*[:=]\s*(\d+)", line)
             or re.search(r"--local[_-]rank[= ](\d+)", line)
             or re.search(r"Process (\d+) terminated with the following error", line))
    return None, (int(local.group(1)) if local else None)
