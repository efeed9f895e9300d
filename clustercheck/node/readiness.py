"""Which nodes can take part in a torchrun launch, with how many ranks and which backend.

Read from the node layer's derived facts (facts.Probed): env reports them, bench and smoke
act on them, launch prints commands from them; none of them works them out again.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from clustercheck.core.inventory import LOCAL_DEFAULT
from clustercheck.node.facts import Probed

NEEDED_BY = {"transformers": "--model", "peft": "--lora"}


def readiness_problems(probed: Sequence[Probed]) -> Dict[str, str]:
    """Nodes that cannot take part in a torchrun launch, and why (torchrun would wait for them)."""
    return {p.name: p.launch_problem for p in probed if p.launch_problem}


def choose_backend(probed: Sequence[Probed], requested: str) -> str:
    """NCCL when every probed node has GPUs and a CUDA build of torch, else Gloo; unless requested."""
    if requested != "auto":
        return requested
    known = [p for p in probed if p.facts is not None]
    return "nccl" if known and all(p.cuda_torch for p in known) else "gloo"


def missing_packages(probed: Sequence[Probed], wanted: Sequence[str]) -> Dict[str, List[str]]:
    """Nodes without some of the packages a run needs (the probe read every node's installed packages): which."""
    lacking = {p.name: p.missing(wanted) for p in probed}
    return {node: names for node, names in lacking.items() if names}


def missing_text(names: Sequence[str], python: str = "") -> str:
    """"transformers and peft not installed for PYTHON (needed by --model and --lora)"."""
    flags = " and ".join(NEEDED_BY[name] for name in names if name in NEEDED_BY)
    return (f"{' and '.join(names)} not installed" + (f" for {python}" if python else "")
            + (f" (needed by {flags})" if flags else ""))


LOCAL_CPU_RANKS = 2   # the built-in one-node cluster on CPUs: collectives must cross processes to prove anything


def ranks_per_node(probed: Sequence[Probed], requested: Optional[int], gpus: bool) -> Dict[str, int]:
    """--nproc-per-node, else slots=, else the GPU count when running on GPUs, else 1 (2 on the built-in
    one-node cluster of this machine, so that its bench and smoke run real collectives)."""
    def default(p: Probed) -> int:
        return LOCAL_CPU_RANKS if p.node.source == LOCAL_DEFAULT else 1
    return {p.name: requested or p.node.slots or ((p.gpu_count or 0) if gpus else 0) or default(p) for p in probed}
