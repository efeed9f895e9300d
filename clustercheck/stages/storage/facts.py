"""What the storage probes reported (StorageFacts) and each node's figures in one shape: the data the storage
judges and views read; no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

from clustercheck.core.inventory import Node


@dataclass
class Throughput:
    """One node's slots at once: bytes and the longest slot's seconds (they ran together)."""

    bytes: int = 0
    seconds: float = 0.0
    files: int = 0

    @property
    def rate(self) -> float:
        return self.bytes / self.seconds if self.seconds > 0 else 0.0

    @property
    def files_rate(self) -> float:
        return self.files / self.seconds if self.seconds > 0 else 0.0


def throughput(slots: List[Dict], prefix: str) -> Optional[Throughput]:
    measured = [s for s in slots if isinstance(s.get(f"{prefix}_bytes"), int) and s.get(f"{prefix}_s")]
    if not measured:
        return None
    return Throughput(sum(s[f"{prefix}_bytes"] for s in measured), max(s[f"{prefix}_s"] for s in measured),
                      sum(s.get(f"{prefix}_files", 0) for s in measured))


@dataclass
class NodeStorage:
    """One node's view of the measured directory."""

    node: str
    doc: Dict

    @property
    def filesystem(self) -> Dict:
        return self.doc.get("filesystem") or {}

    @property
    def mount(self) -> Dict:
        return self.filesystem.get("mount") or {}

    @property
    def path(self) -> str:
        return self.doc.get("dir") or "?"

    @property
    def slots(self) -> List[Dict]:
        return self.doc.get("slot_results") or []

    def write(self) -> Optional[Throughput]:
        return throughput(self.slots, "write")

    def read(self) -> Optional[Throughput]:
        return throughput(self.slots, "read")

    def data(self) -> Optional[Throughput]:
        return throughput(self.slots, "data")

    @property
    def errors(self) -> List[Dict]:
        """Every write or read failure: the directory's own, then each slot's (one per distinct errno and path)."""
        found = [self.doc["write_error"]] if self.doc.get("write_error") else []
        found += [s["error"] for s in self.slots if s.get("error")]
        unique = {(e.get("path"), e.get("errno")): e for e in found}
        return list(unique.values())


@dataclass
class StorageFacts:
    nodes: List[Node]
    directory: str                                           # as asked ("." is each node's run directory)
    ranks: Dict[str, int] = field(default_factory=dict)      # node -> rank slots measured
    measured: Dict[str, Dict] = field(default_factory=dict)  # node -> the measuring probe's document
    problems: Dict[str, str] = field(default_factory=dict)   # node -> why there is no document
    coherence: Dict[str, Dict] = field(default_factory=dict)     # node -> the coherence probe's document
    coherence_problems: Dict[str, str] = field(default_factory=dict)
    writer: str = ""                                         # the node that wrote for the coherence check
    window: float = 0.0
    data_dir: str = ""
    params: int = 0
    model: str = ""
    mode: str = "ddp"
    precision: str = "fp32"
    keep: int = 1
    step_seconds: Optional[float] = None
    save_every: int = 0
    wall_s: float = 0.0

    def views(self) -> List[NodeStorage]:
        return [NodeStorage(n.name, self.measured[n.name]) for n in self.nodes if n.name in self.measured]

    @property
    def order(self) -> List[str]:
        return [n.name for n in self.nodes]
