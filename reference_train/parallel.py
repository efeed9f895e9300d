"""The model wrapped for the chosen mode: DDP, FSDP2, or a DeepSpeed engine from the mode's config or the user's.

Also the two numbers every rank computes to prove the ranks stayed in sync.
"""

import json
import os

import torch
import torch.distributed as dist
from checks import log
from dsconfig import ConfigError, offloads, precision, read, resolve

HERE = os.path.dirname(os.path.abspath(__file__))
DS_CONFIGS = {"zero1": "ds_config_zero1.json", "zero2": "ds_config_zero2.json", "zero3": "ds_config_zero3.json",
              "zero3-offload": "ds_config_zero3_offload.json"}


def deepspeed_note() -> None:
    """DeepSpeed compiles C++ ops the first time (about 100 s on a small machine): say so first."""
    root = os.environ.get("TORCH_EXTENSIONS_DIR") or os.path.expanduser("~/.cache/torch_extensions")
    built = os.path.isdir(root) and any("deepspeed" in name or "adam" in name
                                        for _, dirs, _ in os.walk(root) for name in dirs)
    if not built:
        log({"event": "compiling", "text": f"DeepSpeed compiles its C++ ops on first use (about 100 s on a small "
                                           f"machine); they are cached in {root} for later runs"})


def wrap(args, model, device, lr, node_local_storage=False):
    """(module to call, optimizer-like object with step/zero_grad, engine or None)."""
    params = [p for p in model.parameters() if p.requires_grad]   # LoRA: the adapter only
    if args.deepspeed or args.mode in DS_CONFIGS:
        import deepspeed   # optional: only for a DeepSpeed mode
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
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard   # FSDP2: only for --mode fsdp
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
    enabled = [(config.get(key) or {}).get("enabled") is True for key in ("bf16", "fp16")]
    if not cuda and any(enabled):
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
        import deepspeed   # as above
        with deepspeed.zero.GatheredParameters(params):
            return total(params)
    if args.mode == "fsdp":  # sharded DTensors: gather each
        return total(p.full_tensor() for p in params)
    return total(params)


def ranks_agree(value: float, device) -> bool:
    values = [None] * dist.get_world_size()
    dist.all_gather_object(values, value)
    return all(abs(v - values[0]) <= 1e-9 * max(1.0, abs(values[0])) for v in values)
