"""A small GPT: token and position embeddings, pre-norm transformer blocks with causal
self-attention, a language-model head tied to the token embedding. Plain PyTorch.

Presets (byte-level vocabulary of 256):
    tiny   ~0.1M parameters, trains on a CPU in seconds (the smoke test's default)
    small  ~10M
    125m   GPT-2 small's shape, ~85M with this vocabulary
    1b     ~1.2B, for GPUs with FSDP or ZeRO-3
"""

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


@dataclass
class GPTConfig:
    vocab_size: int = 256
    block_size: int = 64
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 64
    dropout: float = 0.0          # 0 keeps runs (and --resume) reproducible
    activation_checkpointing: bool = False


PRESETS = {
    "tiny": dict(block_size=64, n_layer=2, n_head=2, n_embd=64),
    "small": dict(block_size=256, n_layer=6, n_head=6, n_embd=384),
    "125m": dict(block_size=1024, n_layer=12, n_head=12, n_embd=768),
    "1b": dict(block_size=2048, n_layer=24, n_head=16, n_embd=2048),
}


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.n_head = config.n_head
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        self.dropout = config.dropout

    def forward(self, x):
        batch, seq, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=2)
        q, k, v = (t.view(batch, seq, self.n_head, width // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0)
        return self.proj(y.transpose(1, 2).contiguous().view(batch, seq, width))


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln2 = nn.LayerNorm(config.n_embd)
        self.mlp = nn.Sequential(nn.Linear(config.n_embd, 4 * config.n_embd), nn.GELU(),
                                 nn.Linear(4 * config.n_embd, config.n_embd), nn.Dropout(config.dropout))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.tok = nn.Embedding(config.vocab_size, config.n_embd)
        self.pos = nn.Embedding(config.block_size, config.n_embd)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.head.weight = self.tok.weight   # weight tying
        self.apply(self._init)

    @staticmethod
    def _init(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx, targets=None):
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(positions)
        for block in self.blocks:
            if self.config.activation_checkpointing and self.training:
                x = checkpoint(block, x, use_reentrant=False)   # recompute in backward: less memory
            else:
                x = block(x)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def build(preset: str, **overrides) -> GPT:
    return GPT(GPTConfig(**{**PRESETS[preset], **overrides}))
