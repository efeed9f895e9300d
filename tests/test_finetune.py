"""The trainer on a Hugging Face model directory, two processes here (Gloo, no root needed): a tiny
Llama made by the test, a LoRA adapter trained offline and resumed from its checkpoint. The sandbox
tests run every mode and the user's DeepSpeed config across nodes (test_sandbox_smoke, _finetune)."""

import json
import os
import subprocess
import sys

import pytest

from tests.tiny_models import tiny_llama

pytest.importorskip("transformers")
TRAIN = os.path.join(os.path.dirname(__file__), "..", "reference_train", "train.py")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
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
