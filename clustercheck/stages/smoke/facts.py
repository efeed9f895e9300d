"""What a smoke run brought back (SmokeFacts): the data its judges and views read; no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

from clustercheck.core.inventory import Node
from clustercheck.node.facts import Probed
from clustercheck.planner.memory import Shape, Workload
from clustercheck.ranks.runs import RanksRun


@dataclass
class SmokeFacts:
    nodes: List[Node]
    probed: List[Probed]
    nproc: Dict[str, int] = field(default_factory=dict)
    stage: Optional[RanksRun] = None      # the training run
    resume: Optional[RanksRun] = None     # the same run resumed from its checkpoint, in fresh processes
    problems: Dict[str, str] = field(default_factory=dict)
    lacking: Dict[str, List[str]] = field(default_factory=dict)   # node -> packages --model / --lora need
    save_dir: str = ""
    shape: Optional[Shape] = None             # --model: its config.json, read on the first node
    shape_problem: str = ""
    plan_mode: str = ""                       # the memory plan's row for this run
    workload: Optional[Workload] = None

    @property
    def summary(self) -> Optional[Dict]:
        return next(iter(self.stage.events("summary")), None) if self.stage else None

    @property
    def checkpoint_times(self) -> Dict[str, float]:
        """The trainer's own save and load times (rank 0's, each ending at a barrier: the slowest rank's)."""
        saved = next(iter(self.stage.events("saved")), None) if self.stage else None
        loaded = next(iter(self.resume.events("resumed")), None) if self.resume else None
        times = {"save_s": (saved or {}).get("save_s"), "save_bytes": (saved or {}).get("bytes"),
                 "load_s": (loaded or {}).get("load_s")}
        return {k: v for k, v in times.items() if isinstance(v, (int, float))}

    @property
    def resumed_summary(self) -> Optional[Dict]:
        return next(iter(self.resume.events("summary")), None) if self.resume else None
