"""The node probe: parsers fed with outputs recorded on real hardware, and the whole probe run here."""

import json
import os
import subprocess
import sys

import pytest

from clustercheck.onnode import HERE, env_probe, fabric, gpuprobe, kernlog, nodelib

DATA = os.path.join(os.path.dirname(__file__), "data")


def recorded(*parts):
    with open(os.path.join(DATA, *parts)) as handle:
        return handle.read()


def test_nvidia_smi_a100_ampere_counters():
    info = gpuprobe.parse_nvidia_smi_xml(recorded("nvidia-smi", "a100-sxm4-mig.xml"))
    assert (info["driver"], info["cuda_driver"]) == ("510.47.03", "11.6")
    [gpu] = info["gpus"]
    assert gpu["name"] == "NVIDIA A100-SXM4-40GB"
    assert gpu["memory_mib"] == 40960
    assert gpu["ecc_enabled"] is True and gpu["persistence"] is False
    assert gpu["ecc_uncorrected_volatile"] is None      # N/A with MIG on: unknown, not zero
    assert gpu["ecc_uncorrected_aggregate"] == 0
    assert gpu["temperature_c"] == 36 and gpu["throttle"] == []
    assert gpu["mig_current"] is True and gpu["pci_bus_id"] == "00000000:00:04.0"


def test_nvidia_smi_p100_pascal_counters_and_retired_pages():
    [gpu] = gpuprobe.parse_nvidia_smi_xml(recorded("nvidia-smi", "tesla-p100.xml"))["gpus"]
    assert gpu["name"] == "Tesla P100-PCIE-16GB"
    assert gpu["ecc_uncorrected_volatile"] == 0          # from double_bit/total
    assert gpu["retired_pages_pending"] is False
    assert gpu["throttle"] == ["gpu_idle"]


def test_nvidia_smi_rtx4090_remapped_rows_and_clock_event_reasons():
    info = gpuprobe.parse_nvidia_smi_xml(recorded("nvidia-smi", "rtx-4090-driver-535.xml"))
    [gpu] = info["gpus"]
    assert info["driver"] == "535.86.05"
    assert gpu["remapped_pending"] is False and gpu["remap_failure"] is False
    assert gpu["ecc_enabled"] is False and gpu["persistence"] is True
    assert gpu["throttle"] == ["gpu_idle"]


def test_infiniband_from_recorded_sysfs():
    ports = fabric.collect_infiniband(os.path.join(DATA, "sysfs", "procfs-fixtures"))
    by_port = {(p["device"], p["port"]): p for p in ports}
    assert sorted(by_port) == [("hfi1_0", 1), ("mlx4_0", 1), ("mlx4_0", 2), ("mlx5_0", 1)]
    assert by_port["mlx4_0", 2]["state"] == "ACTIVE"
    assert by_port["mlx4_0", 2]["rate"] == "40 Gb/sec (4X QDR)"
    assert by_port["hfi1_0", 1]["link_layer"] == "InfiniBand"
    assert fabric.collect_infiniband(os.path.join(DATA, "no-such-sysfs")) == []


def test_xid_events_from_recorded_kernel_logs():
    events, _ = kernlog.xid_events(recorded("kmsg", "dmesg-xid-akash-244.txt").splitlines())
    assert [(e["xid"], e["count"]) for e in events] == [(43, 2), (31, 1), (94, 1)]
    assert events[-1]["pci"] == "0000:00:08"
    fallen, _ = kernlog.xid_events(recorded("kmsg", "dmesg-xid79-nvsentinel-155.txt").splitlines())
    # Two GPUs: one named three lines before its "fallen off the bus", one in its Xid 79 line.
    assert [(e["xid"], e["pci"]) for e in fallen] == [(79, "0000:b3:00"), (79, "0000:44:00")]


def test_route_interface_longest_prefix_then_own_address(tmp_path):
    (tmp_path / "net").mkdir()
    # /proc/net/route as this host's kernel prints it (a sandbox node plus a default route)
    (tmp_path / "net" / "route").write_text(
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
        "eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"
        "ib0\t0000D50A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n")
    routes = nodelib.ipv4_routes(str(tmp_path))
    interfaces = {"eth0": {"ipv4": ["192.0.2.2/24"]}, "ib0": {"ipv4": ["10.213.0.2/24"]}}
    assert nodelib.route_interface("10.213.0.7", interfaces, routes) == "ib0"
    assert nodelib.route_interface("8.8.8.8", interfaces, routes) == "eth0"
    assert nodelib.route_interface("10.213.0.2", interfaces, routes) == "ib0"


def test_torch_build_read_without_importing_torch(tmp_path):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "version.py").write_text(
        "from typing import Optional\n__version__ = '2.3.1+cu121'\ndebug = False\n"
        "cuda: Optional[str] = '12.1'\ngit_version = 'abc'\nhip: Optional[str] = None\n")
    assert env_probe.torch_build(str(tmp_path)) == {"version": "2.3.1+cu121", "cuda": "12.1",
                                                    "git_version": "abc", "hip": None}


def run_probe(*args, env=None):
    out = subprocess.run([sys.executable, os.path.join(HERE, "env_probe.py"), *args], capture_output=True,
                         text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_probe_reports_this_machine_without_importing_torch():
    doc = run_probe("--peers", "localhost")
    assert doc["schema"] == 1
    assert doc["python"]["executable"] == sys.executable
    assert doc["packages"]["versions"]["torch"]            # the test command installs torch
    assert "deep" not in doc
    assert doc["net"]["peers"]["localhost"]["ifname"] == "lo"
    assert doc["finished"] >= doc["started"]


def test_probe_keeps_only_allow_listed_environment():
    env = dict(os.environ, NCCL_DEBUG="INFO", TORCH_HUB_TOKEN="s3cret", AWS_SECRET_ACCESS_KEY="s3cret",
               MY_PASSWORD="s3cret")
    doc = run_probe(env=env)
    assert doc["env"].get("NCCL_DEBUG") == "INFO"
    assert "s3cret" not in json.dumps(doc)


def test_probe_never_raises_and_says_what_is_missing(tmp_path):
    # A workdir that does not exist and an unresolvable peer are facts, not errors.
    doc = run_probe("--workdir", str(tmp_path / "nope"), "--peers", "no-such-host.invalid")
    assert doc["storage"]["workdir"]["missing"] is True
    assert "error" in doc["net"]["peers"]["no-such-host.invalid"]
    assert "fatal" not in doc


@pytest.mark.parametrize("section", ["host", "packages", "net"])
def test_a_failing_section_is_reported_missing(monkeypatch, section):
    def boom(args):
        raise RuntimeError("cannot read")
    monkeypatch.setattr(env_probe, "SECTIONS", [(section, boom)] + [s for s in env_probe.SECTIONS if s[0] != section])
    monkeypatch.setattr(env_probe, "MISSING", {})
    doc = env_probe.probe([])
    assert doc[section] is None
    assert "cannot read" in doc["missing"][section]


def test_the_probe_lists_build_locks_under_the_extensions_root(tmp_path, monkeypatch):
    from clustercheck.onnode import env_probe
    op = tmp_path / "py311_cpu" / "cpu_adam"
    op.mkdir(parents=True)
    (op / "lock").write_text("")
    (op / "cpu_adam.so").write_text("")
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    found = env_probe.collect_builds({})
    assert found["root"] == str(tmp_path) and [lock["path"] for lock in found["locks"]] == [str(op / "lock")]
    assert found["compiling"] in (True, False) and found["locks"][0]["age_s"] < 60
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "none"))
    assert env_probe.collect_builds({}) == {"root": str(tmp_path / "none"), "locks": [], "compiling": None}
