"""Node health on recorded outputs that earlier versions read wrong (tests/data/README.md names every
source): an Xid 45 that names its cause, a `topo -m` matrix cut short, node-check without the topology
judges, InfiniBand counters judged as absolute counts, PCIe cards held to SXM bandwidth, Xid events
past the probe's cap, an Xid line without a time, and "CUDA Version: Not Found" compared as a version.

Where a test varies a recording (a counter raised, a matrix cut, a GPU renamed) the change is written
out here; the files are as published.
"""

import os
import re

from clustercheck.core.result import Status, run_judges
from clustercheck.core.thresholds import Config
from clustercheck.onnode import fabric, kernlog
from clustercheck.stages.bench.expected import published
from clustercheck.stages.env.facts import env_facts
from clustercheck.stages.env.judges import evaluate
from clustercheck.stages.env.rules import EnvContext
from clustercheck.stages.env.topology import parse_topo_m
from clustercheck.tools import node_health
from tests.test_env_rules import DATA, bad, cluster, gpu_section
from tests.test_node_health import judged, recorded, topo_doc, with_gpus, with_ports

XID45 = "kern-xid45-caused-by-ogkm-1150.txt"   # NVIDIA/open-gpu-kernel-modules#1150: NVLink errors on four GPUs


def node_check(probed):
    """What `clustercheck node-check` judges, over recorded probe documents."""
    facts = env_facts(probed)
    return run_judges(node_health.JUDGES, EnvContext(facts.probed, facts.values, Config().env))


# ---- Xid ---------------------------------------------------------------------------------------------
def test_an_xid_45_is_judged_by_the_xid_its_line_names_as_the_cause():
    """Was: Xid 45 (preemptive cleanup) was OK whatever caused it; a node whose channels were killed by
    NVLink errors (Xid 149, 145 named in the lines) was READY with "no Xid events that need action"."""
    log = recorded("kmsg", XID45).splitlines()
    events, _ = kernlog.xid_events(log)
    assert [(e["xid"], e["pci"], e["count"], e["causes"]) for e in events] == [
        (45, "0000:dc:00", 2, [149]), (45, "0000:ed:00", 2, [145]), (45, "0000:ba:00", 2, [145]),
        (45, "0000:97:00", 1, [145])]
    findings = judged(cluster(change=with_gpus(node=2, log=log)))
    assert not [f for f in findings if f.check == "gpu.health"]
    failed = [f for f in bad(findings) if f.check == "gpu.xid"]
    assert failed and all(f.status is Status.FAIL and f.nodes == ["node03"] for f in failed)
    gpu4 = [f for f in failed if "GPU 4 (0000:97:00)" in f.summary]
    assert gpu4 and "caused by Xid 145 (NVLink RLW error)" in gpu4[0].summary
    assert "NVLink" in gpu4[0].summary.split("action: ")[1]
    assert any("caused by Xid 149 (NVLink NETIR error)" in f.summary for f in failed)
    # An Xid 45 that names no cause stays what the catalogue says: nothing to do.
    plain = ["[Sun Feb 23 16:24:18 2025] NVRM: Xid (PCI:0000:97:00): 45, pid=1818987, name=python3, Ch 00000003"]
    assert not [f for f in judged(cluster(change=with_gpus(node=2, log=plain))) if f.check == "gpu.xid"]


def test_an_xid_line_without_a_time_is_not_shown_as_none():
    """Was: the recorded lines (journal text without a time stamp) printed "Xid 45 x2 (None .. None)"."""
    log = recorded("kmsg", XID45).splitlines()
    findings = bad(judged(cluster(change=with_gpus(node=0, log=log))))
    texts = [line for f in findings for line in [f.summary, *f.evidence]]
    assert texts and not [t for t in texts if "None" in t]
    assert any("Xid 45 x2: " in t for t in texts)


def test_xid_events_past_the_probes_cap_are_still_judged(monkeypatch):
    """Was: past the first 256 distinct (Xid, GPU) pairs an event was only counted, and the count was
    never shown. The cap is lowered to 2 here so that recorded logs reach it: an Xid 13/43 storm on one
    GPU first, then the Xid 119 of another GPU, which no longer gets a pair of its own."""
    monkeypatch.setattr(kernlog, "MAX_DISTINCT", 2)
    log = recorded("kmsg", "dmesg-iso-xid13-43-gpud.txt").splitlines() + \
        recorded("kmsg", "dmesg-T-xid119-gpud.txt").splitlines()
    events, not_kept = kernlog.xid_events(log)
    assert [(e["xid"], e["pci"]) for e in events] == [(13, "0000:38:00"), (43, "0000:38:00")]
    assert [(e["xid"], e["count"]) for e in not_kept] == [(119, 5)]

    def node2(i, doc):
        with_gpus()(i, doc)
        if i == 1:
            doc["kernel_log"].update(xid=events, xid_not_kept=not_kept)
    [fail] = [f for f in bad(judged(cluster(change=node2))) if f.status is Status.FAIL]
    assert fail.nodes == ["node02"] and "Xid 119 x5" in fail.summary and "0000:9b:00" in fail.summary
    assert "past the probe's cap of distinct Xid and GPU pairs" in fail.summary


# ---- topology ------------------------------------------------------------------------------------------
def test_a_topo_matrix_cut_inside_the_gpu_rows_is_said_not_checked():
    """Was: a matrix with 8 GPUs in its header and 4 rows, the last one short, was accepted: no finding.
    The H200 recording cut after GPU3's fifth cell (header, GPU0-GPU2 whole, GPU3 cut)."""
    lines = recorded("topo", "topo-m-8xh200-10nic.txt").splitlines()
    cut = "\n".join(lines[:4] + ["\t".join(lines[4].split("\t")[:5])])
    assert lines[4].startswith("GPU3\t") and lines[5].startswith("GPU4\t")

    def cut_on(node):
        def apply(i, doc):
            with_gpus()(i, doc)
            doc["gpu"]["topology"] = {"topo_m": cut if i == node else recorded("topo", "topo-m-8xh200-10nic.txt")}
        return apply
    for probed, name in ((cluster(num_nodes=1, change=cut_on(0)), "node01"), (cluster(change=cut_on(1)), "node02")):
        findings = judged(probed)
        [unknown] = [f for f in findings if f.check == "unchecked.GPU_topology"]
        assert unknown.status is Status.UNKNOWN and unknown.nodes == [name]
        assert "4 of 8 GPU rows; GPU3's row has 4 of its 18 cells" in unknown.evidence[0]
        assert not [f for f in bad(findings) if f.check == "gpu.topology.same"]   # not blamed on the wiring
    assert parse_topo_m(cut).cut
    assert not parse_topo_m(recorded("topo", "topo-m-dgx-a100.txt")).cut


def test_node_check_runs_the_topology_and_nvlink_judges():
    """Was: node-check never ran them: an inactive NVLink was FAIL in env and OK in node-check."""
    def apply(i, doc):
        with_gpus()(i, doc)
        topo_doc("topo-m-8xh200-10nic.txt", "nvlink-s-8xv100-inactive.txt")(doc)
    probed = cluster(num_nodes=1, change=apply)
    [nvlink] = [f for f in node_check(probed) if f.check == "gpu.nvlink"]
    assert nvlink.status is Status.FAIL and "GPU 3 links 3, 5" in nvlink.evidence[0]
    code, line = node_health.verdict(node_check(probed))
    assert code == 2 and "GPU 3 links 3, 5" in line


# ---- InfiniBand counters -------------------------------------------------------------------------------
def test_ib_counters_are_judged_against_traffic_and_link_downs_come_first():
    """Was: counters judged as absolute counts: 15 buffer overruns in 3e11 packets warned on every port,
    and the noise crowded mlx5_1's link_downed 255 out of the evidence and the Nagios line. The recorded
    tree as published, then with mlx5_5's port_rcv_errors raised from 14 to 40000000 (one packet in
    ~8000 received in error)."""
    tree = fabric.collect_infiniband(os.path.join(DATA, "sysfs", "gpud-h100"))
    mlx5_0 = [p for p in tree if p["device"] == "mlx5_0"][0]
    assert mlx5_0["counters"]["port_rcv_packets"] == 317548853677
    assert mlx5_0["counters"]["excessive_buffer_overrun_errors"] == 15
    [counters] = [f for f in bad(node_check(cluster(num_nodes=1, change=with_ports(lambda i: tree))))
                  if f.check == "rdma.counters"]
    assert counters.evidence == ["node01: mlx5_1/1: link_downed 255"]

    def raised(i):
        ports = [dict(p, counters=dict(p["counters"])) for p in tree]
        [p for p in ports if p["device"] == "mlx5_5"][0]["counters"]["port_rcv_errors"] = 40000000
        return ports
    findings = node_check(cluster(num_nodes=1, change=with_ports(raised)))
    [counters] = [f for f in bad(findings) if f.check == "rdma.counters"]
    assert counters.evidence[0].startswith("node01: mlx5_1/1: link_downed 255; mlx5_5/1: port_rcv_errors "
                                           "40000000 (1.3e-04 of 317548853677 packets received)")
    _, line = node_health.verdict(findings)
    assert line.startswith("CLUSTERCHECK WARNING - node01: mlx5_1/1: link_downed 255; mlx5_5/1: port_rcv_errors")
    assert "buffer_overrun" not in line


# ---- bandwidth figures, versions ------------------------------------------------------------------------
def test_a_pcie_card_is_not_held_to_the_sxm_figure():
    """Was: "A100" in the name picked the 8x A100 SXM figure (230 GB/s) for PCIe cards. The name is the one
    `nvidia-smi -L` printed on an ESXi host's A100 PCIe card, given to the 8 GPUs of a recorded A100."""
    name = re.match(r"GPU 0: (.+) \(UUID", recorded("nvidia-smi", "smi-L-a100-pcie-esxi.txt")).group(1)
    assert name == "NVIDIA A100-PCIE-40GB"

    def gpus(xml, model=None):
        def apply(i, doc):
            doc["gpu"] = gpu_section(xml)
            for gpu in doc["gpu"]["gpus"]:
                gpu["name"] = model or gpu["name"]
        return cluster(num_nodes=1, change=apply)
    assert published(gpus("a100-driver-570.xml", name), "nccl", ring=False) is None
    assert published(gpus("a100-driver-570.xml"), "nccl", ring=False).gbps == 230.0   # NVIDIA A100-SXM4-40GB
    assert published(gpus("h100-x8-driver-580.xml"), "nccl", ring=False).gbps == 480.0   # H100 80GB HBM3


def test_cuda_version_not_found_is_no_cuda_driver_not_a_version():
    """Was: nvidia-smi's "Not Found" (no CUDA driver library, here a vGPU host's) was compared as a
    version: "CUDA (driver) differs: node02 has Not Found"."""
    value = re.search(r'"cuda_version": "([^"]*)"', recorded("nvidia-smi", "xq-quadro-p6000-cuda-not-found.txt"))
    assert value.group(1) == "Not Found"

    def node2(i, doc):
        with_gpus()(i, doc)
        if i == 1:
            doc["gpu"]["cuda_driver"] = value.group(1)
    result = evaluate(cluster(change=node2), Config())
    assert result.values["node02"]["CUDA (driver)"] == "not installed"
    [finding] = [f for f in result.findings if f.check == "same.CUDA (driver)"]
    assert finding.summary == "CUDA (driver) is not installed on node02" and "Not Found" not in str(finding)
