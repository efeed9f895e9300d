"""The trainer on a Hugging Face model directory against a bare transformers training loop (issue 13).

    python benchmarks/finetune.py [--repeat 5]      # no root needed; transformers installed

A tiny Llama made here (tests/tiny_models.py, nothing downloaded), the same text as bytes in
windows of 64 tokens, micro-batch 8, AdamW with clipping at 1.0, one thread:
- bare: AutoModelForCausalLM loaded in this process, logits -> cross entropy, backward, clip,
  step: nothing else;
- reference_train --model DIR --mode ddp, one process under torchrun, its own step timer.
Median step time of each over --repeat runs, interleaved, in the same run; target at most 1.10x.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "reference_train"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from data import ByteWindows, generated_corpus  # noqa: E402

from tests.tiny_models import tiny_llama  # noqa: E402

STEPS, MICRO_BATCH, SEQ = 200, 8, 64


def bare_step_s(model_dir: str) -> float:
    from transformers import AutoModelForCausalLM
    torch.manual_seed(1234)
    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True).float()
    dataset = ByteWindows(generated_corpus(seed=1234), SEQ)
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(1234)).tolist()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    times = []
    for step in range(STEPS):
        start = time.perf_counter()
        pairs = [dataset[i] for i in order[step * MICRO_BATCH % len(order):][:MICRO_BATCH]]
        inputs, targets = torch.stack([x for x, _ in pairs]), torch.stack([y for _, y in pairs])
        logits = model(input_ids=inputs, use_cache=False).logits
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss.item()
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def trainer_step_s(model_dir: str) -> float:
    with tempfile.TemporaryDirectory() as work:
        proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1",
                               os.path.join(HERE, "..", "reference_train", "train.py"), "--model", model_dir,
                               "--seq-len", str(SEQ), "--mode", "ddp", "--steps", str(STEPS),
                               "--micro-batch", str(MICRO_BATCH), "--log-every", str(STEPS)],
                              capture_output=True, text=True, cwd=work, env=dict(os.environ, OMP_NUM_THREADS="1"))
    summary = [json.loads(line) for line in proc.stdout.splitlines() if '"summary"' in line]
    if not summary:
        raise SystemExit(f"the trainer failed: {proc.stderr[-800:]}")
    return summary[0]["ranks"][0]["step_ms"] / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        model_dir = tiny_llama(os.path.join(root, "tiny-llama"))
        bare, trainer = [], []
        for _ in range(args.repeat):   # interleaved, so both see the same machine
            bare.append(bare_step_s(model_dir))
            trainer.append(trainer_step_s(model_dir))
    b, t = statistics.median(bare), statistics.median(trainer)
    print(f"finetune benchmark: tiny Llama (2 layers, hidden 64), {SEQ} tokens x micro-batch {MICRO_BATCH}, "
          f"{STEPS} steps, 1 thread, median step of {args.repeat} runs each\n")
    print("| measure | ms per step | ratio | target |")
    print("|---|---|---|---|")
    print(f"| bare transformers loop, same model and data | {b * 1000:.2f} | 1.00x | |")
    print(f"| reference_train --model DIR --mode ddp, 1 process under torchrun | {t * 1000:.2f} | {t / b:.2f}x | "
          f"<= 1.10x |")


if __name__ == "__main__":
    main()
