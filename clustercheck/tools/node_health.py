"""`clustercheck node-check`: this node's own health in a few seconds, for Slurm's hooks.

The single-node judges of env (GPU health: Xid events, ECC, retired rows, temperature, GPUs
the driver lost; GPU topology and NVLinks; InfiniBand ports and counters; /dev/shm; memlock; the
working directory and its free disk) over one probe of this machine. The result is one Nagios line and code, and a
reason short enough for `scontrol update nodename=... state=drain reason=...`: a site runs it
as HealthCheckProgram or in a prolog and drains the node when it says CRITICAL.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import List, Optional, Tuple

from clustercheck.core.inventory import Defaults, local_inventory
from clustercheck.core.result import Finding, Status, nothing_checked, run_judges, sort_findings, worst
from clustercheck.core.thresholds import Config
from clustercheck.metrics.build import finding_samples, registry_of, run_samples
from clustercheck.metrics.export import write_textfile
from clustercheck.node.facts import gpu_count
from clustercheck.node.gather import ProbeOptions, probe_cluster
from clustercheck.node.judges import unreachable
from clustercheck.onnode.nodelib import read
from clustercheck.stages.device.gather import gather_devices
from clustercheck.stages.device.options import DeviceOptions
from clustercheck.stages.device.rules import judge_devices
from clustercheck.node import gpu_health
from clustercheck.stages.env import fabric_rules, rules, topology
from clustercheck.stages.env.facts import env_facts
from clustercheck.stages.env.rules import EnvContext
from clustercheck.transport.fanout import Cluster, FanoutOptions

JUDGES = (  # the node's own health: what one node can tell about itself (topology compares with no other node here)
    gpu_health.gpu_health, gpu_health.unchecked, topology.judge, fabric_rules.ports, fabric_rules.counters, rules.shm,
    rules.memlock, rules.workdir)
NAGIOS = {Status.OK: "OK", Status.WARN: "WARNING", Status.FAIL: "CRITICAL", Status.UNKNOWN: "UNKNOWN"}
REASON_MAX = 200
HERE = "localhost"   # Slurm keeps a node's reason short; so do we


def check_this_node(config: Config, workdir: Optional[str], timeout_s: float, expected_gpus: Optional[int] = None,
                    python: Optional[str] = None, load_s: float = 0.0) -> List[Finding]:
    """expected_gpus: --gpus, else the NVIDIA GPUs on this machine's PCI bus (sysfs). load_s: also load every GPU
    for that long (the device stage's matmul and copies): PCIe links under load, each GPU against the others
    and against its model's figure, and the same bits."""
    nodes = local_inventory(Defaults(python=python or sys.executable))
    with Cluster(nodes, FanoutOptions(session=False)) as cluster:
        probed = probe_cluster(cluster, nodes, ProbeOptions(timeout_s=timeout_s, workdir=workdir, deep=False))
        loaded = (judge_devices(gather_devices(cluster, nodes, DeviceOptions(seconds=load_s, dcgm_level=0,
                                                                             start_margin_s=0.0)))
                  if load_s else [])
    # the probe could not run: nothing was checked, which is UNKNOWN here, not a broken node
    findings = [Finding(f.check, Status.UNKNOWN, f.summary, f.evidence, f.remedy, f.nodes)
                for f in unreachable(probed) if f.status is not Status.OK]
    facts = env_facts(probed)
    ctx = EnvContext(facts.probed, facts.values, config.env)
    findings += run_judges(JUDGES, ctx)
    source = "--gpus" if expected_gpus is not None else "the PCI bus"
    expected = expected_gpus if expected_gpus is not None else pci_gpus()
    found = gpu_count(probed[0].facts) if probed and probed[0].facts else None
    findings += gpus_present(expected, found, source)
    return sort_findings(findings + loaded)


def pci_gpus(sysfs: str = "/sys") -> int:
    """NVIDIA GPUs on the PCI bus (vendor 0x10de, class display 0x03xx): what the driver should list."""
    root = os.path.join(sysfs, "bus", "pci", "devices")
    count = 0
    for device in (os.listdir(root) if os.path.isdir(root) else []):
        vendor = read(os.path.join(root, device, "vendor"), "")
        klass = read(os.path.join(root, device, "class"), "")
        if vendor == "0x10de" and klass.startswith("0x03"):
            count += 1
    return count


def gpus_present(expected: int, found: Optional[int], source: str) -> List[Finding]:
    """Every GPU the node should have is listed by the driver (one fallen off the bus often leaves no Xid)."""
    if not expected or found is None:
        return []   # no GPUs expected; or the GPUs could not be read, which `unchecked` says
    if found < expected:
        return [Finding("gpu.count", Status.FAIL, f"the driver lists {found} of {expected} GPUs ({source})",
                        [f"{HERE}: nvidia-smi lists {found} GPUs, {source} says {expected}"],
                        "a GPU fell off the bus or failed to initialise: look at the kernel log (Xid 79), reseat or "
                        "replace it; drain the node until then", [HERE])]
    return [Finding("gpu.count", Status.OK, f"all {expected} GPUs are listed by the driver")]


def reason(findings: List[Finding]) -> str:
    """The worst findings' summaries on one line, for Slurm's reason (no newlines, no quotes, short); where no
    finding checked anything, that is the reason."""
    if nothing_checked(findings):
        return "nothing was checked"
    bad = [f for f in findings if f.status is worst(findings) and f.status is not Status.OK]
    parts = []
    for finding in bad:   # the evidence names what is wrong here; the summary names the node ("on localhost")
        lines = [line.split(": ", 1)[1] if line.startswith(f"{HERE}: ") else line for line in finding.evidence[:2]]
        parts += lines or [finding.summary.replace(f" on {HERE}", "")]
    text = " ".join("; ".join(parts).replace('"', "'").split())
    return text if len(text) <= REASON_MAX else text[:REASON_MAX - 3] + "..."


def verdict(findings: List[Finding]) -> Tuple[int, str]:
    """(Nagios exit code, status line): 'CLUSTERCHECK CRITICAL - GPU ... Xid 79 ...'."""
    status = worst(findings)
    passed = sum(1 for f in findings if f.status is Status.OK and f.checked)    # a note is no check that passed
    said = reason(findings) if status is not Status.OK else f"{passed} check{'s' * (passed != 1)} passed"
    return status.exit_code, f"CLUSTERCHECK {NAGIOS[status]} - {said}"


NPD = {Status.OK: 0, Status.WARN: 0, Status.FAIL: 1, Status.UNKNOWN: 2}   # Node Problem Detector's plugin codes


def npd_code(findings: List[Finding]) -> int:
    return NPD[worst(findings)]


def write_node_metrics(directory: str, findings: List[Finding], started: Optional[float] = None) -> str:
    """node_exporter's textfile: each check's status (node is this host), the verdict and when; atomically."""
    host = socket.gethostname()
    mine = [Finding(f.check, f.status, f.summary, f.evidence, f.remedy, [host]) for f in findings]
    ended = time.time()
    samples = finding_samples("node-check", mine) + run_samples(
        findings, ended - started if started else 0.0, [host],
        [host] if worst(findings) in (Status.FAIL, Status.UNKNOWN) else [], ended)
    return write_textfile(directory, registry_of(samples))
