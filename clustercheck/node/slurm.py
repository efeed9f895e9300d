"""What Slurm says about the nodes of an allocation: state, reason and GPU GRES (scontrol).

Gathered on the machine the tool runs on (inside the allocation, scontrol reaches the
controller); judged by clustercheck/stages/env/slurm_rules.py against what env found on each node.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

SCONTROL_TIMEOUT_S = 20.0
_FIELD = re.compile(r"(?:^|\s)([A-Za-z][\w/:.]*)=")
BAD_FLAGS = ("DRAIN", "DOWN", "FAIL", "NOT_RESPONDING", "POWERED_DOWN", "POWERING_DOWN", "INVALID_REG", "INVAL")
# Scheduled work on the node: worth saying, not a reason to call a running allocation unfit.
NOTE_FLAGS = ("MAINT", "REBOOT_REQUESTED", "REBOOT_ISSUED", "RESERVED", "PLANNED")
_MIG = re.compile(r"\d+g\.\d+gb", re.I)


@dataclass
class SlurmNode:
    name: str
    state: str                      # State= as printed: IDLE+DRAIN, ALLOCATED, DOWN*+NOT_RESPONDING
    reason: str = ""
    gpus: Optional[int] = None      # GPUs in Gres= (None: no gpu GRES configured)
    fields: Dict[str, str] = field(default_factory=dict)

    @property
    def flags(self) -> List[str]:
        """DRAIN, DOWN, NOT_RESPONDING...: the state's parts; a trailing * means not responding."""
        parts = [p for p in re.split(r"[+]", self.state.upper()) if p]
        names = [p.rstrip("*~#!%$@^-") for p in parts]
        if any(p.endswith("*") for p in parts):
            names.append("NOT_RESPONDING")
        return names

    @property
    def unfit(self) -> List[str]:
        """The flags that make the node unfit to train: drained, down, not responding..."""
        return [f for f in self.flags if any(f.startswith(bad) for bad in BAD_FLAGS)]

    @property
    def notes(self) -> List[str]:
        """Maintenance or a reboot planned on the node."""
        return [f for f in self.flags if f in NOTE_FLAGS]


def split_fields(text: str) -> Dict[str, str]:
    """scontrol's Key=Value pairs; a value may hold spaces (Reason=), up to the next Key=."""
    found: Dict[str, str] = {}
    marks = list(_FIELD.finditer(text))
    for index, mark in enumerate(marks):
        end = marks[index + 1].start() if index + 1 < len(marks) else len(text)
        found.setdefault(mark.group(1), text[mark.end():end].strip())
    return found


def gres_gpus(gres: str) -> Optional[int]:
    """gpu:8, gpu:h100:8(S:0-1), gpu:a100:4,mps:100 -> GPUs; None when no gpu GRES; (null) -> None."""
    total, seen = 0, False
    for item in re.split(r",(?![^(]*\))", gres or ""):
        item = re.sub(r"\(.*?\)", "", item).strip()
        parts = item.split(":")
        if parts[0] != "gpu":
            continue
        if _MIG.search(item):   # MIG slices, not GPUs: nothing to compare with nvidia-smi's GPU count
            return None
        seen = True
        count = parts[-1] if len(parts) > 1 else "1"
        total += int(count) if count.isdigit() else 1
    return total if seen else None


def parse_scontrol(text: str) -> Dict[str, SlurmNode]:
    """`scontrol show node` output (one record per node, multi-line or -o) -> name -> SlurmNode.

    A reason is free text (it may hold "Key=" itself): on its own line, all of that line."""
    nodes = {}
    for record in re.split(r"(?=^NodeName=)", text.strip(), flags=re.M):
        lines = [line.strip() for line in record.splitlines() if line.strip()]
        flat = " ".join(lines)
        if not flat.startswith("NodeName="):
            continue
        values = split_fields(flat)
        name = values["NodeName"].split()[0]
        own_line = [line[len("Reason="):] for line in lines if line.startswith("Reason=")]
        reason = own_line[0].strip() if own_line and len(lines) > 1 else values.get("Reason", "")
        nodes[name] = SlurmNode(name, values.get("State", "?").split()[0], "" if reason in ("(null)", "none")
                                else reason, gres_gpus(values.get("Gres", "")), values)
    return nodes


@dataclass
class SlurmView:
    nodes: Dict[str, SlurmNode] = field(default_factory=dict)
    problem: str = ""               # why Slurm could not be asked
    job_gpus: Optional[int] = None  # GPUs the job holds on each node (SLURM_GPUS_ON_NODE), if any


def read_slurm(names: Sequence[str], timeout_s: float = SCONTROL_TIMEOUT_S) -> SlurmView:
    """Ask the controller about these nodes (scontrol show node), under a deadline."""
    if shutil.which("scontrol") is None:
        return SlurmView(problem="scontrol is not installed where clustercheck runs")
    try:
        proc = subprocess.run(["scontrol", "show", "node", ",".join(names)], capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return SlurmView(problem=f"scontrol gave no answer within {timeout_s:g} s (slurmctld down or slow?)")
    except OSError as exc:
        return SlurmView(problem=f"scontrol did not run: {exc}")
    nodes = parse_scontrol(proc.stdout)
    if proc.returncode != 0 and not nodes:
        return SlurmView(problem=f"scontrol show node failed: {proc.stderr.strip()[:300]}")
    held = os.environ.get("SLURM_GPUS_ON_NODE", "")
    return SlurmView(nodes, job_gpus=int(held) if held.isdigit() else None)
