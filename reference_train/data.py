"""Training text that needs no download, as bytes, cut into fixed windows.

The default corpus is generated: sentences from a small seeded grammar, the same on every
rank and every run, with enough structure that a tiny model's loss falls clearly within
a few dozen steps. `--data FILE` takes the user's own text (.txt) or JSONL with a "text"
field per line.
"""

import json
import random

import torch
from torch.utils.data import Dataset, DistributedSampler

SUBJECTS = ["the cat", "a dog", "the old man", "my sister", "the engineer", "a small bird", "the cluster",
            "our team", "the teacher", "a red fox"]
VERBS = ["sees", "likes", "builds", "finds", "carries", "watches", "trains", "follows", "paints", "counts"]
OBJECTS = ["the river", "three apples", "a new model", "the green door", "twelve stones", "the night sky",
           "a long road", "the last train", "four gpus", "a quiet song"]
ENDINGS = ["today.", "again.", "in the morning.", "with care.", "every day.", "before noon."]


def generated_corpus(num_sentences: int = 20000, seed: int = 1234) -> str:
    rng = random.Random(seed)
    return "\n".join(f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(ENDINGS)}"
                     for _ in range(num_sentences)) + "\n"


def load_text(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        if not path.endswith((".jsonl", ".json")):
            return handle.read()
        texts = []
        for number, line in enumerate(handle, 1):
            if line.strip():
                try:
                    texts.append(json.loads(line)["text"])
                except (ValueError, KeyError, TypeError) as exc:
                    raise SystemExit(f"{path}:{number}: expected a JSON object with a \"text\" field ({exc})") from None
        return "\n".join(texts)


class TokenWindows(Dataset):
    """Windows of block_size + 1 token ids (inputs and the next-token targets), non-overlapping."""

    def __init__(self, ids: torch.Tensor, block_size: int, unit: str = "tokens"):
        self.data = ids
        self.block_size = block_size
        if len(self.data) < 2 * (block_size + 1):
            raise SystemExit(f"the training text is too short: {len(self.data)} {unit} for windows of {block_size}")

    def __len__(self):
        return (len(self.data) - 1) // self.block_size

    def __getitem__(self, index):
        start = index * self.block_size
        chunk = self.data[start:start + self.block_size + 1]
        return chunk[:-1], chunk[1:]


class ByteWindows(TokenWindows):
    """The text as bytes (the built-in GPT's vocabulary of 256)."""

    def __init__(self, text: str, block_size: int):
        super().__init__(torch.tensor(list(text.encode("utf-8")), dtype=torch.long), block_size, unit="bytes")


# ---- the batches of a step -------------------------------------------------------------------
_EPOCH_ORDER = {}


def batch_for(sampler, dataset, step, micro, args, device, cache=_EPOCH_ORDER):
    """The micro-batch of a global step: a pure function of the step, so --resume sees the same data."""
    steps_per_epoch = max(1, len(sampler) // (args.micro_batch * args.grad_accum))
    epoch = step // steps_per_epoch
    if epoch not in cache:   # this rank's share of the epoch's shuffled order, once per epoch
        sampler.set_epoch(epoch)
        cache.clear()
        cache[epoch] = list(iter(sampler))
    order = cache[epoch]
    start = ((step % steps_per_epoch) * args.grad_accum + micro) * args.micro_batch
    pairs = [dataset[i] for i in order[start:start + args.micro_batch]]
    return torch.stack([x for x, _ in pairs]).to(device), torch.stack([y for _, y in pairs]).to(device)


def global_batch(args, dataset, world):
    """Every rank's micro-batches of a step, concatenated: what one process would train on."""
    samplers = [DistributedSampler(dataset, num_replicas=world, rank=r, shuffle=True, seed=args.seed,
                                   drop_last=True) for r in range(world)]
    caches = [{} for _ in samplers]   # each rank's epoch order, computed once per epoch

    def batches(step):
        parts = [batch_for(sampler, dataset, step, micro, args, torch.device("cpu"), cache=cache)
                 for sampler, cache in zip(samplers, caches) for micro in range(args.grad_accum)]
        return torch.cat([x for x, _ in parts]), torch.cat([y for _, y in parts])
    return batches
