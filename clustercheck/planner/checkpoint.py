"""What one checkpoint writes, per node, for every training mode: plan's accounting on disk.

Per parameter, with Adam (the same components as memory.py):

    weights  4 in fp32 training, 2 in bf16 / fp16 (what a model-states file holds)
    states  12 fp32 master weights (or fp32 weights) and Adam's two fp32 moments

    ddp             every node's first rank writes weights and states whole (fp32 under
                    autocast: 12 B/param), as the reference trainer does: one copy per node,
                    which on a shared directory replace one another
    zero1, zero2    every rank writes its 12/N B/param of states; the model's weights are
                    written once by rank 0 (on a disk per node: by every node's first rank,
                    DeepSpeed's use_node_local_storage)
    zero3 (offload) every rank writes its 12/N B/param; the model-states files hold no weights
    fsdp            every rank writes its shards: 12/N B/param

A filesystem shared by every node holds every node's writes; a disk per node holds its own.

A resume reads, per node (ranks of one node reading one file share its page cache: once): in ddp
the node's whole copy; in zero1 and zero2 the model's weights and its ranks' states; in zero3 and
fsdp its ranks' shards.
The reference trainer's presets are counted here from their shapes (a test holds the count
equal to the model's own).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Sequence

STATE_BYTES = 12
MODES = ("ddp", "zero1", "zero2", "zero3", "zero3-offload", "fsdp")

# reference_train/model.py's presets: (vocabulary, positions, layers, width)
PRESET_SHAPES = {"tiny": (256, 64, 2, 64), "small": (256, 256, 6, 384), "125m": (256, 1024, 12, 768),
                 "1b": (256, 2048, 24, 2048)}


def preset_params(preset: str) -> int:
    """Parameters of a reference-trainer preset: embeddings (the head tied to them), blocks, final norm."""
    vocab, positions, layers, width = PRESET_SHAPES[preset]
    block = 12 * width * width + 13 * width        # qkv, projection, the 4x MLP, two layer norms
    return vocab * width + positions * width + layers * block + 2 * width


@dataclass
class CheckpointWrites:
    mode: str
    params: int
    per_node: Dict[str, int]        # node -> bytes it writes in one save
    shared: bool
    reads: Dict[str, int]           # node -> bytes its ranks read in one resume (a file shared by them once)

    @property
    def total(self) -> int:
        return sum(self.per_node.values())

    def needed(self, node: str, keep: int) -> int:
        """Bytes the filesystem under `node`'s checkpoint directory must hold for `keep` checkpoints."""
        return keep * (self.total if self.shared else self.per_node[node])


def checkpoint_writes(params: int, mode: str, ranks: Dict[str, int], precision: str = "fp32",
                      shared: bool = True, order: Sequence[str] = ()) -> CheckpointWrites:
    """Bytes every node writes in one save of a `params` model under `mode`, ranks per node as given."""
    if mode not in MODES:
        raise ValueError(f"no checkpoint accounting for mode {mode!r}")
    names = list(order or ranks)
    world = sum(ranks.values()) or 1
    weights = (4 if precision == "fp32" else 2) * params
    sharded = STATE_BYTES * params / world
    per_node, reads = {}, {}
    for i, node in enumerate(names):
        if mode == "ddp":
            per_node[node] = STATE_BYTES * params
            reads[node] = STATE_BYTES * params
            continue
        written = sharded * ranks[node]
        if mode in ("zero1", "zero2") and (i == 0 or not shared):
            written += weights
        per_node[node] = int(written)
        reads[node] = int(sharded * ranks[node] + (weights if mode in ("zero1", "zero2") else 0))
    return CheckpointWrites(mode, params, per_node, shared, reads)
