"""The error spaces of the stack a training job runs on, as data: CUDA's runtime and driver error codes, NCCL's
result codes and the families of its WARN lines, the operating system's errno values and signals (and the ways
launchers print them), torch.distributed's and torchelastic's errors, schedulers' and launchers' messages.

`read_line(line)` names the entry a line shows and refines it by the line's context (the same errno on
/dev/shm, the same CUDA error inside NCCL, mean other causes); smoke's classifier and `clustercheck explain`
read every line through it. Each entry has its meaning for a multi-node job and its remedy.
"""

from clustercheck.vocabulary.lookup import Meaning, read_line

__all__ = ["Meaning", "read_line"]
