"""GPU topology: how the GPUs of a node reach each other and their NICs (`nvidia-smi topo -m`),
and whether their NVLinks are up (`nvidia-smi nvlink -s`), read from the text nvidia-smi
prints, compared across nodes and judged. Row 27 of docs/failures.md.

The probe ships the text; reading it here keeps the node side small and lets recorded
outputs from real machines be replayed as they were printed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

from clustercheck.core.compare import group_by_value
from clustercheck.core.inventory import fold
from clustercheck.core.result import Finding, Status
from clustercheck.node.facts import Probed, get
from clustercheck.node.judges import nodes_finding
from clustercheck.stages.env.rules import EnvContext

# Nearest first: NVLink, then PCIe paths by how much they cross (nvidia-smi's own legend).
DISTANCE = {"X": 0, "NV": 1, "PIX": 2, "PXB": 3, "PHB": 4, "NODE": 5, "SYS": 6}
ANSI = re.compile(r"\x1b\[[0-9;]*m")
DEVICE = re.compile(r"^(GPU\d+|NIC\d+|mlx\d+_\d+|[a-z]+\d*_\d+|ib\S*|bnxt\S*|hfi\S*)$")


def distance(cell: str) -> int:
    cell = cell.strip()
    return DISTANCE["NV"] if cell.startswith("NV") else DISTANCE.get(cell, 99)


@dataclass
class Topology:
    links: Dict[str, Dict[str, str]] = field(default_factory=dict)   # GPU0 -> {GPU1: NV18, mlx5_0: PIX}
    numa: Dict[str, str] = field(default_factory=dict)               # GPU0 -> NUMA affinity
    cpus: Dict[str, str] = field(default_factory=dict)               # GPU0 -> CPU affinity
    nics: List[str] = field(default_factory=list)                    # NIC names (mlx5_0), as the legend maps them
    cut: str = ""                                                    # why the matrix is incomplete; "" when whole

    @property
    def gpus(self) -> List[str]:
        return list(self.links)

    def nearest_nic(self, gpu: str) -> Optional[str]:
        """The path type to the GPU's closest NIC ("PIX"), None without NICs."""
        cells = [self.links[gpu][nic] for nic in self.nics if nic in self.links[gpu]]
        return min(cells, key=distance) if cells else None

    def signature(self) -> str:
        """What must match between nodes of one kind: links GPU to GPU and GPU to NIC, NUMA."""
        rows = []
        for gpu in self.gpus:
            cells = [self.links[gpu].get(other, "?") for other in self.gpus + self.nics]
            rows.append(f"{gpu}:{' '.join(cells)}@{self.numa.get(gpu, '?')}")
        return "; ".join(rows)


def parse_topo_m(text: str) -> Optional[Topology]:
    """`nvidia-smi topo -m` in either layout: NICs named in the header (mlx5_0) or NIC0..NICn
    with a "NIC Legend". None when the text holds no matrix; `cut` says what is missing when the
    matrix stops short of its header (a GPU row missing, a GPU row without all its cells)."""
    lines = [ANSI.sub("", line) for line in (text or "").splitlines()]
    header_at = next((i for i, line in enumerate(lines) if re.search(r"\bGPU0\b", line) and
                      not line.strip().startswith("GPU0 ")), None)
    if header_at is None:
        return None
    header = [c.strip() for c in re.split(r"\t| {2,}", lines[header_at].strip())]
    devices = [c for c in header if DEVICE.match(c)]
    legend = dict(re.findall(r"^\s*(NIC\d+):\s*(\S+)", "\n".join(lines), re.M))
    topo = Topology(nics=[legend.get(d, d) for d in devices if not d.startswith("GPU")])
    rename = {d: legend.get(d, d) for d in devices}
    short = []
    for line in lines[header_at + 1:]:
        if not line.strip() or line.startswith("Legend"):
            break
        cells = line.rstrip("\n").split("\t") if "\t" in line else re.split(r" {2,}", line)
        name = cells[0].strip()
        if not name.startswith("GPU"):
            continue
        values = [c.strip() for c in cells[1:]]
        if len([v for v in values[:len(devices)] if v]) < len(devices):
            short.append(f"{name}'s row has {len([v for v in values if v])} of its {len(devices)} cells")
        topo.links[name] = {rename[d]: values[i] for i, d in enumerate(devices) if i < len(values) and d != name}
        rest = [v for v in values[len(devices):] if v]
        if rest:
            topo.cpus[name] = rest[0]
        if len(rest) > 1:
            topo.numa[name] = rest[1]
    named = [d for d in devices if d.startswith("GPU")]
    if set(topo.links) != set(named):
        short.insert(0, f"{len(topo.links)} of {len(named)} GPU rows")
    topo.cut = "; ".join(short)
    return topo if topo.links else None


ALL_LINKS = -1   # the key of a GPU whose driver says all its links are inactive, not which


def parse_nvlink_s(text: str) -> Dict[int, Dict[int, bool]]:
    """`nvidia-smi nvlink -s`: GPU index -> {link: active}. Current drivers print "NVML: Unable to
    retrieve NVLink information as all links are inActive" instead of the links: {ALL_LINKS: False}."""
    gpus: Dict[int, Dict[int, bool]] = {}
    current = None
    for line in (text or "").splitlines():
        gpu = re.match(r"^GPU (\d+):", line)
        link = re.match(r"^\s+Link (\d+):\s*(.*)$", line)
        if gpu:
            current = gpus.setdefault(int(gpu.group(1)), {})
        elif link and current is not None:
            current[int(link.group(1))] = "inactive" not in link.group(2).lower()
        elif current is not None and re.search(r"all links are inactive", line, re.I):
            current[ALL_LINKS] = False
    return gpus


def topologies(probed: Sequence[Probed]) -> Dict[str, Topology]:
    """node -> its topo -m matrix, for the nodes that have a whole one."""
    out = {}
    for p in probed:
        topo = parse_topo_m(get(p.facts, "gpu", "topology", "topo_m")) if p.facts else None
        if topo is not None and not topo.cut:
            out[p.name] = topo
    return out


def _unreadable(ctx: EnvContext) -> List[Finding]:
    """A matrix cut short, or text that holds none, is a topology not checked: never a pass, nor a wiring
    difference. (nvidia-smi failing outright is said by gpu_rules.unchecked, from the probe's error.)"""
    why = {}
    for p in ctx.ok:
        text = get(p.facts, "gpu", "topology", "topo_m")
        if not text or not text.strip():
            continue
        topo = parse_topo_m(text)
        if topo is None:
            why[p.name] = f"no matrix in nvidia-smi topo -m's output ({text.strip().splitlines()[0][:80]!r})"
        elif topo.cut:
            why[p.name] = f"nvidia-smi topo -m's matrix is cut short: {topo.cut}"
    return nodes_finding("unchecked.GPU_topology", Status.UNKNOWN, why, "could not check the GPU topology on {nodes}",
                         "run nvidia-smi topo -m on the node: a matrix cut short means nvidia-smi was stopped (a "
                         "hung GPU or driver makes it slow) or its output was lost; check the driver and rerun", "")


def _compare(ctx: EnvContext, topos: Dict[str, Topology]) -> List[Finding]:
    if len(topos) < 2:
        return []
    grouping = group_by_value({n: t.signature() for n, t in topos.items()}, ctx.order)
    if grouping.uniform:
        return [Finding("gpu.topology.same", Status.OK, f"GPU topology is the same on {fold(list(topos))}")]
    base = topos[grouping.baseline_nodes[0]]
    odd = {}
    for node in grouping.odd_nodes:
        topo = topos[node]
        diffs = [f"{gpu}-{other} {cell} (others {base.links.get(gpu, {}).get(other, '-')})"
                 for gpu in topo.gpus for other, cell in topo.links[gpu].items()
                 if base.links.get(gpu, {}).get(other) != cell]
        diffs += [f"{gpu} on NUMA {topo.numa.get(gpu)} (others {base.numa.get(gpu)})" for gpu in topo.gpus
                  if topo.numa.get(gpu) != base.numa.get(gpu)]
        if set(topo.gpus) != set(base.gpus) or topo.nics != base.nics:
            diffs.insert(0, f"{len(topo.gpus)} GPUs and NICs {', '.join(topo.nics) or 'none'} (others "
                            f"{len(base.gpus)} GPUs, {', '.join(base.nics) or 'none'})")
        odd[node] = "; ".join(diffs[:6]) + (f"; and {len(diffs) - 6} more" if len(diffs) > 6 else "")
    return nodes_finding("gpu.topology.same", Status.WARN, odd, "GPU topology differs on {nodes} "
                         f"from {fold(grouping.baseline_nodes)}",
                         "compare nvidia-smi topo -m on the odd node: a GPU or NIC in another slot, a missing "
                         "NVLink bridge or a BIOS setting (ACS, NUMA per socket) changes NCCL's rings and speed", "")


def _far_nics(ctx: EnvContext, topos: Dict[str, Topology]) -> List[Finding]:
    far = {}
    for node, topo in topos.items():
        gpus = [g for g in topo.gpus if topo.nearest_nic(g) == "SYS"]
        if gpus and topo.nics:
            far[node] = f"{', '.join(gpus)}: nearest NIC across the CPU interconnect (SYS)"
    return nodes_finding("gpu.topology.nic", Status.WARN, far, "GPUs whose nearest NIC is on the other CPU on "
                         "{nodes}", "GPUDirect RDMA is off for those GPUs and their traffic crosses the CPUs' "
                         "link: put a NIC on each PCIe switch or socket, or check the BIOS NUMA settings", "")


def _nvlinks(ctx: EnvContext) -> List[Finding]:
    """A link that is inactive while the same link is active on another GPU of the node, or on the
    same GPU of another node, is a broken NVLink (Xid 74 often goes with it); so is a GPU with all
    its links inactive where other GPUs have active ones."""
    states = {p.name: parse_nvlink_s(get(p.facts, "gpu", "topology", "nvlink_s")) for p in ctx.ok}
    active_links = {link for gpus in states.values() for links in gpus.values() for link, up in links.items() if up}
    bad = {}
    for node, gpus in states.items():
        down = []
        for index, links in sorted(gpus.items()):
            if ALL_LINKS in links and active_links:
                down.append(f"GPU {index} all links")
                continue
            lost = [link for link, up in sorted(links.items()) if not up and link in active_links]
            if lost:
                down.append(f"GPU {index} link{'s' if len(lost) > 1 else ''} {', '.join(map(str, lost))}")
        if down:
            bad[node] = "inactive: " + "; ".join(down)
    # Claimed only where every link read was active: a link inactive on every GPU is not called active.
    checked = [n for n, g in states.items() if any(g.values()) and all(up for links in g.values()
                                                                        for up in links.values())]
    return nodes_finding("gpu.nvlink", Status.FAIL, bad, "NVLink links inactive on {nodes}",
                         "reset the GPU or reboot; if the link stays down, reseat the GPU or NVLink bridge / "
                         "replace the baseboard (nvidia-smi nvlink -s, -e for error counters)",
                         f"every NVLink is active on {fold(checked)}" if checked else "")


def judge(ctx: EnvContext) -> List[Finding]:
    topos = topologies(ctx.ok)
    return _unreadable(ctx) + _compare(ctx, topos) + _far_nics(ctx, topos) + _nvlinks(ctx)


def markdown(probed: Sequence[Probed]) -> List[str]:
    """The report's GPU topology section: each distinct matrix once, with the nodes that have it."""
    topos = topologies(probed)
    if not topos:
        return []
    grouping = group_by_value({n: t.signature() for n, t in topos.items()}, list(topos))
    out = ["## GPU topology", "", "From `nvidia-smi topo -m`: NV# = NVLink, PIX/PXB = PCIe switch, PHB = host bridge, "
           "NODE = across host bridges, SYS = across the CPUs' interconnect.", ""]
    for _, nodes in grouping.groups:
        topo = topos[nodes[0]]
        header = ["", *topo.gpus, *topo.nics, "NUMA"]
        rows = [[gpu, *[topo.links[gpu].get(o, "X") for o in topo.gpus + topo.nics], topo.numa.get(gpu, "")]
                for gpu in topo.gpus]
        out += [f"{fold(nodes)}:", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        out += ["| " + " | ".join(row) + " |" for row in rows]
        out.append("")
    return out
