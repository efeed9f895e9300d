"""The memory model behind `clustercheck plan`: bytes per GPU for every training mode.

One accounting of model states, per parameter, for mixed-precision training with Adam
(the split DeepSpeed's estimators document in their comments):

    p16  2  half-precision weights (what the forward pass reads)
    g16  2  half-precision gradients
    g32  4  fp32 gradients (the optimizer's input)
    p32  4  fp32 master weights
    adam 8  Adam's two fp32 moments
           --
           20 bytes per parameter when nothing is sharded

Each mode shards some of these over the N GPUs of the job and keeps the rest whole:

    ddp            nothing sharded                       20                 (torch autocast: fp32 weights
                                                                             4, fp32 grads 4, DDP's bucket
                                                                             copy of the grads 4, Adam 8)
    zero1          p16, g16 whole; g32 p32 adam sharded   4 + 16/N
    zero2          p16 whole; the rest sharded           2 + 18/N           = DeepSpeed's estimator
    zero3          all sharded, no separate g16          18/N + 4 x layer   = DeepSpeed's estimator
    zero2-offload  p16 on the GPU; the rest in host RAM  2                  = DeepSpeed's estimator
    zero3-offload  the largest layer gathered            4 x layer          = DeepSpeed's estimator
    fsdp           p32 g32 adam sharded (FSDP2 casts to  16/N + 4 x layer
                   bf16 when it gathers a block)
    lora           frozen base p16 whole; the adapter    2 + 20 x adapter/params
                   as ddp
    qlora          base 4-bit NF4 with double            ~0.52 + 20 x adapter/params
                   quantisation (QLoRA paper, 4.127
                   bits) except embeddings and head, 2
    inference      p16 plus the KV cache                 2

"x layer" is the largest layer's parameters gathered whole, its half weights and gradients
(4 bytes each), as in DeepSpeed's ZeRO-3 estimator. Where DeepSpeed has an estimator
(zero2, zero3 and their offload) this model gives the same number (tests check it); zero1,
which DeepSpeed does not estimate, uses the same components, so no mode that shards less
can need less. DeepSpeed's host-memory figures for offload (with its 1.5x buffer factor)
are used as they are.

Activations (per GPU, per micro-batch) follow Korthikanti et al., "Reducing Activation
Recomputation in Large Transformer Models" (2022), table 2 without tensor parallelism:
34 x s x b x h bytes per layer in 16-bit, the 5 x a x s / h attention-score term dropped
because SDPA / FlashAttention do not keep the scores; with gradient checkpointing each layer
keeps its 2 x s x b x h input and one layer is recomputed at a time. The logits add
s x b x V x 10 bytes (16-bit logits, the fp32 copy the loss takes, its gradient).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Dict, List, Optional

from clustercheck.core.errors import InputError
from clustercheck.core.inputs import read_text_file

NF4_BYTES = 4.127 / 8          # QLoRA, section 3: 4-bit NF4 + 0.127 bits of double-quantised constants
OFFLOAD_BUFFER = 1.5           # DeepSpeed's additional_buffer_factor for host memory
LORA_TARGETS_ALL = ("q", "k", "v", "o", "gate", "up", "down")


@dataclass(frozen=True)
class Shape:
    """What the plan needs to know about a transformer; `source` says where it came from."""

    params: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    source: str
    tied: bool = False
    largest_layer_override: int = 0     # --largest-layer

    @property
    def kv_dim(self) -> int:
        return self.hidden * self.kv_heads // self.heads

    @property
    def embedding(self) -> int:
        return self.vocab * self.hidden

    @property
    def block(self) -> int:
        h, i = self.hidden, self.intermediate
        return 2 * h * h + 2 * h * self.kv_dim + 3 * h * i + 2 * h

    @property
    def largest_layer(self) -> int:
        """The largest module gathered whole under ZeRO-3 / FSDP: the embedding or a block."""
        return self.largest_layer_override or max(self.embedding, self.block)

    def adapter(self, rank: int, targets=LORA_TARGETS_ALL) -> int:
        """LoRA parameters: rank x (in + out) for each targeted projection of every layer."""
        h, kv, i = self.hidden, self.kv_dim, self.intermediate
        sizes = {"q": (h, h), "k": (h, kv), "v": (h, kv), "o": (h, h), "gate": (h, i), "up": (h, i), "down": (i, h)}
        return self.layers * sum(rank * sum(sizes[t]) for t in targets)

    @property
    def quantised(self) -> int:
        """Parameters a 4-bit base quantises: the blocks' linear layers (embeddings and head stay 16-bit)."""
        return self.layers * (self.block - 2 * self.hidden)


def llama_params(hidden: int, layers: int, heads: int, kv_heads: int, intermediate: int, vocab: int,
                 tied: bool) -> int:
    shape = Shape(0, hidden, layers, heads, kv_heads, intermediate, vocab, "", tied)
    return shape.embedding * (1 if tied else 2) + layers * shape.block + hidden


def assumed_shape(params: int, vocab: int = 32000) -> Shape:
    """A Llama-shaped model of about this size (hidden = 128 x layers, MLP 8/3 x hidden), for a plan
    given only --params: labelled as assumed wherever it is shown."""
    def size(hidden: int) -> int:
        return llama_params(hidden, hidden // 128, hidden // 128, hidden // 128, _mlp(hidden), vocab, False)
    hidden = 256
    while size(hidden + 256) <= params:
        hidden += 256
    heads = max(1, hidden // 128)
    block = Shape(0, hidden, 1, heads, heads, _mlp(hidden), vocab, "").block
    layers = max(1, round((params - 2 * vocab * hidden) / block))
    return Shape(params, hidden, layers, heads, heads, _mlp(hidden), vocab,
                 f"assumed Llama shape for {params / 1e9:g}B: hidden {hidden}, {layers} layers (give --model for the real one)")


def _mlp(hidden: int) -> int:
    return 256 * ((8 * hidden // 3 + 255) // 256)


def read_config(path: str) -> Shape:
    """A Hugging Face config.json (or the model directory holding it): Llama-style or GPT-2-style keys."""
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    if not os.path.exists(path) and os.path.basename(path) == "config.json":
        raise InputError("the model directory has no config.json", path)
    text = read_text_file(path, "model config (config.json)", max_bytes=64 * 2 ** 20)
    return parse_config(text, path)


def parse_config(text: str, path: str) -> Shape:
    """The shape from config.json's text; bad input names `path` and the key."""
    try:
        config = json.loads(text)
    except ValueError as exc:
        raise InputError(f"cannot read the model's config ({exc})", path) from None
    if not isinstance(config, dict):
        raise InputError("config.json is not a JSON object", path)
    config = {**config.get("text_config", {}), **config} if isinstance(config.get("text_config"), dict) else config

    def key(*names, default=None):
        for name in names:
            value = config.get(name)
            if value is not None:
                if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                    raise InputError(f"{name} must be a positive integer", path, value=value)
                return value
        if default is not None:
            return default
        raise InputError(f"config.json has none of {', '.join(names)}", path)

    hidden = key("hidden_size", "n_embd", "d_model")
    layers = key("num_hidden_layers", "n_layer", "num_layers")
    heads = key("num_attention_heads", "n_head")
    kv_heads = key("num_key_value_heads", default=heads)
    intermediate = key("intermediate_size", "n_inner", "ffn_dim", default=4 * hidden)
    vocab = key("vocab_size")
    tied = bool(config.get("tie_word_embeddings", config.get("model_type") == "gpt2"))
    params = llama_params(hidden, layers, heads, kv_heads, intermediate, vocab, tied)
    return Shape(params, hidden, layers, heads, kv_heads, intermediate, vocab,
                 f"{path}: {config.get('model_type', 'model')}, hidden {hidden}, {layers} layers, vocab {vocab}", tied)


@dataclass(frozen=True)
class Workload:
    """How the model is trained: what the activations depend on."""

    seq_len: int = 2048
    micro_batch: int = 1
    checkpointing: bool = True
    lora_rank: int = 8


def activation_bytes(shape: Shape, work: Workload) -> int:
    sbh = work.seq_len * work.micro_batch * shape.hidden
    per_layer = 34 * sbh
    kept = shape.layers * 2 * sbh + per_layer if work.checkpointing else shape.layers * per_layer
    return int(kept + 10 * work.seq_len * work.micro_batch * shape.vocab)


def kv_cache_bytes(shape: Shape, work: Workload) -> int:
    return 2 * shape.layers * work.seq_len * work.micro_batch * shape.kv_dim * 2


@dataclass
class ModeNeed:
    mode: str
    state_bytes: float          # model states per GPU
    activation_bytes: float     # per GPU at the workload's micro-batch
    cpu_bytes: float            # host memory per node (offload)
    how: str                    # which components, sharded how

    @property
    def gpu_bytes(self) -> float:
        return self.state_bytes + self.activation_bytes


def needs(shape: Shape, gpus_per_node: int, nodes: int, work: Workload = Workload()) -> List[ModeNeed]:
    """Every mode's need per GPU, from the one accounting in the module docstring."""
    p, n, layer = shape.params, gpus_per_node * nodes, shape.largest_layer
    act = activation_bytes(shape, work)
    adapter = shape.adapter(work.lora_rank)
    rows = [
        ModeNeed("ddp", 20 * p, act, 0, "20 B/param whole"),
        ModeNeed("zero1", 4 * p + int(16 * p / n), act, 0, "p16 g16 whole, 16 B/param sharded"),
        ModeNeed("zero2", 2 * p + int(18 * p / n), act, 0, "p16 whole, 18 B/param sharded"),
        ModeNeed("zero2-offload", 2 * p, act, p * max(4 * n, 16) * OFFLOAD_BUFFER,
                 "p16 on GPU, optimizer in host RAM"),
        ModeNeed("zero3", 4 * layer + int(18 * p / n), act, 0, "18 B/param sharded + largest layer"),
        ModeNeed("zero3-offload", 4 * layer, act, p * 18 / nodes * OFFLOAD_BUFFER,
                 "largest layer on GPU, the rest in host RAM"),
        ModeNeed("fsdp", 4 * layer + int(16 * p / n), act, 0, "16 B/param sharded + largest layer"),
        ModeNeed("lora", 2 * p + 20 * adapter, act, 0, f"frozen p16 base + rank-{work.lora_rank} adapter"),
        ModeNeed("qlora", int(NF4_BYTES * shape.quantised + 2 * (p - shape.quantised)) + 20 * adapter, act, 0,
                 f"4-bit base + rank-{work.lora_rank} adapter"),
        ModeNeed("inference", 2 * p, kv_cache_bytes(shape, work), 0, "p16 + KV cache"),
    ]
    return rows


SHARDING_ORDER = (("ddp", "zero1"), ("zero1", "zero2"), ("zero2", "zero3"), ("zero2", "fsdp"),
                  ("zero2", "zero2-offload"), ("zero3", "zero3-offload"), ("ddp", "lora"), ("lora", "qlora"))
"""(less sharded, more sharded) pairs: the first may never need less GPU memory than the second."""


def by_mode(rows: List[ModeNeed]) -> Dict[str, ModeNeed]:
    return {row.mode: row for row in rows}


def gib(value: Optional[float]) -> str:
    return "-" if not value else f"{value / 2 ** 30:.1f}"
