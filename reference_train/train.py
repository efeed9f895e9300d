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
import json
import os
import resource
import sys
import time

import torch
import torch.distributed as dist
from torch.utils.data import DistributedSampler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import (  # noqa: E402
    REFERENCE_MAX_PARAMETERS,
    REFERENCE_MAX_SEQUENCES,
    RankClock,
    first_nonfinite,
    gather,
    node_name,
    reference_losses,
    storage,
)
from data import ByteWindows, TokenWindows, generated_corpus, load_text  # noqa: E402
from dsconfig import ConfigError, mode_of, offloads, own_schedule, precision, read, resolve  # noqa: E402
import hang  # noqa: E402
from hf import LORA_TARGETS  # noqa: E402
from model import PRESETS, build  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = ("ddp", "zero1", "zero2", "zero3", "zero3-offload", "fsdp")   # --deepspeed adds zero0 and -offload
DS_CONFIGS = {"zero1": "ds_config_zero1.json", "zero2": "ds_config_zero2.json", "zero3": "ds_config_zero3.json",
              "zero3-offload": "ds_config_zero3_offload.json"}


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


def log(event: dict) -> None:
    if dist.get_rank() == 0:
        print(json.dumps(event), flush=True)


def setup_distributed():
    cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        torch.cuda.set_device(local_rank)
    backend = "nccl" if cuda else "gloo"
    dist.init_process_group(backend)
    return torch.device("cuda", local_rank) if cuda else torch.device("cpu"), backend


def deepspeed_note() -> None:
    """DeepSpeed compiles C++ ops the first time (about 100 s on a small machine): say so first."""
    root = os.environ.get("TORCH_EXTENSIONS_DIR") or os.path.expanduser("~/.cache/torch_extensions")
    built = os.path.isdir(root) and any("deepspeed" in name or "adam" in name
                                        for _, dirs, _ in os.walk(root) for name in dirs)
    if not built:
        log({"event": "compiling", "text": f"DeepSpeed compiles its C++ ops on first use (about 100 s on a small "
                                           f"machine); they are cached in {root} for later runs"})


# ---- the model, wrapped for the chosen mode ---------------------------------------------------
def learning_rate(args) -> float:
    """--lr, except on the rank a test names in CLUSTERCHECK_TEST_LR_SCALE=RANK:FACTOR (a broken rank on purpose)."""
    knob = os.environ.get("CLUSTERCHECK_TEST_LR_SCALE", "")
    if knob and int(knob.split(":")[0]) == dist.get_rank():
        return args.lr * float(knob.split(":")[1])
    return args.lr


def poisoned_step() -> int:
    """The step at which this rank's loss turns NaN: a test-only knob, CLUSTERCHECK_TEST_NAN_AT=STEP:RANK."""
    knob = os.environ.get("CLUSTERCHECK_TEST_NAN_AT", "")
    return int(knob.split(":")[0]) if knob and int(knob.split(":")[1]) == dist.get_rank() else -1


def wrap(args, model, device, node_local_storage=False):
    """(module to call, optimizer-like object with step/zero_grad, engine or None)."""
    lr = learning_rate(args)
    params = [p for p in model.parameters() if p.requires_grad]   # LoRA: the adapter only
    if args.deepspeed or args.mode in DS_CONFIGS:
        import deepspeed
        deepspeed_note()
        config = deepspeed_config(args, model, device, lr, node_local_storage)
        client_optimizer = None
        if "optimizer" not in config or (device.type == "cpu" and not offloads(config)):
            # DeepSpeed's AdamW is a CUDA kernel; on CPUs use torch's (offload has its own CPU Adam). A config
            # without an optimizer gets the client's, as the Hugging Face Trainer gives it.
            config.pop("optimizer", None)
            config["zero_allow_untested_optimizer"] = True
            config["zero_force_ds_cpu_optimizer"] = False
            client_optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=params,
                                               optimizer=client_optimizer, config=config)
        return engine, engine, engine
    model = model.to(device)
    if args.mode == "fsdp":  # FSDP2: each block, then the rest, sharded over all ranks
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)
        policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=dtype)
        mesh = init_device_mesh(device.type, (dist.get_world_size(),))
        for block in model.blocks:
            fully_shard(block, mesh=mesh, mp_policy=policy)
        fully_shard(model, mesh=mesh, mp_policy=policy)
    else:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
    return model, optimizer, None


def deepspeed_config(args, model, device, lr, node_local_storage):
    """The built-in config of the mode, or the user's (--deepspeed) with "auto" resolved and reported."""
    # a disk per node: every node's local rank 0 writes the model states its ranks read back
    checkpoint = {"use_node_local_storage": node_local_storage}
    if not args.deepspeed:
        with open(os.path.join(HERE, DS_CONFIGS[args.mode])) as handle:
            config = json.load(handle)
        config.update(train_micro_batch_size_per_gpu=args.micro_batch, gradient_accumulation_steps=args.grad_accum,
                      bf16={"enabled": args.precision == "bf16"}, fp16={"enabled": args.precision == "fp16"},
                      gradient_clipping=args.clip, checkpoint=checkpoint)
        config["optimizer"]["params"]["lr"] = lr
        return config
    cuda = device.type == "cuda"
    hidden = (getattr(getattr(getattr(model, "model", None), "config", None), "hidden_size", None)
              or getattr(model.config, "n_embd", None) or 64)
    try:
        config, resolved = resolve(read(args.deepspeed), world=dist.get_world_size(), micro_batch=args.micro_batch,
                                   grad_accum=args.grad_accum, clip=args.clip, lr=lr, steps=args.steps,
                                   hidden=hidden, cuda=cuda, bf16_supported=cuda and torch.cuda.is_bf16_supported())
    except ConfigError as exc:
        raise SystemExit(f"--deepspeed {args.deepspeed}: {exc}") from None
    if not cuda and ((config.get("bf16") or {}).get("enabled") is True or (config.get("fp16") or {}).get("enabled") is True):
        raise SystemExit(f"--deepspeed {args.deepspeed}: bf16/fp16 enabled, but this rank has no GPU (set \"auto\")")
    config["checkpoint"] = {**(config.get("checkpoint") or {}), **checkpoint}   # the run's storage decides
    config.setdefault("steps_per_print", 1000000)
    log({"event": "deepspeed_config", "file": args.deepspeed, "mode": args.mode, "precision": precision(config),
         "resolved": {key: value for key, value in resolved}})
    return config


def weights_checksum(args, module, engine) -> float:
    """A number every rank computes over the full weights: equal everywhere if training stayed in sync."""
    params = list((engine.module if engine else module).parameters())

    def total(tensors):
        return float(sum(t.detach().double().pow(2).sum() + t.detach().double().sum() for t in tensors))
    if args.mode.startswith("zero3"):
        import deepspeed
        with deepspeed.zero.GatheredParameters(params):
            return total(params)
    if args.mode == "fsdp":  # sharded DTensors: gather each
        return total(p.full_tensor() for p in params)
    return total(params)


def ranks_agree(value: float, device) -> bool:
    values = [None] * dist.get_world_size()
    dist.all_gather_object(values, value)
    return all(abs(v - values[0]) <= 1e-9 * max(1.0, abs(values[0])) for v in values)


# ---- checkpoints --------------------------------------------------------------------------------
# Each rank saves and reloads what it owns, so the check needs no filesystem shared by the nodes:
# DeepSpeed writes its per-rank shards (and, on a disk per node, each node's model states);
# FSDP writes one file per rank (that rank's shards); DDP, whose ranks all hold the same state,
# one file per node, written by its first local rank (renamed into place: on a shared disk the
# nodes' copies are the same bytes).
def state_file(args, directory, tag) -> str:
    name = "replica.pt" if args.mode == "ddp" else f"rank_{dist.get_rank()}.pt"
    return os.path.join(directory, tag, name)


def save(args, directory, step, module, optimizer, engine):
    tag = f"step_{step}"
    if engine is not None:
        engine.save_checkpoint(directory, tag=tag, client_state={"step": step})
    else:
        from torch.distributed.checkpoint.state_dict import get_state_dict
        model_state, optim_state = get_state_dict(module, optimizer)
        os.makedirs(os.path.join(directory, tag), exist_ok=True)
        if args.mode != "ddp" or int(os.environ.get("LOCAL_RANK", "0")) == 0:
            path = state_file(args, directory, tag)
            torch.save({"model": model_state, "optimizer": optim_state, "step": step}, f"{path}.{os.getpid()}")
            os.replace(f"{path}.{os.getpid()}", path)
        if dist.get_rank() == 0:
            with open(os.path.join(directory, "latest"), "w") as handle:
                handle.write(tag)
    dist.barrier()


def load(args, directory, module, optimizer, engine) -> int:
    """Load the latest checkpoint; returns the step it was taken at (0 if there is none).

    Rank 0 names it (its node holds `latest`); every rank then reads its own part."""
    holder = [None]
    if dist.get_rank() == 0 and os.path.exists(os.path.join(directory, "latest")):
        with open(os.path.join(directory, "latest")) as handle:
            holder[0] = handle.read().strip()
    dist.broadcast_object_list(holder, 0)
    tag = holder[0]
    if tag is None:
        return 0
    if engine is not None:
        path, client_state = engine.load_checkpoint(directory, tag=tag)
        if path is None:
            raise RuntimeError(f"checkpoint {tag} not found in {directory} on {node_name()}")
        return int(client_state["step"])
    from torch.distributed.checkpoint.state_dict import set_state_dict
    state = torch.load(state_file(args, directory, tag), map_location="cpu", weights_only=False)
    set_state_dict(module, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    return int(state["step"])


# ---- training ---------------------------------------------------------------------------------------
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


def peak_memory_mb(device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2 ** 20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


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


def loud(rank_bytes: int) -> None:
    """A test-only knob (CLUSTERCHECK_TEST_STDERR_BYTES): this rank writes that much to stderr, as
    NCCL_DEBUG=INFO or TORCH_DISTRIBUTED_DEBUG=DETAIL do on a real cluster."""
    line = f"[rank{dist.get_rank()}] noise " + "x" * 100 + "\n"
    for _ in range(rank_bytes // len(line)):
        sys.stderr.write(line)
    sys.stderr.flush()


def make_model(args):
    """The built-in GPT of --preset, or the user's model directory (LoRA-wrapped with --lora)."""
    if not args.model:
        return build(args.preset, activation_checkpointing=args.activation_checkpointing)
    import hf
    lora = (args.lora_rank, args.lora_alpha, args.lora_targets.split(",")) if args.lora else None
    seq_len = min(args.seq_len, hf.max_positions(args.model))
    return hf.load(args.model, seq_len, args.activation_checkpointing, lora)


def main(argv=None):
    args = parse_args(argv)
    if args.lora and not args.model:
        raise SystemExit("--lora needs --model (a model directory to adapt)")
    if args.deepspeed:
        try:
            args.mode = mode_of(read(args.deepspeed))
        except ConfigError as exc:
            raise SystemExit(f"--deepspeed {args.deepspeed}: {exc}") from None
    hang.install()   # clustercheck asks stuck ranks for their stacks and last collectives
    hang.phase("joining the process group")
    device, backend = setup_distributed()
    rank, world = dist.get_rank(), dist.get_world_size()
    hang.phase("building the model")
    torch.manual_seed(args.seed)   # the same initial weights on every rank
    model = make_model(args)
    text = load_text(args.data) if args.data else generated_corpus(seed=args.seed)
    if args.model:
        import hf
        ids, tokens = hf.token_ids(args.model, text, model.config.vocab_size)
        log({"event": "model", "directory": args.model, "tokens": tokens, **hf.counts(model),
             "lora": {"rank": args.lora_rank, "alpha": args.lora_alpha} if args.lora else None})
        dataset = TokenWindows(ids, model.config.block_size)
    else:
        dataset = ByteWindows(text, model.config.block_size)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=args.seed, drop_last=True)
    parameters = sum(p.numel() for p in model.parameters())   # before ZeRO-3 / FSDP shard them
    where = storage(args.save_dir) if args.save_dir else None
    if where:
        log(where)
    module, optimizer, engine = wrap(args, model, device, node_local_storage=bool(where) and where["kind"] != "shared")
    log({"event": "start", "mode": args.mode, "backend": backend, "world": world,
         "preset": args.model or args.preset,
         "parameters": parameters, "steps": args.steps, "device": str(device), "resume": bool(args.resume)})
    reference, reference_skipped = None, None
    global_sequences = world * args.grad_accum * args.micro_batch
    if args.reference_steps and global_sequences > REFERENCE_MAX_SEQUENCES:
        reference_skipped = f"a global batch of {global_sequences} sequences is too much for one rank to recompute"
    elif args.reference_steps and parameters > REFERENCE_MAX_PARAMETERS:
        reference_skipped = f"{parameters:,} parameters are too many for one rank to recompute on its CPU"
    elif args.reference_steps and args.deepspeed and own_schedule(read(args.deepspeed)):
        reference_skipped = ("the DeepSpeed config brings its own optimizer settings or scheduler; the "
                             "single-process reference follows plain AdamW")
    elif args.reference_steps and rank == 0:   # the others wait for it at the first collective
        reference = reference_losses(lambda: make_model(args), args.seed, global_batch(args, dataset, world),
                                     min(args.reference_steps, args.steps), args.lr, args.clip)

    step = load(args, args.save_dir, module, optimizer, engine) if args.resume and args.save_dir else 0
    if step:
        log({"event": "resumed", "step": step})
    logged_step = resumed_at = step
    hang.phase("training")
    if os.environ.get("CLUSTERCHECK_TEST_STDERR_BYTES"):
        loud(int(os.environ["CLUSTERCHECK_TEST_STDERR_BYTES"]))
    # DDP casts with autocast (fp16 with a loss scaler); DeepSpeed and FSDP do it themselves.
    use_autocast = device.type == "cuda" and args.precision != "fp32" and args.mode == "ddp"
    autocast = torch.autocast("cuda", dtype=torch.bfloat16 if args.precision == "bf16" else torch.float16,
                              enabled=use_autocast)
    scaler = torch.amp.GradScaler("cuda", enabled=use_autocast and args.precision == "fp16")
    samples_per_step = args.grad_accum * args.micro_batch
    tokens_per_step = world * samples_per_step * model.config.block_size
    clock = RankClock(device)
    nan_at = poisoned_step()
    started, window_start, first_loss, last_loss, nonfinite, losses = time.time(), time.time(), None, None, None, {}
    while step < args.steps:
        total = torch.zeros((), device=device)
        step_start = clock.now()
        for micro in range(args.grad_accum):
            inputs, targets = batch_for(sampler, dataset, step, micro, args, device)
            forward_start = clock.now()
            if engine is not None:   # DeepSpeed scales for accumulation, clips and steps at the boundary itself
                loss = engine(inputs, targets) * (float("nan") if step + 1 == nan_at else 1.0)
                clock.forwards.append(clock.now() - forward_start)
                engine.backward(loss)
                engine.step()
            else:
                with autocast:
                    loss = module(inputs, targets) * (float("nan") if step + 1 == nan_at else 1.0)
                clock.forwards.append(clock.now() - forward_start)
                scaler.scale(loss / args.grad_accum).backward()
            total += loss.detach().float() / args.grad_accum
        if engine is None:
            if args.clip:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(module.parameters(), args.clip)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
        clock.steps.append(clock.now() - step_start)
        step += 1
        hang.step(step)
        nonfinite = first_nonfinite(float(total), step, nonfinite)
        logging_step = step % args.log_every == 0 or step == args.steps
        compared = step <= args.reference_steps or step > args.losses_after >= 0
        if first_loss is None or logging_step or compared:   # the mean over ranks costs a collective
            dist.all_reduce(total)
            mean_loss = total.item() / world
            first_loss = mean_loss if first_loss is None else first_loss
            last_loss = mean_loss
            if compared:
                losses[step] = mean_loss
        if not logging_step:
            log({"event": "tick", "step": step})   # progress for clustercheck's stall window, every step
        if logging_step:
            now = time.time()
            log({"event": "step", "step": step, "loss": round(mean_loss, 6),
                 "tokens_per_s": round(tokens_per_step * (step - logged_step) / max(now - window_start, 1e-9), 1),
                 "peak_mem_mb": round(peak_memory_mb(device), 1)})
            window_start, logged_step = now, step
        if args.save_dir and (step == args.save_at or (args.save_every and step % args.save_every == 0)):
            log({"event": "saving", "step": step})   # silent while it writes: not a stall
            hang.phase("saving a checkpoint")
            save(args, args.save_dir, step, module, optimizer, engine)
            hang.phase("training")
    elapsed = time.time() - started
    hang.phase("comparing ranks")
    agree = ranks_agree(weights_checksum(args, module, engine), device) if args.mode == "ddp" else None
    found = [(s, value, r) for r, item in enumerate(gather(nonfinite)) if item for s, value in [item]]
    ranks = gather(clock.stats(samples_per_step, tokens_per_step // world))
    log({"event": "summary", "mode": args.mode, "world": world, "steps": step, "first_loss": first_loss,
         "last_loss": last_loss, "weights_agree": agree,
         "nonfinite": dict(zip(("step", "value", "rank"), min(found))) if found else None,
         "losses": {str(k): v for k, v in sorted(losses.items())},
         "reference": reference, "reference_skipped": reference_skipped, "ranks": ranks,
         "tokens_per_s": round(tokens_per_step * (step - resumed_at) / max(elapsed, 1e-9), 1) if first_loss else None,
         "tokens_per_s_per_rank": round(tokens_per_step * (step - resumed_at) / max(elapsed, 1e-9) / world, 1)
         if first_loss else None, "peak_mem_mb": round(peak_memory_mb(device), 1), "elapsed_s": round(elapsed, 3),
         "node": node_name()})
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
