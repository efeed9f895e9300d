"""The user's own job on the sandbox: a tiny Llama made by the test, uploaded "by hand" to the same
path on both nodes (smoke's every-mode test fine-tunes it in ddp, zero2, zero3 and fsdp), run with a
LLaMA-Factory-shaped ZeRO-3 offload config full of "auto", and with LoRA; a node without peft or
transformers is named in a finding, not a traceback; so is a node the model was not uploaded to.
Two nodes, node-local /tmp, two ranks per node."""

import importlib.util
import os
import shutil

import pytest

from clustercheck.core.errors import EXIT_FAIL, EXIT_OK
from clustercheck.sandbox import faults
from tests.conftest import gone
from tests.test_sandbox_smoke import RANKS, model, problems, run_smoke, said  # noqa: F401 (model: a fixture)

pytestmark = pytest.mark.sandbox
CONFIGS = os.path.join(os.path.dirname(__file__), "data", "ds_configs")


def passed(doc):
    return {f["check"]: f for f in doc["findings"]}


def test_a_zero3_offload_config_with_auto_values_runs_and_says_what_it_resolved(box, tmp_path, model):
    code, doc, progress = run_smoke(box, tmp_path, "--model", model, "--steps", "10", "--seq-len", "32",
                                    "--deepspeed", os.path.join(CONFIGS, "ds_z3_offload_config.json"))
    assert code == EXIT_OK, said(doc)
    evidence = " ".join(passed(doc)["smoke.job"]["evidence"])
    assert "ran as zero3-offload" in evidence and "train_batch_size=32" in evidence and "bf16.enabled=False" in evidence
    assert "\"auto\" resolved: train_micro_batch_size_per_gpu=8" in progress
    assert doc["summary"]["mode"] == "zero3-offload"


def test_lora_passes_and_a_node_without_peft_or_transformers_is_named(box, tmp_path, model):
    code, doc, _ = run_smoke(box, tmp_path, "--model", model, "--lora", "--steps", "12", "--seq-len", "32")
    assert code == EXIT_OK, said(doc)
    assert "LoRA rank 8" in " ".join(passed(doc)["smoke.job"]["evidence"])
    victim = box.nodes[1].name
    site = os.path.dirname(os.path.dirname(importlib.util.find_spec("peft").origin))
    faults.hide_python_packages(box, victim, site, ["peft", "transformers"])
    code, doc, _ = run_smoke(box, tmp_path, "--model", model, "--lora", "--steps", "12")
    assert code == EXIT_FAIL
    [finding] = problems(doc)
    assert finding["check"] == "smoke.node" and finding["nodes"] == [victim], finding
    assert "transformers and peft not installed" in finding["summary"] and "--model and --lora" in finding["summary"]
    assert gone(RANKS)


def test_a_model_uploaded_to_one_node_only_names_the_other_before_anything_starts(box, tmp_path, model):
    first, second = box.nodes[0], box.nodes[1]
    shutil.copytree(model, os.path.join(box.node_tmp(first), "tiny-llama-here"))   # the first node's own /tmp
    code, doc, _ = run_smoke(box, tmp_path, "--model", "/tmp/tiny-llama-here", "--steps", "10")
    assert code == EXIT_FAIL
    [finding] = problems(doc)
    assert finding["nodes"] == [second.name] and "upload the model to every node" in finding["summary"], finding
