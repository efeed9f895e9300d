"""The path NCCL took on each node, judged against what the node has (issue 38).

The summaries come from NCCL's own lines (onnode/ncclpath.py: on the nodes over the ranks' NCCL_DEBUG_FILE
logs, or over a user's log in `explain`); the node's facts from the env probe (its RDMA ports and their state,
the GPUDirect module). Judged:
- ranks on a node with an active RDMA port that talked to other nodes over sockets: FAIL, with the line NCCL gave
  for it (a net plugin that failed to load, NCCL_IB_DISABLE=1, NCCL_NET=Socket, no IB device found);
- a net plugin that was found and failed to load: FAIL;
- NCCL versions that differ between ranks: FAIL, the odd nodes named;
- an RDMA path without GPUDirect RDMA: WARN (possible but off where the nvidia_peermem module is loaded);
- P2P disabled between NVLink-connected GPUs (NCCL says so), or by NCCL_P2P_DISABLE, on a node with several
  GPUs: WARN;
- a bootstrap interface that is virtual (docker0, a bridge, veth, loopback) where other nodes use a real one:
  WARN.
Pure: no I/O. What could not be read is said, never judged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from clustercheck.core.compare import group_by_value
from clustercheck.core.inventory import fold
from clustercheck.core.result import Finding, Status
from clustercheck.node.facts import get

VIRTUAL_IF = re.compile(r"^(?:docker\d*|lo|virbr\d*|veth\w*|br-\w+|cni\d*|flannel\S*|cali\w+|tun\d+|tap\d+|"
                        r"kube-\w+|podman\d*)$")
RDMA_NETS = ("IB", "RoCE", "Libfabric", "AWS Libfabric", "OFI")   # by prefix: IBext_v8 is the SHARP plugin's IB


@dataclass
class NodePath:
    node: str
    ranks: List[Dict] = field(default_factory=list)
    files: int = 0          # the NCCL log files read on the node (one per rank process)

    def _merged(self, key: str) -> Dict[str, int]:
        total: Dict[str, int] = {}
        for rank in self.ranks:
            for name, count in (rank.get(key) or {}).items():
                total[name] = total.get(name, 0) + count
        return total

    @property
    def inter(self) -> Dict[str, int]:
        return self._merged("inter")

    @property
    def intra(self) -> Dict[str, int]:
        return self._merged("intra")

    @property
    def versions(self) -> List[str]:
        return sorted({r["version"] for r in self.ranks if r.get("version")})

    @property
    def networks(self) -> List[str]:
        found = {r["network"] for r in self.ranks if r.get("network")}
        found |= {name.split("/")[1] for name in self.inter}
        return sorted(found)

    @property
    def env(self) -> Dict[str, str]:
        merged: Dict[str, str] = {}
        for rank in self.ranks:
            merged.update(rank.get("env") or {})
        return merged

    @property
    def plugin(self) -> Optional[Dict]:
        said = [r["plugin"] for r in self.ranks if r.get("plugin")]
        return next((p for p in said if p["status"] == "failed"), None) or (said[0] if said else None)

    @property
    def bootstrap(self) -> List[str]:
        return sorted({r["bootstrap"]["if"] for r in self.ranks if r.get("bootstrap")})

    @property
    def several_nodes(self) -> bool:
        return bool(self.inter) or any((r.get("nnodes") or 0) > 1 for r in self.ranks)

    @property
    def sockets_between_nodes(self) -> bool:
        """Connections to other nodes over NCCL's socket transport (a one-node job's "Using network Socket" is
        no such connection)."""
        if any(n.startswith("NET/Socket") for n in self.inter):
            return True
        return self.several_nodes and "Socket" in self.networks and not any(
            n.startswith(RDMA_NETS) for n in self.networks)

    @property
    def rdma_between_nodes(self) -> bool:
        return any(n.split("/")[1].startswith(RDMA_NETS) for n in self.inter)

    def between(self) -> str:
        inter = self.inter
        if not inter:
            nets = self.networks
            return f"network {', '.join(nets)} (no connection line)" if nets else "-"
        return ", ".join(f"{name}" for name in sorted(inter, key=lambda n: -inter[n]))

    def inside(self) -> str:
        intra = self.intra
        return ", ".join(sorted(intra, key=lambda n: -intra[n])) or "-"


def paths_by_node(summaries: Dict[str, Dict]) -> Dict[str, NodePath]:
    """node -> its path, from each node's own summary (bench's capture) or, for a user's log, from the host
    each NCCL line names."""
    return {node: NodePath(node, list(summary.get("ranks") or []), int(summary.get("files") or 0))
            for node, summary in summaries.items()}


def paths_by_host(summary: Dict) -> Dict[str, NodePath]:
    found: Dict[str, NodePath] = {}
    for rank in summary.get("ranks") or []:
        found.setdefault(rank["host"], NodePath(rank["host"])).ranks.append(rank)
    return found


def rdma_active(doc: Optional[Dict]) -> Optional[bool]:
    """Whether the node has an RDMA port up (None: the probe did not read its ports)."""
    ports = get(doc, "infiniband")
    if ports is None:
        return None
    return any((p.get("state") or "").upper() == "ACTIVE" for p in ports if isinstance(p, dict))


def why_sockets(path: NodePath) -> str:
    plugin, env = path.plugin, path.env
    if plugin and plugin["status"] == "failed":
        return f"a net plugin failed to load: {plugin.get('detail', '')}"
    if env.get("NCCL_IB_DISABLE") == "1":
        return "NCCL_IB_DISABLE=1 is set"
    if env.get("NCCL_NET", "").lower() == "socket":
        return "NCCL_NET=Socket is set"
    if any(r.get("no_ib_device") for r in path.ranks):
        return "NCCL found no IB device (NET/IB : No device found): /dev/infiniband missing in the container, or " \
               "the verbs libraries (libibverbs, rdma-core) absent"
    return "NCCL did not say why (its NET lines were not captured)"


def judge_paths(paths: Dict[str, NodePath], facts: Optional[Dict[str, Optional[Dict]]] = None) -> List[Finding]:
    facts = facts or {}
    paths = {n: p for n, p in paths.items() if p.ranks}
    if not paths:
        return []
    order = list(paths)
    findings: List[Finding] = []
    versions = {n: " / ".join(p.versions) for n, p in paths.items() if p.versions}
    grouping = group_by_value(versions, order) if versions else None
    mixed = [n for n, p in paths.items() if len(p.versions) > 1]
    if grouping and (not grouping.uniform or mixed):
        odd = sorted(set(grouping.odd_nodes) | set(mixed), key=order.index)
        findings.append(Finding("nccl.version", Status.FAIL, f"NCCL versions differ between ranks: {fold(odd)}",
                                grouping.evidence(), "one NCCL everywhere: the same torch wheel (its nvidia-nccl "
                                                     "wheel) and no libnccl on LD_LIBRARY_PATH shadowing it "
                                                     "(clustercheck env compares both)", odd))
    for node, path in paths.items():
        plugin = path.plugin
        if plugin and plugin["status"] == "failed":
            findings.append(Finding("nccl.plugin", Status.FAIL, f"a net plugin failed to load on {node}",
                                    [plugin.get("detail", "")], "install the plugin built for this NCCL (aws-ofi-nccl, "
                                    "nccl-rdma-sharp-plugins) or unset NCCL_NET_PLUGIN; NCCL falls back to sockets "
                                    "silently", [node]))
        active = rdma_active(facts.get(node))
        if path.sockets_between_nodes and (active or plugin and plugin["status"] == "failed"):
            findings.append(Finding("nccl.transport", Status.FAIL,
                                    f"{node} talked to other nodes over TCP sockets though "
                                    f"{'it has an active RDMA port' if active else 'a net plugin was to carry it'}: "
                                    f"{why_sockets(path)}",
                                    [f"{node}: between nodes {path.between()}"],
                                    "let NCCL use the RDMA ports: unset NCCL_IB_DISABLE / NCCL_NET, give the "
                                    "container /dev/infiniband and the verbs libraries, or fix the plugin; sockets "
                                    "cost 10x to 100x of the bandwidth", [node]))
        elif path.sockets_between_nodes and path.env.get("NCCL_IB_DISABLE") == "1":
            findings.append(Finding("nccl.transport", Status.WARN, f"{node} uses TCP sockets between nodes: "
                                                                   f"NCCL_IB_DISABLE=1 is set",
                                    [f"{node}: between nodes {path.between()}"],
                                    "unset NCCL_IB_DISABLE where the nodes have RDMA ports", [node]))
        if path.rdma_between_nodes and not any(n.endswith("/GDRDMA") for n in path.inter):
            loaded = get(facts.get(node), "gpudirect", "modules")
            cause = ("GPUDirect RDMA is possible (nvidia_peermem is loaded) but off" if loaded else
                     "GPUDirect RDMA is off (is nvidia_peermem loaded? modprobe nvidia_peermem, or a kernel and "
                     "driver with DMA-BUF)")
            findings.append(Finding("nccl.gdr", Status.WARN, f"{node}: RDMA between nodes without GPUDirect: {cause}",
                                    [f"{node}: between nodes {path.between()}"],
                                    "load nvidia_peermem (or use DMA-BUF: NCCL_DMABUF_ENABLE=1 on a recent kernel) "
                                    "and check NCCL_NET_GDR_LEVEL: without GPUDirect every transfer is staged "
                                    "through host memory", [node]))
        nvlink_off = [d for r in path.ranks for d in r.get("p2p_disabled") or [] if d.get("nvlink")]
        if nvlink_off or (path.env.get("NCCL_P2P_DISABLE") == "1" and len({r.get("device") for r in path.ranks}) > 1):
            findings.append(Finding("nccl.p2p", Status.WARN, f"{node}: P2P between GPUs is off "
                                                             f"({'NCCL: disabled between NVLink-connected GPUs' if nvlink_off else 'NCCL_P2P_DISABLE=1'})",
                                    [f"{node}: inside the node {path.inside()}"],
                                    "unset NCCL_P2P_DISABLE; if NCCL says NVLink-connected GPUs cannot talk, check "
                                    "the NVLinks (nvidia-smi nvlink -s, clustercheck env)", [node]))
    virtual = {n: p.bootstrap for n, p in paths.items() if p.bootstrap and all(VIRTUAL_IF.match(i) for i in p.bootstrap)}
    real = [n for n, p in paths.items() if p.bootstrap and n not in virtual]
    if virtual and real:
        findings.append(Finding("nccl.bootstrap", Status.WARN, f"NCCL's bootstrap runs over a virtual interface on "
                                                               f"{fold(list(virtual))} while other nodes use a real one",
                                [f"{n}: {', '.join(i)}" for n, i in virtual.items()],
                                "set NCCL_SOCKET_IFNAME to the training interface on every node (not docker0, a "
                                "bridge or lo)", list(virtual)))
    if not findings:
        findings.append(Finding("nccl.path", Status.OK, f"NCCL's path on {fold(order)}: between nodes "
                                                        f"{'; '.join(sorted({p.between() for p in paths.values()}))}, "
                                                        f"inside the node "
                                                        f"{'; '.join(sorted({p.inside() for p in paths.values()}))}"))
    return findings


def path_rows(paths: Dict[str, NodePath]) -> List[List[str]]:
    """The report's table: per node, NCCL's version, the path between nodes and inside the node, the bootstrap."""
    return [[node, ", ".join(p.versions) or "?", p.between(), p.inside(), ", ".join(p.bootstrap) or "?"]
            for node, p in paths.items() if p.ranks]


def describe_path(path: Optional[NodePath]) -> str:
    """"over NET/IB/GDRDMA" for a finding about the node ("" where nothing was captured)."""
    return f" (NCCL between nodes: {path.between()})" if path and path.ranks else ""



PATH_HEADERS = ["node", "NCCL", "between nodes", "inside the node", "bootstrap"]
