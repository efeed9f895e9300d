"""Node health over real SSH on the sandbox: nodes given a stand-in nvidia-smi (a script on their
PATH printing output recorded on real GPU machines) and a kernel log of their own (/dev/kmsg),
probed and judged by `clustercheck env` as a user runs it."""

import json
import os
import sys

import pytest

from clustercheck.core.errors import EXIT_FAIL, EXIT_UNKNOWN
from clustercheck.sandbox import faults
from tests.conftest import clustercheck

pytestmark = pytest.mark.sandbox
DATA = os.path.join(os.path.dirname(__file__), "data")


def data(*parts):
    return os.path.join(DATA, *parts)


def env(box, nodes_file, *args):
    return clustercheck("env", nodes_file, "-F", box.ssh_config, "--python", sys.executable, "--json", *args)


def gpu_node(box, name, xml, tmp_path):
    faults.stand_in(box, name, "nvidia-smi", {"-q -x": xml, "topo -m": data("topo", "topo-m-8xh200-10nic.txt"),
                                               "nvlink -s": data("topo", "nvlink-s-8xa100.txt")})


def test_gpu_faults_and_garbage_on_real_nodes(box, tmp_path):
    n1, n2, n3, n4 = (n.name for n in box.nodes[:4])
    # n1: the recorded 8x H100 with GPU 3's volatile DRAM uncorrectable counter raised to 2 (a double-bit error).
    xml = open(data("nvidia-smi", "h100-x8-driver-580.xml")).read()
    start = xml.index('<gpu id="00000000:86:00.0">')
    at = xml.index("<dram_uncorrectable>0<", start)
    dbe = tmp_path / "h100-dbe.xml"
    dbe.write_text(xml[:at] + "<dram_uncorrectable>2<" + xml[at + len("<dram_uncorrectable>0<"):])
    gpu_node(box, n1, str(dbe), tmp_path)
    # n2: the recorded A100 with MIG on.
    gpu_node(box, n2, data("nvidia-smi", "a100-80gb-mig-driver-535.xml"), tmp_path)
    # n3: healthy GPUs, but its kernel log has a GSP timeout (Xid 119) and then a storm of Xid 13 / 43.
    gpu_node(box, n3, data("nvidia-smi", "h100-x8-driver-580.xml"), tmp_path)
    storm = open(data("kmsg", "dmesg-iso-xid13-43-gpud.txt")).read().splitlines()
    critical = open(data("kmsg", "dmesg-T-xid119-gpud.txt")).read().splitlines()
    messages = [line[line.index("NVRM: "):] if "NVRM: " in line else line.split("] ", 1)[-1]
                for line in critical + storm * 3]   # the messages, without the stamps dmesg added
    faults.kernel_log(box, n3, messages)
    # n4: an nvidia-smi that prints an error and half an XML document.
    garbage = tmp_path / "garbage.txt"
    garbage.write_text("Failed to initialize NVML: Driver/library version mismatch\n<nvidia_smi_log><gpu>\n")
    faults.stand_in(box, n4, "nvidia-smi", {"-q -x": str(garbage)})

    proc = env(box, box.nodes_file)
    assert proc.returncode == EXIT_FAIL, proc.stdout[-3000:] + proc.stderr
    doc = json.loads(proc.stdout)
    by_check = {}
    for finding in doc["findings"]:
        by_check.setdefault(finding["check"], []).append(finding)
    [memory] = by_check["gpu.memory"]
    assert memory["status"] == "FAIL" and memory["nodes"] == [n1]
    assert memory["summary"].startswith(f"{n1} GPU 3 (0000:86:00): 2 uncorrectable ECC errors")
    [mig] = by_check["gpu.mig"]
    assert mig["status"] == "FAIL" and mig["nodes"] == [n2] and "GPU 0" in mig["summary"]
    xid_fail = [f for f in by_check["gpu.xid"] if f["status"] == "FAIL"]
    assert len(xid_fail) == 1 and xid_fail[0]["nodes"] == [n3]
    assert "Xid 119 x5" in xid_fail[0]["summary"] and "0000:9b:00" in xid_fail[0]["summary"]
    [unknown] = [f for f in doc["findings"] if f["status"] == "UNKNOWN"]
    assert unknown["nodes"] == [n4] and "could not check the GPUs" in unknown["summary"]
    assert "not XML" in unknown["summary"]
    assert doc["nodes"][n3]["facts"]["kernel_log"]["source"] == "/dev/kmsg"

    # The garbage node alone: UNKNOWN, not READY.
    alone = tmp_path / "nodes.txt"
    alone.write_text("".join(line for line in open(box.nodes_file) if line.split() and line.split()[0] == n4))
    proc = env(box, str(alone))
    assert proc.returncode == EXIT_UNKNOWN, proc.stdout[-3000:] + proc.stderr
    assert json.loads(proc.stdout)["verdict"] == "UNKNOWN"


def test_a_stand_in_leaves_the_other_programs_of_its_directory_working(box):
    """The node sees the directory as links to the real one, bound at a private path: links through
    the directory itself would point back at the mirror and loop."""
    name = box.nodes[0].name
    real = os.path.join(box.dir, "tools-under-test")
    os.makedirs(real, exist_ok=True)
    with open(os.path.join(real, "hello"), "w") as handle:
        handle.write("#!/bin/sh\necho hello from the real directory\n")
    os.chmod(os.path.join(real, "hello"), 0o755)
    faults.stand_in(box, name, "nvidia-smi", {"-q -x": data("nvidia-smi", "t4-driver-595.xml")}, bin_dir=real)
    faults.stand_in(box, name, "ibstat", {"": data("ibstat", "ib-down-linkup-network-operator-249.txt")},
                    bin_dir=real)
    assert faults.node_exec(box, name, [os.path.join(real, "hello")]).stdout == "hello from the real directory\n"
    assert "Tesla T4" in faults.node_exec(box, name, [os.path.join(real, "nvidia-smi"), "-q", "-x"]).stdout
    assert "mlx5_7" in faults.node_exec(box, name, [os.path.join(real, "ibstat")]).stdout
    assert os.listdir(real) == ["hello"]   # the host's directory is untouched
