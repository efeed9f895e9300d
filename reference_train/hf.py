"""The user's own model: a Hugging Face model directory, loaded offline, fine-tuned as the trainer's GPT is.

Clusters are often offline and the weights are uploaded by hand, so nothing here may reach
the network: HF_HUB_OFFLINE and local_files_only. The directory holds config.json and the
weights (safetensors or .bin), and a tokenizer when it has one; without a tokenizer the
text is fed as bytes (ids below the vocabulary size), which still proves the model trains.

LoRA goes through peft: the base frozen, the adapter trained and checkpointed like any run.
"""

import os
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class CausalLM(nn.Module):
    """A Hugging Face causal LM behind the trainer's interface: forward(inputs, targets) -> loss."""

    def __init__(self, model, seq_len: int):
        super().__init__()
        self.model = model
        self.config = SimpleNamespace(block_size=seq_len, vocab_size=model.config.vocab_size)

    @property
    def blocks(self):
        """The decoder layers (FSDP shards each): the longest ModuleList in the model."""
        lists = [m for m in self.model.modules() if isinstance(m, nn.ModuleList)]
        return max(lists, key=len) if lists else []

    def forward(self, idx, targets=None):
        logits = self.model(input_ids=idx, use_cache=False).logits
        if targets is None:
            return logits
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def load(directory: str, seq_len: int, checkpointing: bool = False, lora=None) -> CausalLM:
    """The model from `directory` (offline), in fp32 for training, LoRA-wrapped when lora=(rank, alpha, targets)."""
    from transformers import AutoModelForCausalLM   # optional (the hf extra): only for --model
    model = AutoModelForCausalLM.from_pretrained(directory, local_files_only=True).float()
    model.train()   # from_pretrained returns eval mode, where Hugging Face models skip gradient checkpointing
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if lora:
        from peft import LoraConfig, get_peft_model   # optional: only for --lora
        rank, alpha, targets = lora
        present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
        targets = [t for t in targets if t in present]
        if not targets:
            raise SystemExit(f"--lora-targets: none of them is a module of {directory} (it has: "
                             f"{', '.join(sorted(present - {''}))[:300]})")
        model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=alpha, target_modules=targets, lora_dropout=0.0))
    return CausalLM(model, seq_len)


def max_positions(directory: str) -> int:
    from transformers import AutoConfig   # optional, as load
    config = AutoConfig.from_pretrained(directory, local_files_only=True)
    return int(getattr(config, "max_position_embeddings", 0) or getattr(config, "n_positions", 0) or 2048)


def token_ids(directory: str, text: str, vocab_size: int):
    """The text as the model's tokens (its tokenizer when the directory has one, else bytes), and which."""
    try:
        from transformers import AutoTokenizer   # optional: bytes without it
        tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
    except (OSError, ValueError, TypeError, KeyError):
        tokenizer = None
    if tokenizer is not None:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        return torch.tensor(ids, dtype=torch.long), f"{type(tokenizer).__name__} from the model directory"
    if vocab_size < 256:
        raise SystemExit(f"{directory} has no tokenizer and a vocabulary of {vocab_size} (< 256): cannot feed bytes")
    return torch.tensor(list(text.encode("utf-8")), dtype=torch.long), "bytes (the model directory has no tokenizer)"


def trainable(module) -> list:
    return [p for p in module.parameters() if p.requires_grad]


def counts(module) -> dict:
    total = sum(p.numel() for p in module.parameters())
    train = sum(p.numel() for p in trainable(module))
    return {"parameters": total, "trainable": train}
