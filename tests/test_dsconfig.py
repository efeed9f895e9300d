"""--deepspeed FILE: "auto" resolved as Hugging Face's integration resolves it, on configs shaped like
the ZeRO-0/2/3/offload ones LLaMA-Factory ships (tests/data/ds_configs, written for these tests)."""

import json
import os

import pytest

from clustercheck.onnode.dsconfig import ConfigError, mode_of, read, resolve
from tests.conftest import clustercheck

CONFIGS = os.path.join(os.path.dirname(__file__), "data", "ds_configs")


def config(name):
    return read(os.path.join(CONFIGS, name))


def resolved(name, **overrides):
    settings = dict(world=4, micro_batch=8, grad_accum=2, clip=1.0, lr=3e-3, steps=30, hidden=64, cuda=False,
                    bf16_supported=False)
    settings.update(overrides)
    return resolve(config(name), **settings)


@pytest.mark.parametrize("name, mode", [("ds_z0_config.json", "zero0"), ("ds_z2_config.json", "zero2"),
                                        ("ds_z3_config.json", "zero3"),
                                        ("ds_z3_offload_config.json", "zero3-offload")])
def test_the_stage_and_offload_set_the_mode(name, mode):
    assert mode_of(config(name)) == mode


def test_auto_batch_sizes_clipping_and_buckets_are_resolved_and_reported():
    final, changes = resolved("ds_z3_offload_config.json")
    assert final["train_micro_batch_size_per_gpu"] == 8 and final["gradient_accumulation_steps"] == 2
    assert final["train_batch_size"] == 4 * 8 * 2 and final["gradient_clipping"] == 1.0
    zero = final["zero_optimization"]
    assert zero["reduce_bucket_size"] == 64 * 64 and zero["stage3_prefetch_bucket_size"] == int(0.9 * 64 * 64)
    assert zero["stage3_param_persistence_threshold"] == 640
    assert dict(changes)["train_batch_size"] == 64 and "zero_optimization.reduce_bucket_size" in dict(changes)
    assert "auto" not in json.dumps(final)


@pytest.mark.parametrize("cuda, bf16_supported, expected", [(False, False, (False, False)), (True, True, (True, False)),
                                                            (True, False, (False, True))])
def test_half_precision_follows_the_hardware(cuda, bf16_supported, expected):
    final, _ = resolved("ds_z2_config.json", cuda=cuda, bf16_supported=bf16_supported)
    assert (final["bf16"]["enabled"], final["fp16"]["enabled"]) == expected


def test_an_optimizer_and_scheduler_with_auto_get_the_runs_values():
    raw = config("ds_z2_config.json")
    raw["optimizer"] = {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                                    "weight_decay": "auto"}}
    raw["scheduler"] = {"type": "WarmupDecayLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                                                            "warmup_num_steps": "auto", "total_num_steps": "auto"}}
    final, _ = resolve(raw, world=2, micro_batch=4, grad_accum=1, clip=1.0, lr=1e-4, steps=50, hidden=128,
                       cuda=False, bf16_supported=False)
    assert final["optimizer"]["params"] == {"lr": 1e-4, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0}
    assert final["scheduler"]["params"]["total_num_steps"] == 50 and final["scheduler"]["params"]["warmup_max_lr"] == 1e-4


@pytest.mark.parametrize("change, message", [
    ({"train_micro_batch_size_per_gpu": 4}, "train_micro_batch_size_per_gpu is 4 but the run uses 8"),
    ({"train_batch_size": 100}, "train_batch_size is 100 but 4 ranks x micro-batch 8 x accumulation 2 = 64"),
    ({"zero_optimization": {"stage": 5}}, "zero_optimization.stage must be 0, 1, 2 or 3"),
    ({"bf16": {"enabled": True}, "fp16": {"enabled": True}}, "bf16.enabled and fp16.enabled are both true"),
    ({"steps_per_print": "auto"}, "\"auto\" that this run cannot resolve: steps_per_print"),
])
def test_a_config_the_run_cannot_use_says_which_key(change, message):
    raw = {**config("ds_z2_config.json"), **change}
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        resolve(raw, world=4, micro_batch=8, grad_accum=2, clip=1.0, lr=3e-3, steps=30, hidden=64, cuda=False,
                bf16_supported=False)
        mode_of(raw)


def test_a_broken_config_file_is_bad_input_before_any_node_is_reached(tmp_path):
    bad = tmp_path / "ds.json"
    bad.write_text('{"zero_optimization": {"stage": 3,}')
    proc = clustercheck("smoke", "--deepspeed", str(bad))
    assert proc.returncode == 64
    assert str(bad) in proc.stderr and "not JSON" in proc.stderr


def test_lora_without_a_model_and_a_relative_model_are_bad_input():
    assert "--lora needs --model" in clustercheck("smoke", "--lora").stderr
    proc = clustercheck("smoke", "--model", "models/llama")
    assert proc.returncode == 64 and "--model must be an absolute path" in proc.stderr


def test_a_fixed_micro_batch_that_disagrees_is_bad_input_before_any_node_is_reached(tmp_path):
    config = tmp_path / "ds.json"
    config.write_text(json.dumps({**config_dict("ds_z2_config.json"), "train_micro_batch_size_per_gpu": 4}))
    proc = clustercheck("smoke", "--deepspeed", str(config))
    assert proc.returncode == 64
    assert "train_micro_batch_size_per_gpu is 4 but the run uses 8" in proc.stderr and str(config) in proc.stderr


def config_dict(name):
    return config(name)


def test_smoke_lets_the_config_set_the_mode_and_plans_only_what_the_plan_counts(tmp_path):
    from clustercheck.stages.smoke.gather import plan_row, trainer_args
    from clustercheck.stages.smoke.options import SmokeOptions
    z0 = os.path.join(CONFIGS, "ds_z0_config.json")
    assert "--mode" not in trainer_args(SmokeOptions(mode="zero0", deepspeed=z0), "ckpt")
    optimizer_only = tmp_path / "z3.json"
    raw = config("ds_z3_offload_config.json")
    del raw["zero_optimization"]["offload_param"]
    optimizer_only.write_text(json.dumps(raw))
    assert plan_row(SmokeOptions(mode="zero3-offload", deepspeed=str(optimizer_only))) == ""
    assert plan_row(SmokeOptions(mode="zero3-offload", deepspeed=os.path.join(CONFIGS,
                                                                            "ds_z3_offload_config.json"))) == \
        "zero3-offload"
    assert plan_row(SmokeOptions(mode="zero0", deepspeed=z0)) == "ddp"
    assert plan_row(SmokeOptions(mode="ddp", precision="fp32")) == ""        # the plan counts 16-bit training
    assert plan_row(SmokeOptions(mode="zero3", precision="bf16", lora=True, model="/m")) == ""
    assert plan_row(SmokeOptions(mode="ddp", precision="bf16", lora=True, model="/m")) == "lora"


def test_auto_warmup_is_at_least_one_step():
    raw = config("ds_z2_config.json")
    raw["scheduler"] = {"type": "WarmupLR", "params": {"warmup_num_steps": "auto"}}
    final, _ = resolve(raw, world=1, micro_batch=8, grad_accum=1, clip=1.0, lr=1e-3, steps=10, hidden=64, cuda=False,
                       bf16_supported=False)
    assert final["scheduler"]["params"]["warmup_num_steps"] == 1
