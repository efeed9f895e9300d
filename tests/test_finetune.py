"""The trainer on a Hugging Face model directory, two processes here (Gloo, no root needed): a tiny
Llama made by the test, a LoRA adapter trained offline and resumed from its checkpoint. The sandbox
tests run every mode and the user's DeepSpeed config across nodes (test_sandbox_smoke, _finetune)."""

import json
import os
import subprocess
import sys

import pytest

from tests.tiny_models import tiny_llama

TRAIN = os.path.join(os.path.dirname(__file__), "..", "reference_train", "train.py")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    pytest.importorskip("transformers")
    return tiny_llama(str(tmp_path_factory.mktemp("tiny-llama")))


def train(tmp_path, *args):
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           TRAIN, "--log-every", "5", *args], capture_output=True, text=True, timeout=400,
                          cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {e["event"]: e for e in events}, proc


def test_lora_trains_the_adapter_only_and_resumes_from_its_checkpoint(tmp_path, model):
    pytest.importorskip("peft")
    ckpt = str(tmp_path / "ckpt")
    events, _ = train(tmp_path, "--model", model, "--lora", "--lora-rank", "4", "--steps", "20", "--seq-len", "64",
                      "--save-dir", ckpt, "--save-at", "15", "--losses-after", "15", "--lr", "1e-2")
    shape = events["model"]
    assert 0 < shape["trainable"] < shape["parameters"] / 5 and shape["lora"]["rank"] == 4
    first = events["summary"]
    assert first["weights_agree"] is True and first["last_loss"] < first["first_loss"]
    again, _ = train(tmp_path, "--model", model, "--lora", "--lora-rank", "4", "--steps", "20", "--seq-len", "64",
                     "--save-dir", ckpt, "--resume", "--losses-after", "15", "--lr", "1e-2")
    assert again["resumed"]["step"] == 15
    for step in range(16, 21):
        assert abs(again["summary"]["losses"][str(step)] - first["losses"][str(step)]) < 1e-5


def test_a_zero0_and_a_zero2_offload_config_with_a_scheduler_run_as_their_stage_says(tmp_path):
    """The built-in GPT (no transformers needed): the config's stage is the mode; a scheduler of the config's
    own means the plain-AdamW reference is skipped, said why, not failed."""
    configs = os.path.join(os.path.dirname(__file__), "data", "ds_configs")
    events, _ = train(tmp_path, "--deepspeed", os.path.join(configs, "ds_z0_config.json"), "--steps", "6",
                      "--reference-steps", "3")
    assert events["summary"]["mode"] == "zero0" and events["summary"]["reference"]
    with open(os.path.join(configs, "ds_z2_config.json")) as handle:
        raw = json.load(handle)
    raw["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
    raw["scheduler"] = {"type": "WarmupLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                                                       "warmup_num_steps": "auto"}}
    offload = tmp_path / "z2_offload.json"
    offload.write_text(json.dumps(raw))
    events, _ = train(tmp_path, "--deepspeed", str(offload), "--steps", "6", "--reference-steps", "3")
    summary = events["summary"]
    assert summary["mode"] == "zero2-offload" and "own optimizer settings or scheduler" in summary["reference_skipped"]
    assert events["deepspeed_config"]["resolved"]["scheduler.params.warmup_num_steps"] == 1
