"""preflight's pieces that need no cluster: diff on small reports, the sbatch script, bad stages."""

from clustercheck.core.errors import EXIT_FAIL, EXIT_OK
from clustercheck.preflight.diff import diff_reports, render_changes
from tests.conftest import clustercheck


def report(nodes, busbw, findings=(), versions=None):
    return {"command": "preflight", "nodes": nodes, "bench": {"avg_busbw": {"all_reduce": busbw}},
            "versions": versions or {n: {"torch": "2.3.1"} for n in nodes}, "findings": list(findings)}


def test_bandwidth_within_the_threshold_is_no_change():
    changes = diff_reports(report(["a", "b"], 10.0), report(["a", "b"], 9.5))
    assert changes.bandwidth == [] and not changes.worse and changes.exit_code == EXIT_OK


def test_bandwidth_down_a_node_gone_and_a_new_failure_are_worse():
    new_failure = {"stage": "net", "check": "net.inbound", "status": "FAIL", "nodes": ["b"],
                   "summary": "b drops inbound TCP on port 40000 from every peer (filtered)"}
    changes = diff_reports(report(["a", "b", "c"], 10.0),
                           report(["a", "b"], 8.0, [new_failure], {"a": {"torch": "2.4.0"}, "b": {"torch": "2.3.1"}}))
    assert changes.nodes_gone == ["c"] and changes.worse and changes.exit_code == EXIT_FAIL
    assert changes.bandwidth == [("all_reduce avg", 10.0, 8.0, 0.8)]
    assert changes.versions == ["torch on a: 2.3.1 -> 2.4.0"]
    text = render_changes(changes, "old.json", "new.json")
    assert "new FAIL: [net] b drops inbound TCP on port 40000" in text and "nodes gone: c" in text


def test_a_fixed_finding_is_listed_and_not_worse():
    old = {"stage": "env", "check": "shm", "status": "FAIL", "nodes": ["a"], "summary": "/dev/shm small on a"}
    passed = {"stage": "env", "check": "shm", "status": "OK", "nodes": [], "summary": "/dev/shm is at least 1 GiB"}
    changes = diff_reports(report(["a"], 1.0, [old]), report(["a"], 1.0, [passed]))
    assert changes.fixed_findings == [old] and not changes.worse
    # a new report that checked nothing fixed nothing: it did not look
    assert diff_reports(report(["a"], 1.0, [old]), report(["a"], 1.0)).fixed_findings == []


def test_sbatch_prints_a_script_that_runs_preflight_in_the_allocation():
    proc = clustercheck("sbatch", "--nodes", "4", "--gpus-per-node", "8", "--partition", "gpu", "--", "--skip",
                        "smoke")
    assert proc.returncode == 0
    script = proc.stdout
    assert script.startswith("#!/bin/bash\n")
    for line in ("#SBATCH --nodes=4", "#SBATCH --gpus-per-node=8", "#SBATCH --partition=gpu",
                 "#SBATCH --output=reports/preflight-%j.out"):
        assert line in script.splitlines()
    assert 'clustercheck preflight --slurm --reports-dir reports --name "slurm-$SLURM_JOB_ID" --skip smoke' in script


def test_an_unknown_stage_is_bad_input():
    proc = clustercheck("preflight", "--only", "env,bnech")
    assert proc.returncode == 64
    assert "unknown stage" in proc.stderr and "'bnech'" in proc.stderr


def test_preflight_hands_the_users_model_config_and_lora_to_smoke(tmp_path):
    from clustercheck.preflight.options import PreflightOptions, preflight_stages
    config = tmp_path / "ds_z3.json"
    config.write_text('{"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": "auto"}')
    smoke = preflight_stages(PreflightOptions(model="/models/llama", deepspeed=str(config), lora=True))[-1]
    assert (smoke.options.model, smoke.options.deepspeed, smoke.options.lora) == ("/models/llama", str(config), True)
    assert smoke.options.mode == "zero3"          # the config's stage sets the mode
    proc = clustercheck("preflight", "--deepspeed", str(tmp_path / "missing.json"))
    assert proc.returncode == 64 and "missing.json" in proc.stderr
