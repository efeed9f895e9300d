"""The project's own patterns, the "clustercheck" space: what no other space names but failed runs print (an op
that does not build, a loss that overflows, Gloo's and torch's words for a failure between ranks), and the
looser forms of causes the other spaces name exactly. Read last: a line any other space names is named there.
Each row's source is the message it reads (smoke's signatures, from the failure logs under tests/data)."""

from __future__ import annotations

from typing import List

from clustercheck.vocabulary.spaces import Row

_SEEN = "smoke's signatures (tests/data/smoke-logs): "
ROWS: List[Row] = [
    Row("clustercheck", r"Error building extension|Error compiling objects for extension|ninja: build stopped|"
                        r"Ninja is required to load C\+\+ extensions|CUDA_HOME does not exist|"
                        r"CUDA_HOME environment variable is not set|MissingCUDAException|nvcc: not found|"
                        r"nvcc fatal|(?:No such file or directory|command not found):? '?nvcc|Command '\['ninja'",
        "op-build", "op build", _SEEN + "torch/utils/cpp_extension.py \"Error building extension\", DeepSpeed's "
                                        "op_builder MissingCUDAException"),
    Row("clustercheck", r"OutOfMemoryError", "oom", "out of memory", _SEEN + "any framework's OutOfMemoryError"),
    Row("clustercheck", r"Permission denied|PermissionError|Read-only file system", "permission", "permission",
        _SEEN + "EACCES / EROFS in their Python forms"),
    Row("clustercheck", r"Could not resolve hostname|Name or service not known|nodename nor servname|"
                        r"Temporary failure in name resolution|getaddrinfo failed|No address associated with "
                        r"hostname|[Uu]nknown host\b|failed to resolve", "hostname", "name resolution",
        _SEEN + "getaddrinfo's gai_strerror texts (glibc), OpenSSH's \"Could not resolve hostname\""),
    Row("clustercheck", r"loss scale already at minimum|[Ll]oss (?:is|became|=) ?(?:nan|NaN|inf|Inf)|"
                        r"FloatingPointError|[Nn]on-finite loss|NaN or Inf found in input tensor|[Ll]oss is not finite",
        "overflow", "loss overflow", _SEEN + "DeepSpeed's fp16 loss scaler \"Current loss scale already at minimum\""),
    Row("clustercheck", r"terminated with signal SIGKILL|Signals\.SIGKILL", "killed", "SIGKILL",
        _SEEN + "torchelastic"),
    Row("clustercheck", r"NET/IBP?\s*:[^\n]*(?:completion|status|error)|ibv_\w+\s+failed", "ib",
        "InfiniBand", _SEEN + "NCCL's net_ib before 2.4, ibverbs' ibv_wc_status names"),
    Row("clustercheck", r"CUDA error: (?:device-side assert|unspecified launch failure|misaligned address|"
                        r"an illegal instruction|uncorrectable ECC|unknown error)|"
                        r"CUDA kernel errors might be asynchronously reported|Assertion `[^\n]*` failed",
        "cuda-error", "CUDA kernel", _SEEN + "torch c10/cuda/CUDAException.cpp's note, a kernel's assert"),
    Row("clustercheck", r"Fatal Python error", "crashed", "Fatal Python error", _SEEN + "CPython's faulthandler"),
    Row("clustercheck", r"(?i:\bnccl error\b)[^\n]*[A-Za-z0-9]|DistBackendError", "nccl", "NCCL error",
        _SEEN + "torch's DistBackendError around NCCL"),
    Row("clustercheck", r"DistNetworkError|failed to bind|Address already in use|[Ww]ait timeout|"
                        r"rendezvous[^\n]*timed out", "rendezvous", "rendezvous",
        _SEEN + "torch.distributed's DistNetworkError, c10d's bind failures"),
    Row("clustercheck", r"Connection closed by (?:remote )?peer|Connection reset by peer|Broken pipe", "peer-lost",
        "peer gone", _SEEN + "Gloo's pair.cc \"Connection closed by peer\", ECONNRESET / EPIPE texts"),
    Row("clustercheck", r"\bGloo\b|ProcessGroup\w*Error|Socket Timeout", "comms", "collective failed",
        _SEEN + "Gloo's and ProcessGroup's errors"),
]
