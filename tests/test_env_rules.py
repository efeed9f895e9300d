"""The env judges, fed with a probe recorded on a sandbox node and GPU / InfiniBand facts
recorded on real hardware (tests/data/README.md), varied one fact at a time."""

import copy
import json
import os

import pytest

from clustercheck.core.errors import InputError
from clustercheck.core.inventory import Node
from clustercheck.core.result import Status
from clustercheck.core.thresholds import Config, EnvThresholds, parse_config
from clustercheck.node.facts import Probed
from clustercheck.node.gather import interpret
from clustercheck.onnode import fabric, gpuprobe, kernlog
from clustercheck.stages.env.judges import evaluate
from clustercheck.stages.env.render import render_markdown, render_terminal, to_json
from clustercheck.transport.base import NodeResult, Outcome

DATA = os.path.join(os.path.dirname(__file__), "data")


def recorded_probe(name="sandbox-node.json"):
    with open(os.path.join(DATA, "probe", name)) as handle:
        return json.load(handle)


def gpu_section(xml_name, copies=8):
    """The GPUs of a recorded nvidia-smi -q -x; `copies` of its first GPU when it has fewer."""
    with open(os.path.join(DATA, "nvidia-smi", xml_name)) as handle:
        info = gpuprobe.parse_nvidia_smi_xml(handle.read())
    if len(info["gpus"]) != copies:
        info["gpus"] = [dict(info["gpus"][0], index=i, pci_bus_id=f"00000000:{0x18 + i:02X}:00.0")
                        for i in range(copies)]
    return info


def cluster(num_nodes=4, change=None, slots=None, base="sandbox-node.json"):
    """num_nodes probed nodes node01.. with the recorded facts; change(i, doc) varies one."""
    probed = []
    for i in range(num_nodes):
        name = f"node{i + 1:02d}"
        doc = copy.deepcopy(recorded_probe(base))
        doc["host"]["hostname"] = name
        doc["host"]["resolves"] = {name: {"addresses": [f"10.0.0.{i + 1}"]}}
        if change:
            change(i, doc)
        node = Node(name, slots=slots)
        p = Probed(node, facts=doc, clock_offset_s=0.01 * i,
                   clock_uncertainty_s=0.05)
        probed.append(p)
    return probed


def set_version(doc, name, version, **origin):
    """One distribution of a recorded probe changed (None: not installed), as the probe lists them."""
    dists = doc["packages"]["distributions"]
    if version is None:
        dists.pop(name, None)
    else:
        dists[name] = dict(dists.get(name) or {"dir": 0}, version=version, **origin)


def judged(probed, limits=None):
    return evaluate(probed, Config(env=limits or EnvThresholds())).findings


def bad(findings):
    return [f for f in findings if f.status is not Status.OK]


def only_problem(findings):
    problems = bad(findings)
    assert len(problems) == 1, [f.summary for f in problems]
    return problems[0]


def test_identical_nodes_are_ready():
    findings = judged(cluster())
    assert bad(findings) == []
    same = [f for f in findings if f.check == "packages.same"]
    assert len(same) == 1 and same[0].summary.startswith("the same ") and "Python packages on all 4 nodes" in \
        same[0].summary


def test_node_without_deepspeed_is_named():
    def drop(i, doc):
        if i == 2:
            set_version(doc, "deepspeed", None)
    finding = only_problem(judged(cluster(change=drop)))
    assert finding.status is Status.FAIL
    assert finding.nodes == ["node03"]
    assert finding.summary == "1 training-stack package differs on node03: deepspeed"
    assert finding.evidence == ["deepspeed not installed (the others 0.19.8)"]


def test_torch_drift_names_the_odd_node_and_the_majority():
    def drift(i, doc):
        if i == 3:
            set_version(doc, "torch", "2.1.0")
    finding = only_problem(judged(cluster(change=drift)))
    assert finding.check == "packages.same" and finding.nodes == ["node04"]
    assert finding.evidence == ["torch 2.1.0 (the others 2.13.0+cpu)"]


def test_even_split_names_no_majority():
    def drift(i, doc):
        if i % 2:
            set_version(doc, "numpy", "1.26.4")
    finding = only_problem(judged(cluster(change=drift)))
    assert finding.status is Status.WARN
    assert "(no majority)" in finding.evidence[0] and len(finding.nodes) == 4


@pytest.mark.parametrize("version, status", [("3.11.9", Status.WARN), ("3.10.14", Status.FAIL)])
def test_python_patch_level_warns_minor_fails(version, status):
    def drift(i, doc):
        if i == 0:
            doc["python"]["version"] = version
    finding = only_problem(judged(cluster(change=drift)))
    assert finding.status is status and finding.nodes == ["node01"]


def test_hostname_resolving_to_loopback_is_named():
    def loop(i, doc):
        if i == 1:
            doc["host"]["resolves"] = {"node02": {"addresses": ["127.0.1.1"]}}
    finding = only_problem(judged(cluster(change=loop)))
    assert finding.check == "hostname.resolves" and finding.nodes == ["node02"]
    assert "127.0.1.1" in finding.evidence[0]


def test_duplicate_hostnames_fail():
    def same(i, doc):
        doc["host"]["hostname"] = "localhost" if i >= 2 else doc["host"]["hostname"]
    finding = [f for f in bad(judged(cluster(change=same))) if f.check == "hostname.unique"][0]
    assert finding.nodes == ["node03", "node04"]


def test_small_dev_shm_fails():
    def docker(i, doc):
        if i == 0:
            doc["storage"]["shm"]["total_bytes"] = 64 * 2 ** 20
    finding = only_problem(judged(cluster(change=docker)))
    assert finding.check == "shm" and "64 MiB" in finding.evidence[0]


def test_memlock_limited_with_infiniband_fails():
    ib = fabric.collect_infiniband(os.path.join(DATA, "sysfs", "procfs-fixtures"))

    def with_ib(i, doc):
        doc["infiniband"] = ib
        doc["limits"]["memlock"] = {"soft": "unlimited", "hard": "unlimited"} if i else {"soft": 65536,
                                                                                         "hard": 65536}
    finding = only_problem(judged(cluster(change=with_ib)))
    assert finding.check == "memlock" and finding.nodes == ["node01"]


def test_infiniband_port_down_on_one_node_fails():
    ib = fabric.collect_infiniband(os.path.join(DATA, "sysfs", "procfs-fixtures"))

    def with_ib(i, doc):
        doc["infiniband"] = copy.deepcopy(ib)
        doc["limits"]["memlock"] = {"soft": "unlimited", "hard": "unlimited"}
        if i == 3:
            doc["infiniband"][1]["state"] = "DOWN"
    finding = only_problem(judged(cluster(change=with_ib)))
    assert finding.check == "rdma.port.down" and finding.nodes == ["node04"]
    assert "InfiniBand mlx4_0/1 is DOWN" in finding.evidence[0]


def test_mtu_mismatch_on_training_interface_fails():
    def jumbo(i, doc):
        if i == 1:
            doc["net"]["interfaces"]["eth0"]["mtu"] = 9000
    finding = only_problem(judged(cluster(change=jumbo)))
    assert finding.check == "interface.mtu" and finding.nodes == ["node02"]
    assert "node02: MTU 9000 on eth0" in finding.evidence


def test_clock_skew_warns_then_fails():
    probed = cluster()
    probed[1].clock_offset_s = 2.5
    probed[3].clock_offset_s = -9.0
    findings = bad(judged(probed))
    by_status = {f.status: f for f in findings}
    assert by_status[Status.FAIL].nodes == ["node04"]
    assert by_status[Status.WARN].nodes == ["node02"]


def test_clock_within_uncertainty_is_not_skew():
    probed = cluster()
    probed[0].clock_offset_s, probed[0].clock_uncertainty_s = 1.6, 1.0
    assert bad(judged(probed)) == []


def test_gpu_facts_from_real_nvidia_smi_compare_and_health():
    def gpus(i, doc):
        doc["gpu"] = gpu_section("h100-x8-driver-580.xml", copies=8 if i != 2 else 7)
        if i == 3:
            doc["gpu"]["gpus"][5]["ecc_uncorrected_volatile"] = 2
    findings = bad(judged(cluster(change=gpus, slots=8)))
    checks = {f.check: f for f in findings}
    assert checks["same.GPUs"].nodes == ["node03"]
    assert checks["slots"].nodes == ["node03"]
    assert checks["gpu.memory"].nodes == ["node04"]
    assert "node04 GPU 5 (0000:a8:00): 2 uncorrectable ECC errors" in checks["gpu.memory"].summary


def test_driver_mismatch_from_two_real_drivers():
    def gpus(i, doc):
        doc["gpu"] = gpu_section("rtx-4090-driver-535.xml" if i == 0 else "tesla-p100.xml", copies=1)
    checks = {f.check: f for f in bad(judged(cluster(change=gpus)))}
    assert checks["same.NVIDIA driver"].nodes == ["node01"]
    assert "535.86.05" in checks["same.NVIDIA driver"].summary
    assert checks["same.GPU model"].nodes == ["node01"]


def test_recorded_xid_79_fails_the_node():
    with open(os.path.join(DATA, "kmsg", "dmesg-xid79-nvsentinel-155.txt")) as handle:
        events, _ = kernlog.xid_events(handle.read().splitlines())

    def xid(i, doc):
        doc["gpu"] = gpu_section("h100-x8-driver-580.xml")
        if i == 1:
            doc["kernel_log"] = {"readable": True, "xid": events}
    findings = bad(judged(cluster(change=xid)))
    assert {f.check for f in findings} == {"gpu.xid"} and all(f.status is Status.FAIL for f in findings)
    assert all(f.nodes == ["node02"] for f in findings)
    # Neither GPU is in the driver's list any more: each is named by its PCI address.
    assert [f.summary.split(": Xid")[0] for f in findings] == [
        "node02 GPU at 0000:b3:00 (not listed by the driver)", "node02 GPU at 0000:44:00 (not listed by the driver)"]
    assert "Xid 79" in findings[0].evidence[0]


def test_socket_ifname_naming_a_missing_interface_fails():
    def env(i, doc):
        doc["env"] = {"NCCL_SOCKET_IFNAME": "ib0" if i == 0 else "eth"}
    findings = bad(judged(cluster(change=env)))
    checks = {f.check: f for f in findings}
    assert checks["env.ifname"].nodes == ["node01"]
    assert "no interface ib0" in checks["env.ifname"].evidence[0]
    assert checks["same.$NCCL_SOCKET_IFNAME"].status is Status.WARN


def test_missing_workdir_and_low_disk():
    def disk(i, doc):
        if i == 0:
            doc["storage"]["workdir"] = {"path": "/scratch/run", "missing": True}
        if i == 1:
            doc["storage"]["workdir"]["free_bytes"] = 2 * 2 ** 30
    checks = {f.check: f for f in bad(judged(cluster(change=disk)))}
    assert checks["workdir"].nodes == ["node01"] and checks["workdir"].status is Status.FAIL
    assert checks["disk"].nodes == ["node02"] and checks["disk"].status is Status.WARN


def test_unreachable_node_is_not_ready_and_others_still_judged():
    probed = cluster(3)
    down = Node("node04")
    probed.append(interpret(down, NodeResult("node04", Outcome.CONNECT_TIMEOUT, detail="10.0.0.4:22: no answer"),
                            0, 0))
    findings = judged(probed)
    reach = [f for f in findings if f.check == "reach"][0]
    assert reach.status is Status.FAIL and reach.nodes == ["node04"]
    assert "firewall" in reach.remedy
    assert any(f.check == "packages.same" and f.summary.endswith("Python packages on all 3 nodes") for f in findings)


def test_probe_that_cannot_start_names_the_interpreter():
    node = Node("node01", python="/opt/env/bin/python")
    result = NodeResult("node01", Outcome.COMMAND_FAILED, 127, "", "sh: 1: /opt/env/bin/python: not found\n")
    probed = interpret(node, result, 0, 0)
    assert probed.facts is None and "/opt/env/bin/python: not found" in probed.problem
    finding = only_problem(judged([probed]))
    assert "python=" in finding.remedy


def test_clock_offset_interval_from_probe_timestamps():
    doc = recorded_probe()
    doc["started"], doc["finished"] = 1000.0 + 30.2, 1000.0 + 30.4
    result = NodeResult("n", Outcome.OK, 0, json.dumps(doc))
    probed = interpret(Node("n"), result, sent=1000.0, answered=1000.6)
    # offset in [30.4 - 0.6, 30.2 - 0.0] = [29.8, 30.2]
    assert probed.clock_offset_s == pytest.approx(30.0)
    assert probed.clock_uncertainty_s == pytest.approx(0.2)


def test_deep_facts_compare_and_judge():
    def broken(i, doc):
        if i == 2:
            doc["deep"] = {"torch_error": "ImportError: libcudart.so.12: cannot open shared object file"}
    finding = [f for f in bad(judged(cluster(change=broken, base="sandbox-node-deep.json")))
               if f.check == "deep.imports"][0]
    assert finding.nodes == ["node03"] and "libcudart" in finding.evidence[0]


def test_thresholds_from_config_change_the_verdict():
    config = parse_config("[env]\nshm_min_gib = 64000\n", "clustercheck.toml")
    finding = only_problem(judged(cluster(), config.env))
    assert finding.check == "shm" and len(finding.nodes) == 4


@pytest.mark.parametrize("text, line, needle", [
    ("[env]\nshm_min_gb = 2\n", 2, "unknown setting"),
    ("[env]\n\nclock_warn_s = 'one'\n", 3, "must be a number"),
    ("[envv]\n", 1, "unknown section"),
    ("[env]\nclock_warn_s = 3\nclock_fail_s = 2\n", 3, "clock_fail_s"),
    ("[env\n", 1, "not valid TOML"),
])
def test_bad_config_names_file_and_line(text, line, needle):
    with pytest.raises(InputError) as caught:
        parse_config(text, "clustercheck.toml")
    assert caught.value.line == line and needle in str(caught.value)
    assert str(caught.value).startswith(f"clustercheck.toml:{line}:")


def test_renderings_name_the_odd_node():
    def drop(i, doc):
        if i == 2:
            set_version(doc, "deepspeed", None)
    probed = cluster(change=drop)
    result = evaluate(probed, Config())
    screen = render_terminal(probed, result.values, result.findings)
    assert "1 training-stack package differs on node03: deepspeed" in screen
    assert "Verdict: NOT READY" in screen
    assert "deepspeed not installed (the others 0.19.8)" in screen
    markdown = render_markdown(probed, result.values, result.findings, Config(), "clustercheck env x")
    assert "| FAIL" in markdown and "deepspeed not installed (the others 0.19.8)" in markdown
    doc = to_json(probed, result.values, result.findings, Config())
    assert doc["verdict"] == "FAIL" and doc["exit_code"] == 2
    assert doc["findings"][0]["nodes"] == ["node03"]


def test_a_directory_missing_on_a_node_is_not_called_unshared():
    from clustercheck.stages.env.storage import judge_shared
    order = ["n1", "n2", "n3"]
    [missing] = judge_shared("/data", {"n1": "sees", "n2": "has no such directory", "n3": "sees"}, order)
    assert missing.status is Status.WARN and missing.nodes == ["n2"] and "could not tell" in missing.summary
    [mixed] = judge_shared("/data", {"n1": "sees", "n2": "does not see", "n3": "sees"}, order)
    assert mixed.status is Status.FAIL and mixed.nodes == ["n2"]
    [local] = judge_shared("/data", {"n1": "sees", "n2": "does not see", "n3": "does not see"}, order)
    assert local.status is Status.OK and "a disk per node" in local.summary


def test_packages_a_fine_tune_needs_are_required_on_every_node():
    from clustercheck.core.requirements import parse_requirement
    from clustercheck.stages.env import packages

    def installed(i, doc):
        set_version(doc, "transformers", None if i == 2 else "5.23.0")   # node03 has neither
        set_version(doc, "peft", None if i == 2 else "0.21.2")
    wanted = [parse_requirement("transformers"), parse_requirement("peft>=0.20")]
    found = packages.required(packages.package_view(cluster(4, installed)), wanted)
    assert [(f.status, f.nodes, f.summary) for f in found] == [
        (Status.FAIL, ["node03"], "transformers is not met on node03"),
        (Status.FAIL, ["node03"], "peft>=0.20 is not met on node03")]
    assert found[0].evidence == ["node03: not installed"]
    ok = packages.required(packages.package_view(cluster(4, lambda i, doc: installed(0, doc))), wanted)
    assert [f.status for f in ok] == [Status.OK, Status.OK] and "on all 4 nodes" in ok[0].summary


def test_a_stale_build_lock_fails_the_nodes_that_share_it_and_a_running_build_does_not():
    """A DeepSpeed op build stopped half way leaves `lock` in the op's directory (a shared home here:
    one path on node01 and node02); every later start that builds the op waits on it for ever."""
    lock = "/home/u/.cache/torch_extensions/py311_cu121/fused_adam/lock"

    def builds(i, doc):
        doc["builds"] = {"root": "/home/u/.cache/torch_extensions", "compiling": False,
                         "locks": [{"path": lock, "age_s": 7200.0}] if i < 2 else []}
    finding = only_problem(judged(cluster(change=builds)))
    assert (finding.check, finding.status, finding.nodes) == ("builds.lock", Status.FAIL, ["node01", "node02"])
    assert f"rm {lock}" in finding.remedy and "120 min old" in finding.evidence[0]

    def building_on_node02(i, doc):
        builds(i, doc)
        doc["builds"]["compiling"] = i == 1
    assert bad(judged(cluster(change=building_on_node02))) == []

    def young(i, doc):
        builds(i, doc)
        doc["builds"]["locks"] = [{"path": lock, "age_s": 30.0}] if i == 0 else []
    finding = only_problem(judged(cluster(change=young)))
    assert finding.status is Status.WARN and finding.nodes == ["node01"]
