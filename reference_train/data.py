"""Training text that needs no download, as bytes, cut into fixed windows.

The default corpus is generated: sentences from a small seeded grammar, the same on every
rank and every run, with enough structure that a tiny model's loss falls clearly within
a few dozen steps. `--data FILE` takes the user's own text (.txt) or JSONL with a "text"
field per line.
"""

import json
import random

import torch
from torch.utils.data import Dataset

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
