"""The device stage's judges on probe documents, and the probe itself on this machine's CPU."""

import pytest

from clustercheck.core.inventory import Node
from clustercheck.core.result import Status
from clustercheck.stages.device import expected
from clustercheck.stages.device.facts import DeviceFacts
from clustercheck.stages.device.rules import judge_devices

H100 = "NVIDIA H100 80GB HBM3"
LOADED = {"sm_mhz": 1980, "max_sm_mhz": 1980, "power_w": 690.0, "power_limit_w": 700.0, "temperature_c": 61,
          "throttle": [], "pcie_gen": 5, "pcie_gen_max": 5, "pcie_width": 16, "pcie_width_max": 16}


def gpu(index, tflops=780.0, h2d=55e9, digest="aaaa", **sample):
    return {"index": index, "kind": "cuda", "name": H100, "pci_bus_id": f"00000000:{0x18 + index:02X}:00.0",
            "gemm_flops": {"bfloat16": tflops * 1e12, "float16": tflops * 1e12},
            "copy_bytes_s": 2.6e12, "h2d_bytes_s": h2d, "d2h_bytes_s": h2d,
            "checksum": {"bfloat16": digest}, "samples": [dict(LOADED, **sample)]}


def facts(per_node):
    nodes = [Node(f"n{i + 1}") for i in range(len(per_node))]
    docs = {n.name: {"schema": 1, "kind": "cuda", "torch": "2.13.0", "cuda": "12.8", "devices": devices,
                     "peers_bytes_s": []} for n, devices in zip(nodes, per_node)}
    return DeviceFacts(nodes, docs, seconds=10)


def by_check(found):
    return {f.check: f for f in found}


def test_eight_alike_gpus_per_node_name_nobody():
    found = judge_devices(facts([[gpu(i) for i in range(8)] for _ in range(2)]))
    assert all(f.status is Status.OK for f in found), [f.summary for f in found if f.status is not Status.OK]
    assert "16 GPUs (NVIDIA H100 80GB HBM3) alike" in by_check(found)["device.gemm.bfloat16"].summary


def test_a_power_capped_gpu_is_named_with_its_figure_its_peers_and_why():
    nodes = [[gpu(i) for i in range(8)] for _ in range(2)]
    nodes[1][3] = gpu(3, tflops=500.0, throttle=["sw_power_cap"], power_w=540.0, sm_mhz=1320)
    found = by_check(judge_devices(facts(nodes)))
    slow = found["device.gemm.bfloat16"]
    assert slow.status is Status.FAIL and slow.nodes == ["n2"]
    [line] = slow.evidence
    assert line.startswith("GPU 3 on n2 (00000000:1B:00.0): 500.0 TFLOPS, 64% of its 15 peers' 780.0")
    assert "sw_power_cap active" in line and "540 W of 700 W" in line and "SM clock at most 1320 of 1980" in line
    assert "500.0 TFLOPS bf16, 63% of 794.5" in found["device.expected"].evidence[0]


def test_a_link_trained_down_under_load_and_a_gpu_with_other_bits():
    nodes = [[gpu(i) for i in range(4)] for _ in range(2)]
    nodes[0][2] = gpu(2, h2d=26e9, pcie_gen=4, pcie_width=8)
    nodes[1][1] = gpu(1, digest="bbbb")
    found = by_check(judge_devices(facts(nodes)))
    assert found["device.links"].nodes == ["n1"]
    assert "GPU 2 on n1 (00000000:1A:00.0): PCIe Gen4 x8 of Gen5 x16 under load" in found["device.links"].evidence
    assert found["device.h2d"].status is Status.FAIL and found["device.h2d"].nodes == ["n1"]
    bits = found["device.bits"]
    assert bits.status is Status.FAIL and bits.nodes == ["n2"] and "7 of 8 others aaaa" in bits.evidence[0]


def test_two_devices_that_disagree_are_both_suspects_and_one_device_is_measured_but_not_compared():
    two = by_check(judge_devices(facts([[gpu(0)], [gpu(0, digest="bbbb")]])))["device.bits"]
    assert two.status is Status.FAIL and two.nodes == [] and "no majority tells which" in two.summary
    cpu = {"index": 0, "kind": "cpu", "name": "Some CPU", "gemm_flops": {"float32": 4e10}, "copy_bytes_s": 5e9,
           "checksum": {"float32": "cccc"}}
    alone = DeviceFacts([Node("n1")], {"n1": {"kind": "cpu", "devices": [cpu]}})
    [finding] = judge_devices(alone)
    assert finding.check == "device.measured" and finding.status is Status.OK and "none has a peer" in finding.summary


def test_a_node_that_could_not_be_measured_is_unknown_never_ok():
    broken = facts([[gpu(0)], [gpu(0)], []])
    broken.documents.pop("n3")
    broken.problems["n3"] = "import torch: ModuleNotFoundError: No module named 'torch'"
    found = by_check(judge_devices(broken))
    assert found["device.unmeasured"].status is Status.UNKNOWN and found["device.unmeasured"].nodes == ["n3"]
    nothing = DeviceFacts([Node("n1")], {"n1": {"kind": "cpu", "devices": []}})
    assert [f.status for f in judge_devices(nothing)] == [Status.UNKNOWN]


def test_the_table_matches_whole_model_words_of_sxm_parts():
    assert expected.model_of(H100) == "H100" and expected.model_of("NVIDIA GH200 480GB") == "GH200"
    assert expected.model_of("NVIDIA H100 NVL") is None and expected.model_of("NVIDIA A100 80GB PCIe") is None
    assert expected.model_of("NVIDIA A1000") is None and expected.bf16_tflops("NVIDIA B200") == 1745.0
    assert expected.host_and_peer_floor("NVIDIA GB200") == (48.0, 335.0)      # Azure's GB200 floors (issue 42)
    assert expected.host_and_peer_floor("NVIDIA B200") is None                # none published: none claimed


def test_the_probe_measures_this_cpu_and_a_wrong_bits_fault_changes_only_the_checksum(monkeypatch):
    from clustercheck.onnode import device_probe
    doc = device_probe.probe(["--seconds", "0.4", "--size", "128"])
    [cpu] = doc["devices"]
    assert doc["kind"] == "cpu" and cpu["gemm_flops"]["float32"] > 1e8 and cpu["copy_bytes_s"] > 1e8
    monkeypatch.setenv(device_probe.WRONG_BITS, "1")
    again = device_probe.probe(["--seconds", "0.4", "--size", "128"])["devices"][0]
    assert again["checksum"]["float32"] != cpu["checksum"]["float32"]
    monkeypatch.delenv(device_probe.WRONG_BITS)
    assert device_probe.probe(["--seconds", "0.2", "--size", "64"])["devices"][0]["checksum"] == cpu["checksum"]


def _dcgm(name):
    import os
    with open(os.path.join(os.path.dirname(__file__), "data", "dcgm", name)) as handle:
        return handle.read()


def test_dcgm_diag_every_shape_read_a_failure_named_a_skip_never_ok_and_dcgm_s_own_errors_labelled():
    from clustercheck.outputs.dcgm import judge_dcgm
    from clustercheck.outputs.dcgm_read import parse_diag
    passed = judge_dcgm("n1", {"level": 2, "output": _dcgm("diag-r2-json-3.x-1xt4-all-pass-virtualclient.json")})
    assert [(f.status, f.summary.split(":")[0]) for f in passed] == [(Status.OK, "dcgmi diag -r 2 on n1")]
    [power, eud] = judge_dcgm("n2", {"level": 3, "output": _dcgm("diag-r3-text-3.3.9-4xa10g-targeted-power-fail.txt")})
    assert (power.status, power.nodes) == (Status.FAIL, ["n2"])
    assert power.summary == "dcgmi diag -r 3: Targeted Power failed on n2, GPU 1 (a hardware fault)"
    assert power.evidence[0].startswith("GPU 1 Max power of 224.1 did not reach desired power minimum")
    assert "DCGM_FR_TARGET_POWER (63)" in power.evidence[-1] and "drain the node" in power.remedy
    assert eud.status is Status.UNKNOWN and "EUD Test" in eud.evidence[0]
    gated = judge_dcgm("n3", {"level": 2, "output": _dcgm("diag-r2-json-4.5.2-gb10-plugins-gated.json")})
    assert [f.status for f in gated] == [Status.WARN, Status.UNKNOWN]
    assert "persistence mode is off" in gated[0].summary and "nvidia-smi -pm 1" in gated[0].remedy
    assert "skipped 2 test(s)" in gated[1].summary
    internal = judge_dcgm("n4", {"level": 2, "output": _dcgm("diag-r2-text-4.4.1-8xb200-pcie-fail-dcgm-253.txt")})
    assert internal[0].status is Status.UNKNOWN and "DCGM's own error, not a verdict on the GPU" in internal[0].summary
    assert "couldn't be parsed" in internal[0].evidence[0] and "Restart DCGM" in internal[0].evidence[0]
    assert "DCGM_FR_INTERNAL (44)" in internal[0].evidence[-1]
    assert len([r for r in parse_diag(_dcgm("diag-r2-text-4.4.1-8xb200-pcie-fail-dcgm-253.txt")).results if r.gpus]) == 24
    mig = judge_dcgm("n5", {"level": 1, "skipped": "MIG is enabled on GPU 0 (the diagnostic needs whole GPUs)"})
    assert mig[0].status is Status.UNKNOWN and "MIG" in mig[0].summary
    assert judge_dcgm("n6", None) == [] and judge_dcgm("n7", {"level": 1, "output": "garbage"})[0].status \
        is Status.UNKNOWN


def test_dcgm_a_persistence_mode_error_row_is_a_setting_with_its_command_not_a_gpu_to_replace():
    """Issue 35: the table's Error rows under a failed Deployment check were ignored, so persistence mode off on every
    GPU read as a hardware FAIL with "replace the GPU"; DCGM 3.1.8 on 8 H200 (the message cut at ~1,000 characters)."""
    from clustercheck.outputs.dcgm import judge_dcgm
    [setting, passed] = judge_dcgm("n1", {"level": 1, "output": _dcgm("diag-r1-text-3.1.8-8xh200-persistence-error.txt")})
    assert setting.status is Status.WARN and setting.nodes == ["n1"]
    assert setting.summary == ("dcgmi diag -r 1: Persistence Mode failed on n1, GPU 0, 1, 2, 3, 4, 5 (a setting, not "
                               "the hardware: persistence mode is off)")
    assert setting.remedy.startswith("nvidia-smi -pm 1") and "replace" not in setting.remedy
    assert setting.evidence[0].startswith("Persistence mode for GPU 0 is currently disabled. The DCGM diagnostic "
                                          "requires peristence mode to be enabled.")
    assert "(DCGM 3.1.8)" in passed.summary and passed.status is Status.OK


def test_dcgm_each_failed_check_gets_the_remedy_of_its_kind():
    """A cuInit failure on every GPU is the install (Fabric Manager, the driver), not eight GPUs to replace; DCGM 1.x
    Deployment checks failed without messages take the kind of the check."""
    from clustercheck.outputs.dcgm import judge_dcgm
    [cuda, skipped] = judge_dcgm("n1", {"level": 3, "output": _dcgm("diag-r3-text-3.3.8-8xh100-cuinit-fail-nccl-tests-264.txt")})
    assert cuda.status is Status.FAIL and "GPU 0, 1, 2, 3, 4, 5, 6, 7 (the driver / CUDA / DCGM install" in cuda.summary
    assert "nvidia-fabricmanager" in cuda.remedy and "replace the GPU for this" in cuda.remedy
    assert "skipped 3 test(s)" in skipped.summary
    kinds = {f.summary.split(": ")[1].split(" failed")[0]: (f.status, f.remedy.split(" ")[0])
             for f in judge_dcgm("n2", {"level": 1, "output": _dcgm("diag-r1-text-1.x-deployment-fail-deepops.txt")})
             if f.status is not Status.OK}
    assert kinds == {"Persistence Mode": (Status.WARN, "nvidia-smi"), "Environment Variables": (Status.WARN, "unset"),
                     "Graphics Processes": (Status.WARN, "stop"), "Page Retirement": (Status.FAIL, "drain"),
                     "Inforom": (Status.FAIL, "drain")}


def test_dcgm_a_pending_row_remap_on_an_error_row_is_a_gpu_to_reset_named():
    """No public table has a row-remap error; DCGM 3.x's Deployment check prints it as an Error row under
    "Page Retirement/Row Remap" (dcgmi/Diag.cpp; message DCGM_FR_PENDING_ROW_REMAP_MSG of v3.2.6): the 3.1.8 recording
    with that check failed and its Error row, the one change."""
    from clustercheck.outputs.dcgm import judge_dcgm
    text = _dcgm("diag-r1-text-3.1.8-8xh200-persistence-error.txt")
    message = "GPU 3 has uncorrectable memory errors and row remappings are pending"
    rows = [f"| {name:<25} | {message[i:i + 45]:<45}  |\n" for name, i in (("Error", 0), ("", 45))]
    text = text.replace("| Page Retirement/Row Remap | Pass                                           |\n",
                        "| Page Retirement/Row Remap | Fail                                           |\n" + "".join(rows))
    [remap] = [f for f in judge_dcgm("n1", {"level": 1, "output": text}) if "Row Remap" in f.summary]
    assert remap.status is Status.FAIL and remap.summary.endswith("failed on n1, GPU 3 (a GPU that needs a reset)")
    assert "DCGM_FR_PENDING_ROW_REMAP (85)" in remap.evidence[-1] and "nvidia-smi -r" in remap.remedy


def test_dcgm_json_of_3_3_names_the_gpu_and_keeps_the_nested_message():
    """DCGM 3.3's Deployment results name their GPU as "gpu_id" (a number) and nest each message under "warnings"
    (dcgmi/Diag.cpp at v3.3.9, HelperJsonAddLevelOneResults): the 3.x recording's Persistence Mode result written
    that way, the one change."""
    import json

    from clustercheck.outputs.dcgm import judge_dcgm
    doc = json.loads(_dcgm("diag-r2-json-3.x-1xt4-all-pass-virtualclient.json"))
    [test] = [t for c in doc["DCGM GPU Diagnostic"]["test_categories"] for t in c["tests"]
              if t["name"] == "Persistence Mode"]
    test["results"] = [{"gpu_id": 0, "status": "Fail", "warnings": [{
        "warnings": "Persistence mode for GPU 0 is disabled. Enable persistence mode by running \"nvidia-smi -i "
                    "<gpuId> -pm 1 \" as root.", "error_id": 29, "error_category": 8, "error_severity": 5}]}]
    [setting, passed] = judge_dcgm("n1", {"level": 2, "output": json.dumps(doc)})
    assert setting.summary.endswith("Persistence Mode failed on n1, GPU 0 (a setting, not the hardware: persistence "
                                    "mode is off)")
    assert setting.evidence[0].startswith("Persistence mode for GPU 0 is disabled") and setting.status is Status.WARN


def test_dcgm_4_a_test_summary_that_failed_is_a_failure_and_a_runtime_error_is_said():
    import json

    from clustercheck.outputs.dcgm import judge_dcgm
    doc = json.loads(_dcgm("diag-r2-json-4.5.2-gb10-plugins-allowed.json"))
    [pcie] = [t for c in doc["DCGM Diagnostic"]["test_categories"] for t in c["tests"] if t["name"] == "pcie"]
    pcie["test_summary"]["status"] = "Fail"       # every GPU entry still Pass: the one change
    failed = [f for f in judge_dcgm("n1", {"level": 2, "output": json.dumps(doc)}) if "pcie" in f.summary]
    assert [(f.status, f.nodes) for f in failed] == [(Status.FAIL, ["n1"])]
    # dcgmi's JSON when it cannot run (Diag::HelperDisplayFailureMessage): {NAME: {"version", "runtime_error"}}
    error = {"DCGM Diagnostic": {"version": "4.5.2", "runtime_error": "Unable to connect to the host engine"}}
    [said] = judge_dcgm("n2", {"level": 2, "output": json.dumps(error)})
    assert said.status is Status.UNKNOWN and said.summary == ("dcgmi diag -r 2 (DCGM 4.5.2) could not run on n2: "
                                                              "Unable to connect to the host engine")


def test_dcgm_4_table_skips_are_counted_once_per_test():
    """A 4.x table says a skip twice: the test's row and each GPU's. The B200 recording with its memory test skipped,
    as 4.x prints a skip (the one change)."""
    from clustercheck.outputs.dcgm import judge_dcgm
    text = _dcgm("diag-r2-text-4.4.1-8xb200-pcie-fail-dcgm-253.txt")
    head, _, tail = text.partition("| memory                    | Pass ")
    memory, _, rest = tail.partition("+-----  Integration")
    text = head + "| memory                    | Skip " + memory.replace(": Pass", ": Skip") + "+-----  Integration" + rest
    [skipped] = [f for f in judge_dcgm("n1", {"level": 2, "output": text}) if "skipped" in f.summary]
    assert "skipped 1 test(s) on n1" in skipped.summary and skipped.evidence == ["memory (GPU 0, 1, 2, 3, 4, 5, 6, 7)"]


def _recorded(folder, name):
    import os
    with open(os.path.join(os.path.dirname(__file__), "data", folder, name)) as handle:
        return handle.read()


def test_nvbandwidth_figures_stand_in_for_the_probe_s_and_an_odd_pair_is_named():
    from clustercheck.stages.device.nvbandwidth import figures
    h2d = figures(_recorded("nvbandwidth", "h2d-4xt4-v0.8.txt"))["h2d"]
    assert h2d == [12.35, 12.34, 12.30, 12.33]
    azure = _recorded("nvbandwidth", "d2d-read-ce-8xh100-azure-ndv5-v0.4.txt")
    peers = figures(azure)["peers"]
    assert len(peers) == 8 and peers[0][0] is None and peers[2][4] == 372.96
    healthy = facts([[gpu(i) for i in range(8)] for _ in range(3)])
    for doc in healthy.documents.values():
        doc["nvbandwidth"] = azure
    found = by_check(judge_devices(healthy))
    assert "device.links" not in found and "device.expected" not in found   # every pair ~371 GB/s, above 335
    # the same recording on n3 with one pair's figure lowered here (GPU 5 -> GPU 2: 372 -> 180 GB/s)
    healthy.documents["n3"]["nvbandwidth"] = azure.replace("371.92    372.18", "180.00    372.18", 1)
    found = by_check(judge_devices(healthy))
    assert found["device.links"].nodes == ["n3"]
    assert "n3: GPU 5 -> GPU 2 copies at 180.0 GB/s" in found["device.links"].evidence[0]
    assert "of the same pair on 2 other nodes" in found["device.links"].evidence[0]
    assert "GPU 5 on n3 (00000000:1D:00.0): copies to GPU 2 below 335 GB/s" in found["device.expected"].evidence[0]


def test_throttling_and_links_read_from_recorded_nvidia_smi_q_feed_the_why():
    """The sampler's fallback reads `nvidia-smi -q`: gpud's 8x H100 with HW slowdown and power brake active
    (SM at 86 MHz), and its 8x RTX 4090, two with SW power cap, the idle ones' links at Gen1 of Gen4."""
    from clustercheck.onnode.gpusample import smi_q_samples
    from clustercheck.stages.device.facts import Device
    from clustercheck.stages.device.rules import trained_down, why_slow
    h100 = smi_q_samples(_recorded("nvidia-smi", "q-8xh100-hw-power-brake-driver-535-gpud.txt"))
    assert len(h100) == 8 and all(s["throttle"] == ["hw_slowdown", "hw_power_brake_slowdown"] for s in h100)
    why = why_slow(Device("n1", 0, "cuda", H100, samples=h100[:1]))
    assert why == "hw_power_brake_slowdown, hw_slowdown active; 68 W of 700 W; SM clock at most 86 of 1980 MHz"
    rtx = smi_q_samples(_recorded("nvidia-smi", "q-8xrtx4090-sw-power-cap-driver-535-gpud.txt"))
    capped = [i for i, s in enumerate(rtx) if "sw_power_cap" in s["throttle"]]
    assert len(capped) == 2
    idle = [s for s in rtx if "gpu_idle" in s["throttle"]]
    assert idle and idle[0]["pcie_gen"] == 1 and idle[0]["pcie_gen_max"] == 4
    assert trained_down(Device("n1", 0, "cuda", "RTX 4090", samples=idle)) == ""
    loaded = [dict(idle[0], throttle=[])]
    assert trained_down(Device("n1", 0, "cuda", "RTX 4090", samples=loaded)) == "PCIe Gen1 x16 of Gen4 x16 under load"
    # driver 570 and later: "Instantaneous Power Draw" and "Average Power Draw" where "Power Draw" was
    [rtx5090] = smi_q_samples(_recorded("nvidia-smi", "q-rtx5090-driver-570-gls.txt"))
    assert (rtx5090["power_w"], rtx5090["power_limit_w"], rtx5090["temperature_c"]) == (23.78, 575.0, 25)
    assert rtx5090["throttle"] == ["sw_power_cap"] and (rtx5090["pcie_width"], rtx5090["pcie_width_max"]) == (8, 16)
    assert "24 W of 575 W" in why_slow(Device("n1", 0, "cuda", "NVIDIA GeForce RTX 5090", samples=[rtx5090]))


def test_gpus_torch_cannot_use_are_never_measured_as_a_cpu_and_never_ok(monkeypatch):
    """A node whose driver lists GPUs that torch cannot use (a CPU-only wheel) is an error, not a CPU node that
    passes; torch using fewer GPUs than the driver lists is UNKNOWN naming the node."""
    from clustercheck.onnode import device_probe
    monkeypatch.setattr(device_probe, "nvidia_gpus", lambda: 8)
    doc = device_probe.probe(["--seconds", "0.2", "--size", "64"])
    assert "the NVIDIA driver lists 8 GPU(s) but torch" in doc["error"] and "devices" not in doc
    fewer = facts([[gpu(i) for i in range(7)]])
    fewer.documents["n1"].update(driver_gpus=8, visible_devices="0,1,2,3,4,5,6")
    [missing] = [f for f in judge_devices(fewer) if f.check == "device.unmeasured"]
    assert missing.status is Status.UNKNOWN and missing.summary == "torch uses 7 of the 8 GPUs the driver lists on n1"


def test_dcgm_warnings_and_an_exit_without_a_failed_test_are_said():
    import json

    from clustercheck.outputs.dcgm import judge_dcgm
    doc = json.loads(_dcgm("diag-r2-json-3.x-1xt4-all-pass-virtualclient.json"))
    [pcie] = [t for c in doc["DCGM GPU Diagnostic"]["test_categories"] for t in c["tests"] if t["name"] == "PCIe"]
    pcie["results"][0]["status"] = "Warn"       # the recording, with its PCIe result changed here to Warn
    warned = [f for f in judge_dcgm("n1", {"level": 2, "output": json.dumps(doc)}) if f.status is Status.WARN]
    assert len(warned) == 1 and warned[0].evidence == ["PCIe: Warn, no message"] and warned[0].nodes == ["n1"]
    failed_run = judge_dcgm("n1", {"level": 1, "exit": 226, "output": "", "stderr": "Error: unable to connect"})
    assert {f.status for f in failed_run} == {Status.UNKNOWN}
    assert any("exited 226" in f.summary and f.evidence == ["Error: unable to connect"] for f in failed_run)


def test_fp8_is_measured_through_scaled_mm_and_said_where_the_gpus_have_none():
    import types

    import torch

    from clustercheck.onnode import device_probe
    from clustercheck.stages.device.render import table
    # the probe's fp8 path (torch._scaled_mm, unit scales, bf16 out) runs on this CPU too: a rate, and the same
    # bits twice from the same inputs, other bits than bf16's
    assert device_probe.gemm_rate(torch, "cpu", torch.float8_e4m3fn, 64, 0.05, lambda: None) > 0
    fp8 = device_probe.checksum(torch, "cpu", torch.float8_e4m3fn)
    assert fp8 == device_probe.checksum(torch, "cpu", torch.float8_e4m3fn) != device_probe.checksum(
        torch, "cpu", torch.bfloat16)
    real = torch._scaled_mm      # before torch 2.5 it returned (result, amax): the same bits either way
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch, "_scaled_mm", lambda *a, **k: (real(*a, **k), torch.zeros(())))
        assert device_probe.checksum(torch, "cpu", torch.float8_e4m3fn) == fp8
    ampere = types.SimpleNamespace(float8_e4m3fn=1, _scaled_mm=1, __version__="2.13.0",
                                   version=types.SimpleNamespace(hip=None),
                                   cuda=types.SimpleNamespace(get_device_capability=lambda i: (8, 0 if i else 9)))
    assert device_probe.fp8_missing(ampere, 1) == ""
    assert device_probe.fp8_missing(ampere, 2) == "GPU 1 has compute capability 8.0 (fp8 matmul takes 8.9 or later)"
    # judged against the peers like every dtype; where it was left out the table says why, once
    nodes = [[dict(gpu(i), gemm_flops={"bfloat16": 780e12, "fp8": 1300e12}) for i in range(4)] for _ in range(2)]
    nodes[1][2]["gemm_flops"]["fp8"] = 700e12
    slow = by_check(judge_devices(facts(nodes)))["device.gemm.fp8"]
    assert slow.status is Status.FAIL and slow.nodes == ["n2"] and slow.evidence[0].startswith(
        "GPU 2 on n2 (00000000:1A:00.0): 700.0 TFLOPS, 54% of its 7 peers' 1,300.0")
    a100 = [[dict(gpu(0), name="NVIDIA A100-SXM4-80GB", not_measured={"fp8": "GPU 0 has compute capability 8.0"})]
            for _ in range(2)]
    shown = table(facts(a100), "plain")
    assert shown[-1] == "fp8 not measured on n[1-2]: GPU 0 has compute capability 8.0"
    assert "fp8" not in shown[0]


def test_an_fp8_matmul_that_fails_leaves_the_gpu_measured_in_every_other_dtype_and_its_copies(monkeypatch):
    import contextlib
    import threading
    import types

    from clustercheck.onnode import device_probe

    def gemm(torch, device, dtype, size, budget, sync):
        if dtype == "e4m3":
            raise RuntimeError("CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling cublasLtMatmul\nmore")
        return 1e15

    fake = types.SimpleNamespace(float8_e4m3fn="e4m3", float32="f32", bfloat16="bf16", float16="f16",
                                 backends=types.SimpleNamespace(cuda=types.SimpleNamespace(matmul=types.SimpleNamespace())),
                                 cuda=types.SimpleNamespace(get_device_name=lambda i: "NVIDIA H100 80GB HBM3",
                                                            device=lambda i: contextlib.nullcontext(),
                                                            synchronize=lambda *a: None, get_device_properties=None),
                                 empty=lambda *a, **k: None, uint8="u8")
    monkeypatch.setattr(device_probe, "gemm_rate", gemm)
    monkeypatch.setattr(device_probe, "checksum", lambda torch, device, dtype: f"sum-{dtype}")
    monkeypatch.setattr(device_probe, "copy_rate", lambda *a: 2e12)
    # two GPUs in step (one barrier per dtype): GPU 1's fp8 fails, GPU 0's runs
    results, phase = {}, threading.Barrier(2)
    good = dict(vars(fake), float8_e4m3fn="e4m3-ok")
    threads = [threading.Thread(target=lambda i=i, t=t: results.__setitem__(i, device_probe.measure_gpu(
        types.SimpleNamespace(**t), i, {"size": 0}, 0.01, phase, device_probe.GPU_DTYPES + ("fp8",))))
        for i, t in ((0, good), (1, vars(fake)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    found = results[1]
    assert "error" not in found and sorted(found["gemm_flops"]) == sorted(device_probe.GPU_DTYPES)
    assert found["copy_bytes_s"] == found["h2d_bytes_s"] == 2e12 and "fp8" not in found["checksum"]
    assert found["not_measured"] == {"fp8": "torch._scaled_mm failed: CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when "
                                             "calling cublasLtMatmul"}
    assert results[0]["gemm_flops"]["fp8"] == 1e15 and "not_measured" not in results[0]
    # judged: the GPU whose peer ran fp8 is not known good (UNKNOWN, never OK)
    for index, entry in results.items():
        entry.update(pci_bus_id=f"00000000:{0x18 + index:02X}:00.0", samples=[])
    [unknown] = [f for f in judge_devices(facts([list(results.values())])) if f.check == "device.unmeasured"]
    assert unknown.status is Status.UNKNOWN and unknown.nodes == ["n1"]
    assert unknown.evidence[0].startswith("GPU 1 on n1 (00000000:19:00.0): torch._scaled_mm failed")


def test_driver_610_nests_the_power_limits_and_the_why_keeps_its_watts():
    """Issue 35: driver 610 moved the limits under "GPU Ceiling Power Limit"; 590 and 470 as they were."""
    from clustercheck.onnode.gpusample import smi_q_samples
    from clustercheck.stages.device.facts import Device
    from clustercheck.stages.device.rules import why_slow
    [new] = smi_q_samples(_recorded("nvidia-smi", "q-rtx2080super-driver-610-load.txt"))
    assert (new["power_w"], new["power_limit_w"], new["sm_mhz"], new["pcie_gen"]) == (97.75, 250.0, 2070, 3)
    assert "98 W of 250 W" in why_slow(Device("n1", 0, "cuda", "RTX 2080 SUPER", samples=[new]))
    [h200] = smi_q_samples(_recorded("nvidia-smi", "q-h200-driver-590-load.txt"))
    assert (h200["power_w"], h200["power_limit_w"]) == (625.24, 700.0)
    [old] = smi_q_samples(_recorded("nvidia-smi", "q-gtx680-driver-470-gls.txt"))    # every power field N/A
    assert "power_w" not in old and "power_limit_w" not in old and old["temperature_c"] == 35


def test_nvbandwidth_v0_1_self_copy_diagonal_is_no_link():
    """Issue 35: v0.1 prints 0.00 for a GPU to itself; no GPU is judged against itself."""
    v01 = _recorded("nvbandwidth", "d2d-write-ce-8gpu-v0.1-readme.txt")
    cluster = facts([[gpu(i) for i in range(8)] for _ in range(3)])
    for doc in cluster.documents.values():
        doc["nvbandwidth"] = v01
    found = by_check(judge_devices(cluster))
    assert "device.links" not in found
    # 276 GB/s is below an H100's published 335: each GPU is said for its 7 peers, never for itself
    lines = [line for line in found["device.expected"].evidence if "copies to GPU" in line]
    assert len(lines) == 24 and all(line.count(",") == 6 for line in lines), lines[:2]
    assert "copies to GPU 0, 1, 2, 4, 5, 6, 7 below" in lines[3]
    assert cluster.peers_matrix("n1")[3][3] is None and cluster.peers_matrix("n1")[3][1] == 276.62e9


def test_nvbandwidth_v0_2_is_read_and_an_output_that_cannot_be_read_is_unknown():
    from clustercheck.stages.device.nvbandwidth import figures, version
    v02 = _recorded("nvbandwidth", "all-8xh800-v0.2.txt")
    assert version(v02) == "v0.2" and figures(v02)["h2d"][0] == 55.28 and figures(v02)["peers"][0][1] == 172.16
    cluster = facts([[gpu(i) for i in range(8)] for _ in range(2)])
    cluster.documents["n2"]["nvbandwidth"] = v02.split("Running host_to_device")[0] + "ERROR: cudaErrorNoDevice\n"
    unread = [f for f in judge_devices(cluster) if f.check == "device.unmeasured"]
    assert [(f.status, f.nodes) for f in unread] == [(Status.UNKNOWN, ["n2"])]
    assert "nvbandwidth v0.2 on n2: its output could not be read" in unread[0].summary


def test_dcgm_a_cut_table_is_read_row_by_row_its_error_named_with_its_gpu_and_the_cut_unknown():
    """Issue 42: a log excerpt or a truncated capture of dcgmi diag's table. The cut variants are made here from
    the recorded outputs; an Error or Warning row is read even when its test's row or the table's ends are gone."""
    from clustercheck.outputs.dcgm import judge_dcgm
    lines = _dcgm("diag-r1-text-3.1.8-8xh200-persistence-error.txt").splitlines()
    error = next(i for i, line in enumerate(lines) if line.startswith("| Error"))
    excerpt = "\n".join(lines[error:error + 5])          # the Error row and four of its continuation rows, no more
    [setting, cut] = judge_dcgm("n1", {"level": 1, "output": excerpt})
    assert setting.status is Status.WARN and setting.nodes == ["n1"]
    assert setting.summary == ("dcgmi diag -r 1: (a test whose row was cut off) failed on n1, GPU 0, 1 (a setting, "
                               "not the hardware: persistence mode is off)")
    assert setting.evidence[0].startswith("Persistence mode for GPU 0 is currently disabled.")
    assert cut.status is Status.UNKNOWN and cut.summary == ("dcgmi diag -r 1 on n1: its table was cut (its start and "
                                                           "its end missing); what it shows is judged, the rest was "
                                                           "not seen")

    text = _dcgm("diag-r3-text-3.3.9-4xa10g-targeted-power-fail.txt")
    at = text.index("d power minimum target_power_min_ratio")
    truncated = text[:at + 20]                            # a capture that stopped mid-row, inside the message
    power, *rest = judge_dcgm("n2", {"level": 3, "output": truncated})
    assert power.status is Status.FAIL and power.summary == ("dcgmi diag -r 3: Targeted Power failed on n2, GPU 1 "
                                                             "(a hardware fault)")
    assert power.evidence[0] == "GPU 1 Max power of 224.1 did not reach desired power minimum targ"
    assert [f.summary for f in rest if f.status is Status.UNKNOWN][-1].startswith(
        "dcgmi diag -r 3 (DCGM 3.3.9) on n2: its table was cut (its end missing)")

    passes = "\n".join(text.splitlines()[:12])            # only passes before the cut: never READY on its own
    shown = judge_dcgm("n3", {"level": 3, "output": passes})
    assert {f.status for f in shown} == {Status.OK, Status.UNKNOWN}
