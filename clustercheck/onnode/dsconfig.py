"""The user's DeepSpeed config (`--deepspeed FILE`), with "auto" resolved as Hugging Face's
integration resolves it (transformers.integrations.deepspeed, HfTrainerDeepSpeedConfig):

    train_micro_batch_size_per_gpu  the micro-batch          gradient_accumulation_steps  --grad-accum
    train_batch_size                world x micro x accum    gradient_clipping            --clip
    optimizer.params lr / betas / eps / weight_decay         --lr, (0.9, 0.999), 1e-8, 0
    scheduler.params warmup_max_lr / warmup_num_steps / total_num_steps    --lr, 0, --steps
    bf16.enabled / fp16.enabled     from the hardware: bf16 where the GPU supports it, else fp16 on
                                    GPUs, neither on CPUs (HF reads --bf16 / --fp16 instead)
    zero_optimization.reduce_bucket_size            hidden x hidden
    zero_optimization.stage3_prefetch_bucket_size   0.9 x hidden x hidden
    zero_optimization.stage3_param_persistence_threshold   10 x hidden

Every value resolved is returned as (dotted key, value), so the run reports what it used.
Standard library only: the tool reads configs with it too.
"""

import json

ADAM_DEFAULTS = {"betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0}


class ConfigError(ValueError):
    """A config the run cannot use, said with the key."""


# Sections that are JSON objects wherever they appear (DeepSpeed reads keys inside them).
OBJECTS = ("zero_optimization", "bf16", "fp16", "optimizer", "optimizer.params", "scheduler", "scheduler.params",
           "zero_optimization.offload_optimizer", "zero_optimization.offload_param", "checkpoint")


def _not_finite(token):
    raise ValueError(f"{token} is not a number DeepSpeed can use")


def read(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            config = json.load(handle, parse_constant=_not_finite)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except ValueError as exc:   # not JSON, not UTF-8 text, NaN or Infinity
        raise ConfigError(f"{path}: not JSON ({exc})") from None
    except RecursionError:
        raise ConfigError(f"{path}: not JSON (nested too deeply)") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: a DeepSpeed config is a JSON object")
    check_shape(config, path)
    return config


def check_shape(config: dict, path: str) -> None:
    """Every section the run reads is an object, and the ZeRO stage a number 0-3: said with the key."""
    for dotted in OBJECTS:
        holder, value = config, None
        for key in dotted.split("."):
            value = holder.get(key) if isinstance(holder, dict) else None
            holder = value
        if value is not None and not isinstance(value, dict):
            raise ConfigError(f"{path}: {dotted} must be a JSON object ({{...}}), not {json.dumps(value)[:60]}")
    stage(config)


def stage(config: dict) -> int:
    value = (config.get("zero_optimization") or {}).get("stage", 0)
    if isinstance(value, bool) or value not in (0, 1, 2, 3):   # True == 1 in Python: "stage": true is no stage
        raise ConfigError(f"zero_optimization.stage must be 0, 1, 2 or 3, not {json.dumps(value)}")
    return value


def offloads(config: dict) -> bool:
    zero = config.get("zero_optimization") or {}
    return any((zero.get(key) or {}).get("device") in ("cpu", "nvme") for key in ("offload_optimizer", "offload_param"))


def mode_of(config: dict) -> str:
    """The trainer's mode name for this config: zero0..zero3, with -offload."""
    return f"zero{stage(config)}" + ("-offload" if offloads(config) else "")


def resolve(config: dict, *, world, micro_batch: int, grad_accum: int, clip: float, lr: float, steps: int,
            hidden: int, cuda: bool, bf16_supported: bool):
    """(the config with every "auto" replaced, [(dotted key, value) for each replaced]).

    world None: checked before the run, when the world size is not known yet (train_batch_size waits)."""
    config = json.loads(json.dumps(config))
    resolved = []

    def fill(holder: dict, key: str, value, where: str):
        if holder.get(key) == "auto":
            holder[key] = value
            resolved.append((where, value))

    fill(config, "train_micro_batch_size_per_gpu", micro_batch, "train_micro_batch_size_per_gpu")
    fill(config, "gradient_accumulation_steps", grad_accum, "gradient_accumulation_steps")
    if world is not None:
        fill(config, "train_batch_size", world * micro_batch * grad_accum, "train_batch_size")
    fill(config, "gradient_clipping", clip, "gradient_clipping")
    optimizer = (config.get("optimizer") or {}).get("params") or {}
    for key, value in (("lr", lr), *ADAM_DEFAULTS.items()):
        fill(optimizer, key, value, f"optimizer.params.{key}")
    scheduler = (config.get("scheduler") or {}).get("params") or {}
    for key, value in (("warmup_min_lr", 0), ("warmup_max_lr", lr), ("warmup_num_steps", 1),   # DeepSpeed refuses 0
                       ("total_num_steps", steps)):
        fill(scheduler, key, value, f"scheduler.params.{key}")
    use_bf16 = cuda and bf16_supported
    for key, value in (("bf16", use_bf16), ("fp16", cuda and not use_bf16)):
        section = config.get(key)
        if isinstance(section, dict):
            fill(section, "enabled", value, f"{key}.enabled")
    if (config.get("bf16") or {}).get("enabled") is True and (config.get("fp16") or {}).get("enabled") is True:
        raise ConfigError("bf16.enabled and fp16.enabled are both true")
    zero = config.get("zero_optimization") or {}
    for key, value in (("reduce_bucket_size", hidden * hidden), ("stage3_prefetch_bucket_size",
                                                                  int(0.9 * hidden * hidden)),
                       ("stage3_param_persistence_threshold", 10 * hidden)):
        fill(zero, key, value, f"zero_optimization.{key}")
    left = [path for path, value in walk(config)
            if value == "auto" and not (world is None and path == "train_batch_size")]
    if left:
        raise ConfigError(f"\"auto\" that this run cannot resolve: {', '.join(left)}")
    for key, value in (("train_micro_batch_size_per_gpu", micro_batch), ("gradient_accumulation_steps", grad_accum)):
        if config.get(key, value) != value:   # the data loader feeds --micro-batch / --grad-accum
            raise ConfigError(f"{key} is {config[key]} but the run uses {value}: set it to \"auto\""
                              + (f" or pass --micro-batch {config[key]}" if "micro" in key else ""))
    if world is not None and config.get("train_batch_size", "auto") not in ("auto", world * micro_batch * grad_accum):
        raise ConfigError(f"train_batch_size is {config['train_batch_size']} but {world} ranks x micro-batch "
                          f"{micro_batch} x accumulation {grad_accum} = {world * micro_batch * grad_accum}")
    return config, resolved


def precision(config: dict) -> str:
    """The precision the config trains in, once resolved: bf16, fp16 or fp32."""
    for key in ("bf16", "fp16"):
        if (config.get(key) or {}).get("enabled") is True:
            return key
    return "fp32"


def own_schedule(config: dict) -> bool:
    """The config brings its own optimizer settings or a scheduler: a plain AdamW reference does not apply."""
    return bool(config.get("scheduler")) or bool((config.get("optimizer") or {}).get("params"))


def walk(value, prefix=""):
    if isinstance(value, dict):
        for key, item in value.items():
            yield from walk(item, f"{prefix}.{key}" if prefix else key)
    else:
        yield prefix, value
