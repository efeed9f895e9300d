"""Every package on every node (issue 36): the whole Python environment compared across nodes and against a
known-good baseline, required packages with version ranges, and GPUs held by another job's processes, judged on
the probe recorded on a sandbox node and on nvidia-smi outputs recorded on real machines (tests/data/README.md)."""

import json
import os

import pytest

from clustercheck.core.errors import InputError
from clustercheck.core.requirements import parse_requirement
from clustercheck.core.result import Status
from clustercheck.core.thresholds import Config, EnvThresholds
from clustercheck.display.findings import findings_lines
from clustercheck.onnode import env_probe, gpuprobe
from clustercheck.stages.env import baseline, packages
from clustercheck.stages.env.judges import evaluate
from tests.conftest import clustercheck
from tests.test_env_rules import DATA, cluster, set_version


def problems(probed, **limits):
    return [f for f in evaluate(probed, Config(env=EnvThresholds(**limits))).findings if f.status is not Status.OK]


def test_the_probe_lists_every_distribution_first_on_sys_path_with_where_it_comes_from(tmp_path, monkeypatch):
    first, second = tmp_path / "first", tmp_path / "site-packages"
    for where, version in ((first, "2.6.3"), (second, "2.5.8")):
        (where / f"flash_attn-{version}.dist-info").mkdir(parents=True)
    editable = second / "mylib-0.1.dist-info"
    editable.mkdir()
    (editable / "INSTALLER").write_text("pip\n")
    (editable / "direct_url.json").write_text(json.dumps({"url": "file:///src/mylib", "dir_info": {"editable": True}}))
    vcs = second / "liger_kernel-0.3.1.dist-info"
    vcs.mkdir()
    (vcs / "direct_url.json").write_text(json.dumps({"url": "https://github.com/x/y", "vcs_info": {
        "vcs": "git", "commit_id": "0123456789abcdef0123456789abcdef01234567"}}))
    (second / "broken.egg-info").mkdir()                       # no version in its name, no PKG-INFO
    monkeypatch.setattr("sys.path", [str(first), str(second)])
    dists = env_probe.installed_distributions()
    assert dists["flash-attn"]["version"] == "2.6.3" and dists["flash-attn"]["dir"] == str(first)
    assert dists["flash-attn"]["editable"] == str(first)       # outside a site directory: a source tree on sys.path
    assert dists["mylib"]["editable"] == "file:///src/mylib" and dists["mylib"]["via"] == "pip"
    assert dists["liger-kernel"]["commit"].startswith("0123456789")
    assert dists["broken"]["version"] is None and "no version" in dists["broken"]["error"]


def test_a_clean_cluster_names_nobody_and_the_tool_itself_is_never_noise():
    def own(i, doc):
        set_version(doc, "clustercheck", f"0.1.{i}", editable=f"file:///home/u{i}/clustercheck")
    assert problems(cluster(4, own)) == []


def test_a_training_stack_package_fails_and_the_rest_warns_each_node_named_with_both_versions():
    def drift(i, doc):
        if i == 2:
            set_version(doc, "flash-attn", "2.5.8")
            set_version(doc, "tokenizers", "0.19.1")
            set_version(doc, "nvidia-cublas-cu12", "12.1.3.1")
        if i == 3:
            set_version(doc, "liger-kernel", "0.3.1")           # present on one node only
        if i != 2:
            set_version(doc, "flash-attn", "2.6.3")
            set_version(doc, "nvidia-cublas-cu12", "12.4.5.8")
    found = problems(cluster(4, drift))
    assert [(f.status, f.nodes) for f in found] == [(Status.FAIL, ["node03"]), (Status.WARN, ["node03"]),
                                                    (Status.WARN, ["node04"])]
    assert found[0].summary == "2 training-stack packages differ on node03: flash-attn, nvidia-cublas-cu12"
    assert found[0].evidence == ["flash-attn 2.5.8 (the others 2.6.3), nvidia-cublas-cu12 12.1.3.1 (the others "
                                 "12.4.5.8)"]
    assert "tokenizers 0.19.1 (the others" in found[1].evidence[0]
    assert found[2].evidence == ["liger-kernel 0.3.1 (the others not installed)"]


def test_a_thresholds_file_moves_a_package_either_way_and_an_editable_install_counts():
    def drift(i, doc):
        if i == 1:
            set_version(doc, "tokenizers", "0.19.1")
            set_version(doc, "deepspeed", "0.19.8", editable="file:///home/me/DeepSpeed", commit="abcdef1234567890")
    found = problems(cluster(4, drift), fail_packages=["tokenizers"], warn_packages=["deepspeed"])
    assert [(f.status, f.summary) for f in found] == [
        (Status.FAIL, "1 training-stack package differs on node02: tokenizers"),
        (Status.WARN, "1 package differs on node02: deepspeed")]
    assert found[1].evidence == ["deepspeed 0.19.8 (editable at /home/me/DeepSpeed, commit abcdef1234) (the others "
                                 "0.19.8)"]


def test_required_packages_take_any_name_and_a_range_and_name_what_each_node_has():
    def installed(i, doc):
        set_version(doc, "flash-attn", "2.5.8" if i == 1 else "2.6.3")
    view = packages.package_view(cluster(4, installed))
    [flash, bnb] = packages.required(view, [parse_requirement("flash-attn>=2.6"), parse_requirement("bitsandbytes")])
    assert (flash.status, flash.nodes, flash.evidence) == (Status.FAIL, ["node02"], ["node02: 2.5.8 (needs >=2.6)"])
    assert bnb.summary == "bitsandbytes is not met on any node" and bnb.nodes == ["node01", "node02", "node03",
                                                                                   "node04"]


@pytest.mark.parametrize("args, words", [
    (["--require", "flash-attn>="], ["--require", "not a package requirement", "'flash-attn>='"]),
    (["--baseline", "/nonexistent/freeze.txt"], ["/nonexistent/freeze.txt", "no such baseline"]),
])
def test_bad_requirements_and_baselines_are_refused_before_any_node(args, words):
    proc = clustercheck("env", "nodes-that-do-not-exist.invalid", *args)
    assert proc.returncode == 64 and "Traceback" not in proc.stderr
    assert all(word in proc.stderr for word in words), proc.stderr


@pytest.mark.parametrize("content, words", [
    (b"\x89PNG\r\n\x1a\n\x00\x00", ["not a text file"]),
    (b'{"kind": "clustercheck env baseline", "schema": 1, "packages": {"torch": "2.', ["broken JSON"]),
    (b'{"DCGM Diagnostic": {}}', ["not a clustercheck env baseline", "another tool"]),
    (b"torch==2.5.1\nnumpy>=>1\n", [":2:", "not a package requirement", "'numpy>=>1'"]),
    (b"-e /src/mylib\n", [":1:", "#egg=NAME"]),
    (b"# only a comment\n", ["no package in it"]),
])
def test_a_baseline_that_is_not_one_is_bad_input_naming_file_and_line(tmp_path, content, words):
    path = tmp_path / "baseline.txt"
    path.write_bytes(content)
    with pytest.raises(InputError) as caught:
        baseline.read_baseline(str(path))
    assert str(caught.value).startswith(str(path)) and all(w in str(caught.value) for w in words), str(caught.value)


def test_a_cluster_that_drifted_all_together_since_its_baseline_is_named(tmp_path):
    clean = cluster(4)
    result = evaluate(clean, Config())
    view = packages.package_view(clean)
    path = tmp_path / "good.json"
    baseline.write_baseline(str(path), baseline.baseline_document(view, result.values, [p.name for p in clean]))
    saved = baseline.read_baseline(str(path))
    assert saved.complete and saved.packages["torch"].pinned == "2.13.0+cpu"
    policy = packages.PackagePolicy()
    assert [f.status for f in baseline.against_baseline(saved, view, result.values, policy)] == [Status.OK]

    def upgraded(i, doc):            # an image upgrade on every node: no majority vote can see it
        set_version(doc, "torch", "2.14.0+cpu")
        set_version(doc, "bitsandbytes", "0.45.0")
    moved = packages.package_view(cluster(4, upgraded))
    [change] = baseline.against_baseline(saved, moved, result.values, policy)
    assert change.status is Status.FAIL and "on every node (the whole cluster changed together" in change.summary
    assert "torch 2.13.0+cpu -> 2.14.0+cpu on every node" in change.evidence
    assert "bitsandbytes not installed -> 0.45.0 on every node" in change.evidence


def test_a_pip_freeze_is_a_baseline_with_its_pins_and_ranges(tmp_path):
    path = tmp_path / "requirements.txt"
    path.write_text("# pip freeze\n--index-url https://example.invalid/simple\ntorch==2.13.0+cpu\n"
                    "numpy>=1.26,<3  # a range\nmylib @ file:///src/mylib\n-e git+https://x/y.git@abc#egg=yourlib\n")
    freeze = baseline.read_baseline(str(path))
    assert not freeze.complete and sorted(freeze.packages) == ["mylib", "numpy", "torch", "yourlib"]
    view = packages.package_view(cluster(3))
    [missing] = baseline.against_baseline(freeze, view, {}, packages.PackagePolicy())
    assert missing.status is Status.WARN and sorted(missing.evidence) == [
        "mylib installed -> not installed on every node", "yourlib installed -> not installed on every node"]


def test_a_variable_set_differently_on_one_node_is_named_and_a_secret_only_as_differing():
    def env(i, doc):
        doc["env"] = {"OMP_NUM_THREADS": "8" if i != 1 else "1",
                      "HF_TOKEN": f"(set; value not shown, #{'aaaaaa' if i != 1 else 'bbbbbb'})"}
    found = {f.check: f for f in problems(cluster(3, env))}
    assert found["same.$OMP_NUM_THREADS"].nodes == ["node02"]
    assert found["same.$HF_TOKEN"].nodes == ["node02"] and "bbbbbb" in found["same.$HF_TOKEN"].evidence[0]


def test_a_variable_set_on_one_node_of_three_names_that_node_alone_first():
    """LD_LIBRARY_PATH on one node of three: the one node is the odd one, named in the line and first in the
    evidence; the two healthy nodes are "the others", never listed as if they differed."""
    def env(i, doc):
        doc["env"] = {"LD_LIBRARY_PATH": "/opt/old-nccl/lib"} if i == 2 else {}
    [found] = [f for f in problems(cluster(3, env)) if f.check == "same.$LD_LIBRARY_PATH"]
    assert found.summary == "LD_LIBRARY_PATH differs on node03 from the other 2 nodes"
    assert found.nodes == ["node03"]
    assert found.evidence == ["node03: /opt/old-nccl/lib", "the others (node[01-02]): (unset)"]
    shown = "\n".join(findings_lines([found]))
    assert shown.index("node03") < shown.index("node[01-02]")


def test_a_variable_with_no_majority_says_so_and_blames_every_node():
    def env(i, doc):
        doc["env"] = {"NCCL_IB_HCA": ["mlx5_0", "mlx5_1"][i]}
    [found] = [f for f in problems(cluster(2, env)) if f.check == "same.$NCCL_IB_HCA"]
    assert found.summary == "NCCL_IB_HCA differs across the 2 nodes, no majority"
    assert found.nodes == ["node01", "node02"]


def test_the_probe_never_lets_a_secret_out_but_tells_two_apart(monkeypatch):
    from clustercheck.onnode.nodelib import collect_env
    monkeypatch.setenv("HF_TOKEN", "hf_" + "x" * 34)
    one = collect_env({"salt": "run1"})["HF_TOKEN"]
    monkeypatch.setenv("HF_TOKEN", "hf_" + "y" * 34)
    other = collect_env({"salt": "run1"})["HF_TOKEN"]
    assert one != other and "x" * 10 not in one and one.startswith("(set; value not shown, #")
    monkeypatch.setenv("HF_TOKEN", "hf_" + "x" * 34)
    assert collect_env({"salt": "run2"})["HF_TOKEN"] != one       # salted per run: nothing to check it against


def _recorded(name):
    with open(os.path.join(DATA, "gpu-processes", name)) as handle:
        return handle.read()


def test_gpus_held_by_another_job_are_named_from_recorded_outputs():
    """Issue 36: 22 of 24 GB held by a llama-server (telegraf's 2x A5000) fails; a T4 with Xorg and 1 GB of python
    warns; memory the driver does not report (Windows WDDM) warns, never OK."""
    a5000 = gpuprobe.parse_nvidia_smi_xml(_recorded("q-x-2xa5000-driver-590-llama-server-telegraf.xml"))
    t4 = gpuprobe.parse_nvidia_smi_xml(_recorded("q-x-t4-driver-515-xorg-python-telegraf.xml"))
    windows = gpuprobe.parse_nvidia_smi_xml(_recorded("q-x-rtx2080-windows-516-memory-na-netdata.xml"))

    def gpus_of(i, doc):
        doc["gpu"] = [a5000, t4, windows, {"source": "pynvml", "driver": "590", "gpus": [
            dict(a5000["gpus"][0], processes=[])]}][i]
    found = [f for f in problems(cluster(4, gpus_of)) if f.check == "gpu.held"]
    assert [(f.status, f.nodes) for f in found] == [(Status.FAIL, ["node01"]), (Status.WARN, ["node02", "node03"])]
    assert found[0].evidence[0] == ("node01 GPU 0: 1 process(es) hold 22,430 MiB of 24,564 MiB: pid 100477 "
                                    "/root/src/llama.cpp/build/bin/llama-server (C): 22,430 MiB")
    assert "pid 675 /usr/lib/xorg/Xorg (G): 22 MiB; pid 5762 python (C): 1,005 MiB" in found[1].evidence[0]
    assert "memory not reported" in found[1].evidence[1] and "and 22 more" in found[1].evidence[1]


def test_the_compute_apps_query_is_read_with_or_without_units():
    h100 = gpuprobe.parse_compute_apps(_recorded("compute-apps-h100-driver-590-load.csv"))
    assert [(p["pid"], p["name"], p["used_mib"]) for p in h100] == [
        (11327, "/root/tools/memhog", 2566), (11328, "/root/tools/memhog", 1542), (11345, "./gpu_burn", 15690)]
    windows = gpuprobe.parse_compute_apps(_recorded("compute-apps-rtx2080super-windows-591-na.csv"))
    assert len(windows) == 12 and {p["used_mib"] for p in windows} == {None}
