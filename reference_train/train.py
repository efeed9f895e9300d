"""reference_train: a small GPT trained with DDP, DeepSpeed ZeRO 1/2/3 (and 3 with CPU
offload), or FSDP, readable top to bottom. clustercheck's `smoke` runs it on every node.

One node, 2 processes (CPU with Gloo, or GPUs with NCCL):
    torchrun --standalone --nproc-per-node 2 reference_train/train.py --mode ddp --steps 50
Several nodes (run on each; the first node's address as the rendezvous endpoint):
    torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint node01:29400 \\
        --rdzv-id run1 reference_train/train.py --mode zero3 --preset 125m --precision bf16
With DeepSpeed's launcher (pdsh over a hostfile of `node slots=N` lines):
    deepspeed --hostfile hostfile reference_train/train.py --mode zero2 --preset small
Resume from the last checkpoint (same losses as an uninterrupted run):
    torchrun ... reference_train/train.py --mode ddp --steps 100 --save-dir ckpt --save-every 50 --resume

Rank 0 prints one JSON line per log step (step, loss, tokens/s, peak memory) and a final
"summary" line: first and last loss, the first NaN or Inf (step and rank), each rank's
step time and throughput with its node, the losses next to a single-process reference
(--reference-steps), and, under DDP, whether every rank holds the same weights. With
--save-dir it first says whether that directory is shared by the nodes or a disk per node;
--save-at K saves there (each rank what it owns), and a second run with --resume must
repeat the losses of the steps after K.
"""

import argparse
import gc
import os
import resource
import sys
import time

import torch
import torch.distributed as dist
from torch.utils.data import DistributedSampler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checkpoint import load, save, written_bytes  # noqa: E402
from checks import (  # noqa: E402
    REFERENCE_MAX_PARAMETERS,
    REFERENCE_MAX_SEQUENCES,
    RankClock,
    first_nonfinite,
    gather,
    log,
    node_name,
    reference_losses,
    storage,
)
from data import ByteWindows, TokenWindows, batch_for, generated_corpus, global_batch, load_text  # noqa: E402
from dsconfig import ConfigError, mode_of, own_schedule, read  # noqa: E402
from hf import LORA_TARGETS  # noqa: E402
from model import PRESETS, build  # noqa: E402
from parallel import ranks_agree, weights_checksum, wrap  # noqa: E402

MODES = ("ddp", "zero1", "zero2", "zero3", "zero3-offload", "fsdp")   # --deepspeed adds zero0 and -offload


class Callbacks:
    """What whoever starts the trainer may watch or change; run by hand, nothing is registered.

    clustercheck's launcher registers its hang hook (which phase and step a rank is in) and, on
    the sandbox, faults made on purpose. Each list holds callables:
    phase(name), step(number), lr(value) -> value, loss(step, tensor) -> tensor.
    """

    def __init__(self):
        self.phase, self.step, self.lr, self.loss = [], [], [], []

    def on_phase(self, name):
        for hook in self.phase:
            hook(name)

    def on_step(self, number):
        for hook in self.step:
            hook(number)

    def adjust_lr(self, value):
        for hook in self.lr:
            value = hook(value)
        return value

    def adjust_loss(self, step, loss):
        for hook in self.loss:
            loss = hook(step, loss)
        return loss


CALLBACKS = Callbacks()


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=MODES, default="ddp")
    parser.add_argument("--preset", choices=list(PRESETS), default="tiny")
    parser.add_argument("--data", help="your own .txt or .jsonl ({\"text\": ...} per line); default: generated")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--micro-batch", type=int, default=8, help="sequences per rank per micro-step")
    parser.add_argument("--grad-accum", type=int, default=1)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="fp32", help="bf16/fp16 on GPUs")
    parser.add_argument("--activation-checkpointing", action="store_true")
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--save-dir", help="checkpoints go here (step_N/)")
    parser.add_argument("--save-every", type=int, default=0)
    parser.add_argument("--save-at", type=int, default=0, help="save one checkpoint at this step (into --save-dir)")
    parser.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --save-dir")
    parser.add_argument("--clip", type=float, default=1.0, help="gradient norm clipping, every mode (0: none)")
    parser.add_argument("--reference-steps", type=int, default=0,
                        help="also compute these first steps' losses in one process, for the same global batch")
    parser.add_argument("--losses-after", type=int, default=-1,
                        help="log the loss of every step after this one (the resume check compares them)")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--model", help="fine-tune this Hugging Face model directory (offline; needs transformers)")
    parser.add_argument("--seq-len", type=int, default=128, help="tokens per sequence with --model")
    parser.add_argument("--deepspeed", metavar="FILE", help="your DeepSpeed config (\"auto\" values resolved as "
                                                           "Hugging Face does); its ZeRO stage sets the mode")
    parser.add_argument("--lora", action="store_true", help="train a LoRA adapter on a frozen --model (needs peft)")
    parser.add_argument("--lora-rank", type=int, default=8)
    parser.add_argument("--lora-alpha", type=int, default=16)
    parser.add_argument("--lora-targets", default=",".join(LORA_TARGETS),
                        help="comma-separated module names (those the model has are used)")
    parser.add_argument("--local_rank", type=int, default=None, help=argparse.SUPPRESS)  # the deepspeed launcher's
    return parser.parse_args(argv)


# Gloo's worker thread drops a finished collective's tensors (which takes the GIL) a moment after the caller returned
# from it, holding the group's lock; the group's destructor takes that lock holding the GIL. A group destroyed in that
# moment (right after the last barrier, or by the collector at exit, where the DDP reducer's hold on it goes) deadlocks
# the rank: seen as smoke's ranks that never ended after their summary, in ~ProcessGroupGloo under torch._dynamo's
# atexit hook. So the last collective's tensors are let go first, with the GIL released, and the reducer before the
# group.
SETTLE_S = 0.2


def leave_group():
    time.sleep(SETTLE_S)
    gc.collect()
    dist.destroy_process_group()


def setup_distributed():
    cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        torch.cuda.set_device(local_rank)
    backend = "nccl" if cuda else "gloo"
    dist.init_process_group(backend)
    return torch.device("cuda", local_rank) if cuda else torch.device("cpu"), backend


# ---- training ---------------------------------------------------------------------------------------
def peak_memory_mb(device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2 ** 20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def make_model(args):
    """The built-in GPT of --preset, or the user's model directory (LoRA-wrapped with --lora)."""
    if not args.model:
        return build(args.preset, activation_checkpointing=args.activation_checkpointing)
    import hf   # transformers loads only for --model
    lora = (args.lora_rank, args.lora_alpha, args.lora_targets.split(",")) if args.lora else None
    seq_len = min(args.seq_len, hf.max_positions(args.model))
    return hf.load(args.model, seq_len, args.activation_checkpointing, lora)


def check_args(args) -> None:
    if args.lora and not args.model:
        raise SystemExit("--lora needs --model (a model directory to adapt)")
    if args.deepspeed:
        try:
            args.mode = mode_of(read(args.deepspeed))
        except ConfigError as exc:
            raise SystemExit(f"--deepspeed {args.deepspeed}: {exc}") from None


def make_dataset(args, model):
    text = load_text(args.data) if args.data else generated_corpus(seed=args.seed)
    if not args.model:
        return ByteWindows(text, model.config.block_size)
    import hf   # as above
    ids, tokens = hf.token_ids(args.model, text, model.config.vocab_size)
    log({"event": "model", "directory": args.model, "tokens": tokens, **hf.counts(model),
         "lora": {"rank": args.lora_rank, "alpha": args.lora_alpha} if args.lora else None})
    return TokenWindows(ids, model.config.block_size)


def reference_run(args, dataset, world, parameters):
    """(the first steps' losses in one process, or None; why they were skipped, or None)."""
    if not args.reference_steps:
        return None, None
    global_sequences = world * args.grad_accum * args.micro_batch
    if global_sequences > REFERENCE_MAX_SEQUENCES:
        return None, f"a global batch of {global_sequences} sequences is too much for one rank to recompute"
    if parameters > REFERENCE_MAX_PARAMETERS:
        return None, f"{parameters:,} parameters are too many for one rank to recompute on its CPU"
    if args.deepspeed and own_schedule(read(args.deepspeed)):
        return None, ("the DeepSpeed config brings its own optimizer settings or scheduler; the "
                      "single-process reference follows plain AdamW")
    if dist.get_rank() != 0:   # the others wait for it at the first collective
        return None, None
    return reference_losses(lambda: make_model(args), args.seed, global_batch(args, dataset, world),
                            min(args.reference_steps, args.steps), args.lr, args.clip), None


class Run:
    """One training run's state: what the loop reads and updates, and what the summary reports."""

    def __init__(self, args, device, backend):
        self.args, self.device, self.backend = args, device, backend
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        CALLBACKS.on_phase("building the model")
        torch.manual_seed(args.seed)   # the same initial weights on every rank
        self.model = make_model(args)
        self.dataset = make_dataset(args, self.model)
        self.sampler = DistributedSampler(self.dataset, num_replicas=self.world, rank=self.rank, shuffle=True,
                                          seed=args.seed, drop_last=True)
        self.parameters = sum(p.numel() for p in self.model.parameters())   # before ZeRO-3 / FSDP shard them
        where = storage(args.save_dir) if args.save_dir else None
        if where:
            log(where)
        self.module, self.optimizer, self.engine = wrap(
            args, self.model, device, CALLBACKS.adjust_lr(args.lr),
            node_local_storage=bool(where) and where["kind"] != "shared")
        log({"event": "start", "mode": args.mode, "backend": backend, "world": self.world,
             "preset": args.model or args.preset, "parameters": self.parameters, "steps": args.steps,
             "device": str(device), "resume": bool(args.resume)})
        self.reference, self.reference_skipped = reference_run(args, self.dataset, self.world, self.parameters)
        loading = time.time()
        self.step = (load(args, args.save_dir, self.module, self.optimizer, self.engine)
                     if args.resume and args.save_dir else 0)
        if self.step:
            dist.barrier()   # every rank has read its part: the load took as long as the slowest rank's
            log({"event": "resumed", "step": self.step, "load_s": round(time.time() - loading, 3)})
        self.resumed_at = self.logged_step = self.step
        # DDP casts with autocast (fp16 with a loss scaler); DeepSpeed and FSDP do it themselves.
        use_autocast = device.type == "cuda" and args.precision != "fp32" and args.mode == "ddp"
        self.autocast = torch.autocast("cuda", dtype=torch.bfloat16 if args.precision == "bf16" else torch.float16,
                                       enabled=use_autocast)
        self.scaler = torch.amp.GradScaler("cuda", enabled=use_autocast and args.precision == "fp16")
        self.samples_per_step = args.grad_accum * args.micro_batch
        self.tokens_per_step = self.world * self.samples_per_step * self.model.config.block_size
        self.clock = RankClock(device)
        self.first_loss = self.last_loss = self.nonfinite = None
        self.losses = {}
        self.started = self.window_start = time.time()

    def train_step(self):
        """One optimizer step over the micro-batches; the rank's mean loss, not yet reduced."""
        args, clock = self.args, self.clock
        total = torch.zeros((), device=self.device)
        step_start = clock.now()
        for micro in range(args.grad_accum):
            inputs, targets = batch_for(self.sampler, self.dataset, self.step, micro, args, self.device)
            forward_start = clock.now()
            if self.engine is not None:   # DeepSpeed scales for accumulation, clips and steps at the boundary
                loss = CALLBACKS.adjust_loss(self.step + 1, self.engine(inputs, targets))
                clock.forwards.append(clock.now() - forward_start)
                self.engine.backward(loss)
                self.engine.step()
            else:
                with self.autocast:
                    loss = CALLBACKS.adjust_loss(self.step + 1, self.module(inputs, targets))
                clock.forwards.append(clock.now() - forward_start)
                self.scaler.scale(loss / args.grad_accum).backward()
            total += loss.detach().float() / args.grad_accum
        if self.engine is None:
            if args.clip:
                self.scaler.unscale_(self.optimizer)
                torch.nn.utils.clip_grad_norm_(self.module.parameters(), args.clip)
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.optimizer.zero_grad(set_to_none=True)
        clock.steps.append(clock.now() - step_start)
        self.step += 1
        return total

    def record(self, total) -> None:
        """The step's loss where it is logged or compared (the mean over ranks costs a collective), and progress."""
        args, step = self.args, self.step
        self.nonfinite = first_nonfinite(float(total), step, self.nonfinite)
        logging_step = step % args.log_every == 0 or step == args.steps
        compared = step <= args.reference_steps or step > args.losses_after >= 0
        if self.first_loss is None or logging_step or compared:
            dist.all_reduce(total)
            self.last_loss = total.item() / self.world
            self.first_loss = self.last_loss if self.first_loss is None else self.first_loss
            if compared:
                self.losses[step] = self.last_loss
        if not logging_step:
            log({"event": "tick", "step": step})   # progress for clustercheck's stall window, every step
            return
        now = time.time()
        log({"event": "step", "step": step, "loss": round(self.last_loss, 6),
             "tokens_per_s": round(self.tokens_per_step * (step - self.logged_step) / max(now - self.window_start,
                                                                                          1e-9), 1),
             "peak_mem_mb": round(peak_memory_mb(self.device), 1)})
        self.window_start, self.logged_step = now, step

    def checkpoint_due(self) -> bool:
        args = self.args
        return bool(args.save_dir) and (self.step == args.save_at or
                                        bool(args.save_every and self.step % args.save_every == 0))

    def train(self) -> None:
        CALLBACKS.on_phase("training")
        while self.step < self.args.steps:
            total = self.train_step()
            CALLBACKS.on_step(self.step)
            self.record(total)
            if self.checkpoint_due():
                log({"event": "saving", "step": self.step})   # silent while it writes: not a stall
                CALLBACKS.on_phase("saving a checkpoint")
                saving = time.time()
                save(self.args, self.args.save_dir, self.step, self.module, self.optimizer, self.engine)
                log({"event": "saved", "step": self.step, "save_s": round(time.time() - saving, 3),
                     "bytes": written_bytes(self.args.save_dir, self.step)})   # save() ends at a barrier
                CALLBACKS.on_phase("training")

    def summary(self) -> dict:
        elapsed = time.time() - self.started
        CALLBACKS.on_phase("comparing ranks")
        args, world, done = self.args, self.world, self.step - self.resumed_at
        agree = (ranks_agree(weights_checksum(args, self.module, self.engine), self.device)
                 if args.mode == "ddp" else None)
        found = [(s, value, r) for r, item in enumerate(gather(self.nonfinite)) if item for s, value in [item]]
        ranks = gather(self.clock.stats(self.samples_per_step, self.tokens_per_step // world))
        rate = self.tokens_per_step * done / max(elapsed, 1e-9) if self.first_loss else None
        return {"event": "summary", "mode": args.mode, "world": world, "steps": self.step,
                "first_loss": self.first_loss, "last_loss": self.last_loss, "weights_agree": agree,
                "nonfinite": dict(zip(("step", "value", "rank"), min(found))) if found else None,
                "losses": {str(k): v for k, v in sorted(self.losses.items())},
                "reference": self.reference, "reference_skipped": self.reference_skipped, "ranks": ranks,
                "tokens_per_s": round(rate, 1) if rate is not None else None,
                "tokens_per_s_per_rank": round(rate / world, 1) if rate is not None else None,
                "peak_mem_mb": round(peak_memory_mb(self.device), 1), "elapsed_s": round(elapsed, 3),
                "node": node_name()}


def main(argv=None):
    args = parse_args(argv)
    check_args(args)
    CALLBACKS.on_phase("joining the process group")
    device, backend = setup_distributed()
    run = None
    try:
        run = Run(args, device, backend)
        run.train()
        log(run.summary())
        dist.barrier()
    finally:
        run = None    # the model, and DDP's reducer that holds the group, go before the group (leave_group)
        if dist.is_initialized():
            leave_group()


if __name__ == "__main__":
    main()
