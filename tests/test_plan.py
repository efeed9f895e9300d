"""`clustercheck plan`: one accounting for every mode, equal to DeepSpeed's estimators where they
exist, never a less-sharded mode needing less memory, and a model's config.json read right."""

import json

import pytest

from clustercheck.core.result import Status
from clustercheck.planner.fit import judge_plan, sharding_violations
from clustercheck.planner.memory import Shape, Workload, assumed_shape, by_mode, llama_params, needs, read_config
from clustercheck.planner.plan import parse_count
from tests.conftest import clustercheck

LLAMA2_7B = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
             "num_key_value_heads": 32, "intermediate_size": 11008, "vocab_size": 32000,
             "tie_word_embeddings": False}


def write_config(tmp_path, config):
    (tmp_path / "config.json").write_text(json.dumps(config))
    return str(tmp_path)


@pytest.mark.parametrize("text, value", [("7B", 7_000_000_000), ("125M", 125_000_000), ("1.3e9", 1_300_000_000)])
def test_parse_count(text, value):
    assert parse_count(text, "--params") == value


def test_a_llama_config_gives_the_published_parameter_count(tmp_path):
    shape = read_config(write_config(tmp_path, LLAMA2_7B))
    assert shape.params == 6_738_415_616                      # Llama-2-7b: 6.74B
    gqa = read_config(write_config(tmp_path, {**LLAMA2_7B, "hidden_size": 4096, "num_key_value_heads": 8,
                                              "intermediate_size": 14336, "vocab_size": 128256}))
    assert gqa.params == 8_030_261_248                         # Llama-3-8B: 8.03B


@pytest.mark.parametrize("params, gpus, nodes", [(7e9, 8, 1), (7e9, 8, 4), (70e9, 8, 16), (125e6, 1, 1), (1.3e9, 4, 2)])
def test_the_deepspeed_rows_equal_deepspeeds_own_estimators(params, gpus, nodes):
    stage_1_and_2 = pytest.importorskip("deepspeed.runtime.zero.stage_1_and_2")
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    shape = assumed_shape(int(params))
    rows = by_mode(needs(shape, gpus, nodes))
    layer = shape.largest_layer
    for offload, mode in ((False, "zero2"), (True, "zero2-offload")):
        cpu, gpu = stage_1_and_2.estimate_zero2_model_states_mem_needs(shape.params, gpus, nodes, cpu_offload=offload)
        assert rows[mode].state_bytes == gpu
        if offload:
            assert rows[mode].cpu_bytes == cpu
    for offload, mode in ((False, "zero3"), (True, "zero3-offload")):
        cpu, gpu, _ = estimate_zero3_model_states_mem_needs(shape.params, layer, gpus, nodes, cpu_offload=offload,
                                                            cpu_offload_params=offload)
        assert rows[mode].state_bytes == gpu
        if offload:
            assert rows[mode].cpu_bytes == cpu


@pytest.mark.parametrize("gpus, nodes", [(1, 1), (2, 1), (8, 1), (8, 2), (8, 128)])
@pytest.mark.parametrize("params", [125e6, 1.3e9, 7e9, 70e9])
@pytest.mark.parametrize("checkpointing", [True, False])
def test_no_mode_that_shards_less_needs_less_memory(params, gpus, nodes, checkpointing):
    rows = needs(assumed_shape(int(params)), gpus, nodes, Workload(seq_len=4096, micro_batch=2,
                                                                  checkpointing=checkpointing))
    assert sharding_violations(rows) == []


def test_one_gpu_no_longer_shows_zero2_above_zero1_or_ddp_below_them():
    rows = by_mode(needs(assumed_shape(500_000_000), 1, 1))
    assert rows["ddp"].state_bytes == 20 * 500_000_000
    assert rows["ddp"].state_bytes == rows["zero1"].state_bytes == rows["zero2"].state_bytes
    findings = {f.check: f.status for f in judge_plan(list(rows.values()), 24 * 2 ** 30, 64 * 2 ** 30)}
    assert findings["plan.ddp"] is findings["plan.zero2"]     # one GPU: nothing is sharded, same answer


def test_seven_billion_parameters_on_eight_80gb_gpus(tmp_path):
    shape = read_config(write_config(tmp_path, LLAMA2_7B))
    rows = by_mode(needs(shape, 8, 1, Workload(seq_len=2048, micro_batch=1, checkpointing=True)))
    assert rows["zero1"].state_bytes == 4 * shape.params + int(16 * shape.params / 8)
    assert rows["lora"].state_bytes == 2 * shape.params + 20 * shape.adapter(8)
    assert rows["qlora"].state_bytes < rows["lora"].state_bytes / 3
    assert rows["inference"].state_bytes == 2 * shape.params
    findings = {f.check: f for f in judge_plan(list(rows.values()), 80 * 2 ** 30, 1024 * 2 ** 30)}
    assert findings["plan.ddp"].status is Status.WARN         # 125 GiB of states on an 80 GiB GPU
    assert findings["plan.zero3"].status is Status.OK and findings["plan.lora"].status is Status.OK
    assert "plan" not in findings


def test_activations_grow_with_sequence_and_batch_and_shrink_with_checkpointing():
    shape = assumed_shape(7_000_000_000)
    base = needs(shape, 8, 1, Workload(2048, 1, False))[0].activation_bytes
    assert needs(shape, 8, 1, Workload(4096, 1, False))[0].activation_bytes > 1.9 * base
    assert needs(shape, 8, 1, Workload(2048, 4, False))[0].activation_bytes > 3.9 * base
    assert needs(shape, 8, 1, Workload(2048, 1, True))[0].activation_bytes < base / 5


def test_offload_with_unknown_host_memory_is_not_called_a_fit():
    rows = needs(assumed_shape(7_000_000_000), 8, 1)
    findings = {f.check: f for f in judge_plan(rows, 80 * 2 ** 30, None)}
    assert findings["plan.zero3-offload"].status is Status.UNKNOWN
    assert "host memory not checked" in findings["plan.zero3-offload"].summary


def test_plan_reads_a_model_directory_and_prints_one_table(tmp_path):
    proc = clustercheck("plan", "--model", write_config(tmp_path, LLAMA2_7B), "--gpus-per-node", "8",
                        "--gpu-mem", "80", "--cpu-mem", "1024")
    assert proc.returncode == 0, proc.stderr
    assert "6.74B parameters" in proc.stdout and "llama, hidden 4096, 32 layers" in proc.stdout
    for mode in ("ddp", "zero1", "zero2", "zero3", "zero2-offload", "zero3-offload", "fsdp", "lora", "qlora",
                 "inference"):
        assert f"\n{mode} " in proc.stdout


@pytest.mark.parametrize("config, message", [({**LLAMA2_7B, "hidden_size": "4096"}, "hidden_size must be a positive"),
                                             ({"model_type": "llama"}, "config.json has none of hidden_size")])
def test_a_bad_config_is_bad_input_naming_the_file(tmp_path, config, message):
    proc = clustercheck("plan", "--model", write_config(tmp_path, config), "--gpus-per-node", "8", "--gpu-mem", "80")
    assert proc.returncode == 64
    assert message in proc.stderr and str(tmp_path / "config.json") in proc.stderr


def test_plan_without_a_size_is_bad_input():
    proc = clustercheck("plan", "--gpus-per-node", "8", "--gpu-mem", "80")
    assert proc.returncode == 64 and "--params" in proc.stderr


def test_llama_params_counts_tied_embeddings_once():
    untied = llama_params(64, 2, 2, 2, 128, 256, False)
    assert untied - llama_params(64, 2, 2, 2, 128, 256, True) == 64 * 256
    assert Shape(untied, 64, 2, 2, 2, 128, 256, "").adapter(4) == 2 * 4 * (4 * 128 + 3 * 192)


def test_a_runs_mode_is_judged_against_the_smallest_gpu_the_nodes_report(tmp_path):
    from clustercheck.planner.fit import mode_fit
    from tests.test_env_rules import cluster, gpu_section

    def h100(i, doc):
        doc["gpu"] = gpu_section("h100-x8-driver-580.xml")
    probed = cluster(2, h100)                       # 2 nodes x 8 H100 80GB, as recorded
    shape = read_config(write_config(tmp_path, LLAMA2_7B))
    work = Workload(seq_len=2048, micro_batch=1, checkpointing=False)
    fits = mode_fit(shape, probed, "zero3", work)
    assert fits.status is Status.OK and "zero3 needs" in fits.summary and "79.6 GiB" in fits.summary, fits.summary
    too_big = mode_fit(shape, probed, "ddp", work)
    assert too_big.status is Status.WARN and "expect out of memory" in too_big.summary
    assert "zero1" in too_big.remedy and "ddp," not in too_big.remedy
    assert mode_fit(shape, cluster(2), "ddp", work) is None       # CPU nodes: nothing to plan
