"""Node health read from outputs recorded on real GPU and InfiniBand machines (tests/data/README.md):
Xid storms, ECC counters of current drivers, MIG, what could not be read, RDMA ports, GPU topology.

Each test names the defect it guards against; where a test varies a recording (one counter
raised, a port taken down) the change is written out here, the file itself is as published.
"""

import os

import pytest

from clustercheck.core.result import Status, verdict_line
from clustercheck.core.thresholds import Config
from clustercheck.onnode import fabric, gpuprobe, kernlog
from clustercheck.stages.env.judges import evaluate
from clustercheck.stages.env.topology import parse_nvlink_s, parse_topo_m
from tests.test_env_rules import DATA, bad, cluster, gpu_section


def recorded(*parts):
    with open(os.path.join(DATA, *parts)) as handle:
        return handle.read()


def judged(probed):
    return evaluate(probed, Config()).findings


def with_gpus(xml="h100-x8-driver-580.xml", node=None, change=None, log=None):
    """Every node gets the recorded GPUs; node `node` also gets change(doc) and kernel log `log`."""
    def apply(i, doc):
        doc["gpu"] = gpu_section(xml)
        doc["kernel_log"] = {"readable": True, "source": "/dev/kmsg", "xid": []}
        if i == node:
            if log is not None:
                doc["kernel_log"]["xid"] = kernlog.xid_events(log)[0]
            if change:
                change(doc)
    return apply


# ---- Xid ---------------------------------------------------------------------------------
def test_a_critical_xid_is_not_hidden_by_a_storm_after_it():
    """Was: only the last 20 Xid lines were kept; a storm of Xid 13/43 pushed the Xid 119 out."""
    critical = recorded("kmsg", "dmesg-T-xid119-gpud.txt").splitlines()
    storm = recorded("kmsg", "dmesg-iso-xid13-43-gpud.txt").splitlines()
    log = critical + storm + storm   # 34 routine lines after the critical ones
    events, _ = kernlog.xid_events(log)
    assert [(e["xid"], e["pci"], e["count"]) for e in events] == [(119, "0000:9b:00", 5), (13, "0000:38:00", 32),
                                                                  (43, "0000:38:00", 2)]
    assert events[0]["first"] == "2025-02-23T16:24:18" and events[0]["last"] == "2025-02-23T16:30:13"
    findings = bad(judged(cluster(change=with_gpus(node=2, log=log))))
    fail = [f for f in findings if f.status is Status.FAIL]
    assert len(fail) == 1 and fail[0].nodes == ["node03"] and fail[0].check == "gpu.xid"
    assert "0000:9b:00" in fail[0].summary and "Xid 119 x5" in fail[0].summary
    assert "reset the GPU" in fail[0].summary
    warn = [f for f in findings if f.status is Status.WARN]
    assert [f.check for f in warn] == ["gpu.xid"] and "Xid 13 x32" in warn[0].evidence[0]


@pytest.mark.parametrize("name, stamp", [
    ("dmesg-iso-xid13-43-gpud.txt", "2025-01-21T04:41:44"),       # dmesg --time-format iso
    ("kern-log-xid13-relion-436.txt", "Feb 15 17:37:45"),           # syslog's kern.log
    ("journalctl-xid79-ogkm-1010.txt", "april 24 16:22:15"),        # journalctl, localised month
    ("dmesg-xid13-a800-vllm-5901.txt", "93297.027938 s after boot"),  # plain dmesg
])
def test_xid_time_read_in_every_log_format(name, stamp):
    events, _ = kernlog.xid_events(recorded("kmsg", name).splitlines())
    assert events[0]["first"] == stamp


def test_a_kmsg_record_file_is_read_by_records(tmp_path):
    """The sandbox binds a saved /dev/kmsg over the node's: records arrive in chunks, not one per read."""
    lines = recorded("kmsg", "dmesg-xid13-a800-vllm-5901.txt").splitlines()
    path = tmp_path / "kmsg"
    path.write_text("".join(f"4,{i},{93297027938 + i},-;{line.split('] ', 1)[1]}\n SUBSYSTEM=pci\n"
                            for i, line in enumerate(lines * 3000)))
    read, first = kernlog.read_kmsg(path=str(path))
    assert len(read) == len(lines) * 3000 and first == 0
    events, _ = kernlog.xid_events(read)
    assert events[0]["count"] == len(lines) * 3000


def test_events_before_the_driver_last_loaded_are_history():
    log = recorded("kmsg", "dmesg-T-xid119-gpud.txt").splitlines()
    reload = ["[Sun Feb 23 17:00:00 2025] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.183.01"]
    assert kernlog.xid_events(kernlog.since_driver_load(log + reload))[0] == []
    assert len(kernlog.xid_events(kernlog.since_driver_load(log))[0]) == 1
    boots = ["Feb 20 10:00:00 n1 kernel: [  0.000000] Linux version 5.15.0-112-generic",
             "Feb 20 11:00:00 n1 kernel: [3600.0] NVRM: Xid (PCI:0000:9b:00): 79, GPU has fallen off the bus.",
             "Feb 21 10:00:00 n1 kernel: [  0.000000] Linux version 5.15.0-112-generic"]
    assert kernlog.since_boot(boots) == boots[2:]


def test_xid_154_to_none_is_ok_and_an_unknown_xid_is_not():
    from clustercheck.node.xid import status_of
    assert status_of(154, line="GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)") is Status.OK
    assert status_of(154, line="GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)") is Status.FAIL
    assert status_of(9999) is Status.WARN


# ---- ECC, retirement, remapping ---------------------------------------------------------------
def test_sram_secded_errors_of_current_drivers_are_counted():
    """Was: only tags ending in "uncorrectable" were read; driver 580 splits SRAM into _parity and _secded."""
    xml = recorded("nvidia-smi", "h100-x8-driver-580.xml")
    gpus = gpuprobe.parse_nvidia_smi_xml(xml)["gpus"]
    assert len(gpus) == 8 and set(gpus[0]["ecc_uncorrectable_volatile"]) == {
        "dram_uncorrectable", "sram_uncorrectable_parity", "sram_uncorrectable_secded"}
    # GPU 3's first (volatile) SECDED counter raised to 2, as a node that hit SRAM errors prints it.
    start = xml.index('<gpu id="00000000:86:00.0">')
    at = xml.index("<sram_uncorrectable_secded>0<", start)
    raised = xml[:at] + "<sram_uncorrectable_secded>2<" + xml[at + len("<sram_uncorrectable_secded>0<"):]
    gpu3 = gpuprobe.parse_nvidia_smi_xml(raised)["gpus"][3]
    assert gpu3["ecc_uncorrected_volatile"] == 2

    def node2(doc):
        doc["gpu"] = gpuprobe.parse_nvidia_smi_xml(raised)
    [finding] = bad(judged(cluster(change=with_gpus(node=1, change=node2))))
    assert finding.status is Status.FAIL and finding.check == "gpu.memory" and finding.nodes == ["node02"]
    assert finding.summary.startswith("node02 GPU 3 (0000:86:00): 2 uncorrectable ECC errors")
    assert "sram_uncorrectable_secded 2" in finding.summary


def test_one_remap_incident_is_one_finding_from_counters_and_xid():
    """Was: a pending remap warned from the counters and failed from the Xid 63 line."""
    def remap(doc):
        doc["gpu"]["gpus"][4].update(remapped_pending=True, remapped_uncorrectable=1)
    log = ["[Sun Feb 23 16:24:18 2025] NVRM: Xid (PCI:0000:97:00): 63, pid=0, Row Remapper: New row marked for "
           "remapping, reset gpu to activate."]   # the wording of r535+ drivers for Xid 63
    findings = bad(judged(cluster(change=with_gpus(node=0, change=remap, log=log))))
    assert [(f.check, f.status) for f in findings] == [("gpu.memory", Status.FAIL)]
    assert "GPU 4 (0000:97:00)" in findings[0].summary and "pending" in findings[0].summary
    assert any("Xid 63" in e for e in findings[0].evidence)


def test_lifetime_errors_and_retired_pages_are_judged_not_called_clean():
    """Was: aggregate (lifetime) double-bit errors and retired pages passed while the OK line said
    "no ECC errors"."""
    def history(doc):
        doc["gpu"]["gpus"][0].update(ecc_uncorrected_aggregate=3, retired_pages_double_bit=2)
    [finding] = bad(judged(cluster(change=with_gpus(node=3, change=history))))
    assert finding.status is Status.WARN and finding.nodes == ["node04"]
    assert "3 uncorrectable ECC errors in the GPU's lifetime" in finding.evidence[0]
    assert "2 pages retired" in finding.evidence[1]


def test_pascal_retired_pages_at_the_replacement_limit_fail():
    [gpu] = gpuprobe.parse_nvidia_smi_xml(recorded("nvidia-smi", "tesla-p100.xml"))["gpus"]
    assert gpu["retired_pages_double_bit"] == 0 and gpu["retired_pages_pending"] is False

    def worn(doc):
        doc["gpu"]["gpus"][0]["retired_pages_double_bit"] = 60
    [finding] = bad(judged(cluster(change=with_gpus(node=1, change=worn))))
    assert finding.status is Status.FAIL and "replacement limit" in finding.summary


# ---- MIG --------------------------------------------------------------------------------------
@pytest.mark.parametrize("xml", ["a100-80gb-mig-driver-535.xml", "a100-sxm4-mig.xml"])
def test_mig_enabled_is_not_ready_for_training(xml):
    """Was: MIG mode was not read; an A100 with MIG on was judged ready."""
    def mig(i, doc):
        doc["gpu"] = gpu_section("a100-driver-570.xml" if i else xml, copies=1)
        doc["kernel_log"] = {"readable": True, "xid": []}
    findings = bad(judged(cluster(change=mig)))
    checks = {f.check: f for f in findings}
    assert checks["gpu.mig"].status is Status.FAIL and checks["gpu.mig"].nodes == ["node01"]
    assert "-mig 0" in checks["gpu.mig"].remedy


# ---- unknown is never OK ------------------------------------------------------------------------
def test_nvidia_smi_printing_garbage_is_unknown_not_healthy(tmp_path, monkeypatch):
    """Was: XML that failed to parse dropped every GPU check and raised no finding."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'Failed to initialize NVML: Driver/library version mismatch'\n"
                   "echo '<nvidia_smi_log><gpu>'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setattr(gpuprobe, "gpus_from_nvml", lambda: (_ for _ in ()).throw(ImportError()))
    section = gpuprobe.collect_gpus({})
    assert section["gpus"] == [] and "not XML" in section["error"]

    def broken(i, doc):
        doc["gpu"] = section if i == 1 else gpu_section("h100-x8-driver-580.xml")
        doc["kernel_log"] = {"readable": True, "xid": []}
    findings = judged(cluster(change=broken))
    [unknown] = [f for f in findings if f.status is Status.UNKNOWN]
    assert unknown.nodes == ["node02"] and unknown.summary.startswith("could not check the GPUs on node02")
    assert not [f for f in findings if f.status is Status.FAIL]
    assert verdict_line(findings).startswith("UNKNOWN")
    assert Status.UNKNOWN.exit_code == 3


def test_nvidia_smi_finding_no_devices_is_no_gpus_not_unknown(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'No devices were found'\nexit 6\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setattr(gpuprobe, "gpus_from_nvml", lambda: (_ for _ in ()).throw(ImportError()))
    section = gpuprobe.collect_gpus({})
    assert section["gpus"] == [] and "error" not in section and "No devices were found" in section["reason"]


def test_odd_documents_do_not_crash_the_judges():
    def odd(i, doc):
        doc["gpu"] = gpu_section("h100-x8-driver-580.xml")
        doc["gpu"]["gpus"].append(None)
        doc["kernel_log"] = {"readable": True, "xid": [None, {"xid": 13, "pci": None, "count": None},
                                                         {"xid": "13"}]}
    findings = judged(cluster(change=odd))
    assert [f.check for f in bad(findings)] == ["gpu.xid"] * 4


def test_the_ok_line_says_what_was_read_for_gpus_without_ecc():
    def consumer(i, doc):
        doc["gpu"] = gpu_section("rtx-4090-driver-535.xml", copies=1)
        doc["kernel_log"] = {"readable": True, "xid": [], "source": "/dev/kmsg", "from": "2026-11-20T10:00:00"}
    [ok] = [f for f in judged(cluster(change=consumer)) if f.check == "gpu.health"]
    assert "MIG" not in ok.summary and "ECC" not in ok.summary and "row remaps" in ok.summary
    assert "node01: ECC off or not supported on GPU 0" in ok.evidence
    assert "node01: the kernel log (/dev/kmsg) reaches back only to 2026-11-20T10:00:00" in ok.evidence


def test_an_unreadable_kernel_log_is_not_no_xid_events():
    def locked(i, doc):
        doc["gpu"] = gpu_section("h100-x8-driver-580.xml")
        doc["kernel_log"] = {"readable": False, "reason": "/dev/kmsg: Operation not permitted", "xid": []}
    findings = judged(cluster(change=locked))
    [unknown] = [f for f in findings if f.status is Status.UNKNOWN]
    assert unknown.nodes == ["node01", "node02", "node03", "node04"]
    assert "could not check Xid events on node[01-04]" in unknown.summary
    health = [f for f in findings if f.check == "gpu.health"]
    assert health and "kernel log" not in health[0].summary   # the OK line claims only what was seen


def test_a_probe_section_that_failed_is_unknown():
    def failed(i, doc):
        if i == 0:
            doc["missing"] = {"infiniband": "PermissionError: [Errno 13] Permission denied: '/sys/class/infiniband'"}
    [unknown] = [f for f in judged(cluster(change=failed)) if f.status is Status.UNKNOWN]
    assert unknown.nodes == ["node01"] and "infiniband" in unknown.summary


# ---- topology --------------------------------------------------------------------------------------
def topo_doc(topo, nvlink=None):
    def apply(doc):
        doc["gpu"]["topology"] = {"topo_m": recorded("topo", topo), "nvlink_s": recorded("topo", nvlink)
                                  if nvlink else ""}
    return apply


def test_topo_m_read_in_both_layouts():
    h200 = parse_topo_m(recorded("topo", "topo-m-8xh200-10nic.txt"))
    assert h200.nics == [f"mlx5_{i}" for i in range(10)]       # NIC0.. named by the NIC Legend
    assert h200.links["GPU0"]["GPU7"] == "NV18" and h200.links["GPU3"]["mlx5_0"] == "PIX"
    assert h200.numa["GPU4"] == "1" and h200.cpus["GPU4"] == "64-127,192-255"
    dgx = parse_topo_m(recorded("topo", "topo-m-dgx-a100.txt"))
    assert len(dgx.nics) == 12 and dgx.nearest_nic("GPU6") == "PXB" and dgx.links["GPU0"]["GPU1"] == "NV12"
    pcie = parse_topo_m(recorded("topo", "topo-m-2xa100-pcie.txt"))
    assert pcie.links["GPU0"]["GPU1"] == "SYS" and pcie.nearest_nic("GPU1") == "NODE"


def test_a_node_wired_differently_is_named():
    def apply(i, doc):
        with_gpus()(i, doc)
        topo_doc("topo-m-dgx-a100.txt" if i == 2 else "topo-m-8xh200-10nic.txt")(doc)
    findings = bad(judged(cluster(change=apply)))
    [differs] = [f for f in findings if f.check == "gpu.topology.same"]
    assert differs.nodes == ["node03"] and "GPU0-GPU1 NV12 (others NV18)" in differs.evidence[0]


def test_inactive_nvlinks_fail_naming_the_gpus():
    def apply(i, doc):
        with_gpus()(i, doc)
        topo_doc("topo-m-8xh200-10nic.txt", "nvlink-s-8xv100-inactive.txt" if i == 1 else "nvlink-s-8xa100.txt")(doc)
    findings = bad(judged(cluster(change=apply)))
    [nvlink] = [f for f in findings if f.check == "gpu.nvlink"]
    assert nvlink.status is Status.FAIL and nvlink.nodes == ["node02"]
    assert "GPU 3 links 3, 5; GPU 4 link 1; GPU 5 links 0, 4; GPU 6 link 1" in nvlink.evidence[0]
    assert parse_nvlink_s(recorded("topo", "nvlink-s-8xa100.txt"))[7] == {i: True for i in range(12)}


def test_a_gpu_whose_nearest_nic_is_across_the_cpus_warns():
    """The PCIe box's recorded matrix with its mlx5_0 column and row cut out (as when that NIC is
    not seen): GPU0's only NIC is then across the CPU interconnect."""
    lines = recorded("topo", "topo-m-2xa100-pcie.txt").splitlines()
    cut = "\n".join("\t".join(c for i, c in enumerate(line.split("\t")) if i != 3) for line in lines
                    if not line.startswith("mlx5_0"))
    assert parse_topo_m(cut).nics == ["mlx5_1"]

    def apply(i, doc):
        with_gpus(xml="a100-driver-570.xml")(i, doc)
        doc["gpu"]["topology"] = {"topo_m": cut if i == 1 else recorded("topo", "topo-m-2xa100-pcie.txt")}
    findings = bad(judged(cluster(change=apply)))
    [far] = [f for f in findings if f.check == "gpu.topology.nic"]
    assert far.status is Status.WARN and far.nodes == ["node02"] and "GPU0: nearest NIC" in far.evidence[0]
    assert not [f for f in judged(cluster(change=with_gpus(xml="a100-driver-570.xml")))
                if f.check == "gpu.topology.nic"]


def test_a_gpu_whose_links_are_all_inactive_fails():
    """Current drivers print one line instead of the links (leptonai/gpud#1085, a B200 in production)."""
    def apply(i, doc):
        with_gpus()(i, doc)
        doc["gpu"]["topology"] = {"nvlink_s": recorded("topo", "nvlink-s-b200-all-inactive-gpud-1085.txt" if i == 3
                                                       else "nvlink-s-8xa100.txt")}
    [nvlink] = [f for f in bad(judged(cluster(change=apply))) if f.check == "gpu.nvlink"]
    assert nvlink.nodes == ["node04"] and "GPU 2 all links" in nvlink.evidence[0]
    # A cluster where no GPU has NVLink (cards without a bridge) has nothing to compare: no finding, no claim.
    def none(i, doc):
        with_gpus()(i, doc)
        doc["gpu"]["topology"] = {"nvlink_s": recorded("topo", "nvlink-s-b200-all-inactive-gpud-1085.txt")}
    assert [f for f in judged(cluster(change=none)) if f.check == "gpu.nvlink"] == []


# ---- InfiniBand and RoCE -----------------------------------------------------------------------
def ports_from_ibstat(text):
    """The probe's port entries from a recorded `ibstat`: the same attributes sysfs holds (state,
    physical state, rate, link layer, CA type, firmware), since no public sysfs tree has a down port."""
    ports, ca, port = [], {}, None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("CA '"):
            ca = {"device": line[4:-1]}
        elif line.startswith("CA type:"):
            ca["hca_type"] = line.split(":", 1)[1].strip()
        elif line.startswith("Firmware version:"):
            ca["fw_ver"] = line.split(":", 1)[1].strip()
        elif line.startswith("Port ") and line.endswith(":"):
            port = {"device": ca["device"], "port": int(line[5:-1]), "hca_type": ca.get("hca_type"),
                    "fw_ver": ca.get("fw_ver"), "counters": {}}
            ports.append(port)
        elif port is not None and ":" in line:
            key, value = (part.strip() for part in line.split(":", 1))
            if key == "State":
                port["state"] = value.upper()
            elif key == "Physical state":
                port["phys_state"] = value
            elif key == "Rate":
                port["rate"] = f"{value} Gb/sec"
            elif key == "Link layer":
                port["link_layer"] = value
    return ports


def with_ports(node_ports, memlock="unlimited"):
    def apply(i, doc):
        doc["infiniband"] = node_ports(i)
        doc["limits"]["memlock"] = {"soft": memlock, "hard": memlock}
    return apply


def test_ports_down_on_every_node_are_still_a_finding():
    """Was: a down port was flagged only when nodes differed; identical nodes with ports down passed."""
    ports = ports_from_ibstat(recorded("ibstat", "h100-ib-and-roce-some-down-gpud.txt"))
    findings = bad(judged(cluster(change=with_ports(lambda i: ports))))
    [unused] = findings
    assert unused.check == "rdma.port.unused" and unused.status is Status.WARN
    assert unused.nodes == ["node01", "node02", "node03", "node04"]
    assert "RoCE mlx5_2/1 is DOWN (physical: Disabled)" in unused.evidence[0]
    # Named in NCCL_IB_HCA, the same port fails: NCCL would try to use it.
    def wanted(i, doc):
        with_ports(lambda i: ports)(i, doc)
        doc["env"]["NCCL_IB_HCA"] = "mlx5_0,mlx5_2,mlx5_3"
    [fail] = [f for f in bad(judged(cluster(change=wanted))) if f.status is Status.FAIL]
    assert fail.check == "rdma.port.down" and "mlx5_2/1" in fail.evidence[0] and "NCCL_IB_HCA names it" in \
        fail.evidence[0]
    # An exclusion list that names other ports says nothing of these: still unused, not named.
    def other(i, doc):
        with_ports(lambda i: ports)(i, doc)
        doc["env"]["NCCL_IB_HCA"] = "^mlx5_bond"
    assert [(f.check, f.status) for f in bad(judged(cluster(change=other)))] == [("rdma.port.unused", Status.WARN)]
    # Excluded by name, it is no finding at all.
    def excluded(i, doc):
        with_ports(lambda i: ports)(i, doc)
        doc["env"]["NCCL_IB_HCA"] = "^mlx5_2,mlx5_7,mlx5_8"
    assert [f for f in bad(judged(cluster(change=excluded))) if f.check.startswith("rdma")] == []


def test_a_port_down_where_others_are_up_fails_naming_the_node():
    down = ports_from_ibstat(recorded("ibstat", "ib-active-roce-down-mooncake-2039.txt"))
    up = [dict(p, state="ACTIVE", phys_state="LinkUp") for p in down]
    [finding] = bad(judged(cluster(change=with_ports(lambda i: down if i == 2 else up))))
    assert finding.check == "rdma.port.down" and finding.status is Status.FAIL and finding.nodes == ["node03"]
    assert "RoCE mlx5_1/1 is DOWN" in finding.evidence[0]


def test_link_up_without_a_subnet_manager_fails():
    ports = ports_from_ibstat(recorded("ibstat", "ib-down-linkup-network-operator-249.txt"))
    [finding] = bad(judged(cluster(num_nodes=1, change=with_ports(lambda i: ports))))
    assert finding.status is Status.FAIL and "no subnet manager" in finding.evidence[0]


def test_roce_is_reported_as_roce_and_counters_and_firmware_are_judged():
    """Was: a RoCE port counted as InfiniBand; link_downed and error counters were ignored;
    HCA firmware was collected and never compared."""
    tree = fabric.collect_infiniband(os.path.join(DATA, "sysfs", "gpud-h100"))
    bond = [p for p in tree if p["device"] == "mlx5_bond_0"][0]
    assert bond["link_layer"] == "Ethernet" and bond["counters"]["link_downed"] == 0
    assert [p for p in tree if p["device"] == "mlx5_1"][0]["counters"]["link_downed"] == 255

    def ports(i):
        ports = [dict(p) for p in tree]
        if i == 1:   # node02's ConnectX-7s on an older firmware (as recorded on another host: 28.39.1002)
            for p in ports:
                if p["hca_type"] == "MT4129":
                    p["fw_ver"] = "28.39.1002"
        return ports
    probed = cluster(change=with_ports(ports))
    result = evaluate(probed, Config())
    values = result.values["node01"]
    assert values["InfiniBand"] == "8/8 ports active, 400 Gb/sec (4X NDR)"
    assert values["RoCE"] == "1/1 ports active, 200 Gb/sec (2X NDR)"
    checks = {f.check: f for f in bad(result.findings)}
    assert checks["same.HCA firmware"].nodes == ["node02"] and "28.39.1002" in checks["same.HCA firmware"].summary
    counters = checks["rdma.counters"]
    assert counters.status is Status.WARN
    # link_downed counts whatever the traffic; 15 overruns and 14 receive errors in 3e11 packets are noise
    # (tests/test_node_health_recorded.py: counters against traffic)
    assert counters.evidence == ["node[01-04]: mlx5_1/1: link_downed 255"]


def test_the_report_shows_each_distinct_topology_once():
    from clustercheck.stages.env.render import render_markdown
    def apply(i, doc):
        with_gpus()(i, doc)
        topo_doc("topo-m-dgx-a100.txt" if i == 2 else "topo-m-8xh200-10nic.txt")(doc)
    probed = cluster(change=apply)
    result = evaluate(probed, Config())
    text = render_markdown(probed, result.values, result.findings, Config(), "clustercheck env nodes.txt")
    section = text[text.index("## GPU topology"):]
    assert "node[01-02,04]:" in section and "node03:" in section
    assert "| GPU0 | X | NV18 |" in section and "| GPU0 | X | NV12 |" in section
