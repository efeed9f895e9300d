"""The error spaces of the stack a training job runs on, as one table of rows (table.py): CUDA's runtime and
driver codes and its libraries' status codes, NVML's and nvidia-smi's, NCCL's result codes and the families of its
WARN lines, the operating system's errno values and signals, the dynamic loader's messages, torch.distributed's
and torch's own checks, DeepSpeed's config, the Hugging Face hub, Slurm's srun and slurmstepd, Python's import
machinery, SSH, and the project's own patterns. Each kind is defined once (kinds.py: its rank, meaning and remedy).

`read_line(line)` names the row a line shows and refines it by the line's context (the same errno on /dev/shm,
the same CUDA error inside NCCL, mean other causes); smoke's classifier and `clustercheck explain` read every
line through it.
"""

from clustercheck.vocabulary.lookup import Meaning, cause_despite_warning, read_line

__all__ = ["Meaning", "cause_despite_warning", "read_line"]
