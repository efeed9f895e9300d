"""The path NCCL took on each node, judged from its own lines alone (a user's log: issue 44) or against what the
node has (bench and smoke: issue 38).

The summaries come from NCCL's own lines (onnode/nccl_log_reader.py: on the nodes over the ranks' NCCL_DEBUG_FILE
logs, or over a user's log in `explain`); the network, GPUDirect and fallback lines are named by
nccl/network.py; the node's facts, where there are some, from the env probe (its RDMA ports and their state,
the GPUDirect module). Judged:
- sockets between nodes after a plugin or the IB transport failed or found no device, or forced by a variable:
  WARN naming the nodes and NCCL's line; FAIL on a node with an active RDMA port;
- a net plugin that was found and failed to load: WARN, FAIL beside an active RDMA port;
- NCCL versions that differ between ranks: FAIL on our own capture, WARN from a user's log (it may hold several
  runs), the odd nodes named;
- an RDMA path without GPUDirect RDMA: WARN (possible but off where the nvidia_peermem module is loaded);
- P2P or SHM turned off by a variable, or P2P disabled between NVLink-connected GPUs (NCCL says so): WARN;
- a bootstrap on loopback, docker0 (or Docker's 172.17/16), a bridge or a virtual interface: WARN.
An INFO line alone is never a FAIL. Pure: no I/O. What could not be read is said, never judged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from clustercheck.core.compare import group_by_value
from clustercheck.core.inventory import fold
from clustercheck.core.result import Finding, Status
from clustercheck.node.facts import get
from clustercheck.nccl import network as nccl_network
from clustercheck.nccl.impossible_facts import judge_facts

VIRTUAL_IF = re.compile(r"^(?:docker\d*|lo|virbr\d*|veth\w*|br-\w+|br\d+|cni\d*|flannel\S*|cali\w+|tun\d+|tap\d+|"
                        r"kube-\w+|podman\d*)$")
RDMA_NETS = ("IB", "RoCE", "Libfabric", "AWS Libfabric", "OFI")   # by prefix: IBext_v8 is the SHARP plugin's IB


@dataclass
class NodePath:
    node: str
    ranks: List[Dict] = field(default_factory=list)
    files: int = 0          # the NCCL log files read on the node (one per rank process)
    job: Dict = field(default_factory=dict)     # what the whole job's lines say (nccl_network.job_context)

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
    def one_node(self) -> bool:
        """The job's lines show one node: every rank that says NCCL's nNodes says 1, or (none says it) every line
        names one host, no connection leaves it, and every rank of the communicator (its nranks) is seen there.
        One host in a log is not enough: a log pasted from one node of a 64-rank job shows one host too."""
        said = [r["nnodes"] for r in self.ranks if r.get("nnodes")]
        if said:
            return all(n == 1 for n in said)
        sizes = {r["nranks"] for r in self.ranks if r.get("nranks")}
        if self.job.get("hosts") != 1 or self.inter or len(sizes) != 1:
            return False
        return len({r["rank"] for r in self.ranks if r.get("rank") is not None}) >= sizes.pop()

    @property
    def loaded_network(self) -> Optional[str]:
        """The net NCCL took (nccl_network.NETWORKS' words), on one node too, where it is the net NCCL would use
        between nodes: the node's own lines', else what the job's lines show; None where not shown."""
        return nccl_network.network(self.ranks, self.inter, self.job) or self.job.get("network")

    @property
    def network(self) -> Optional[str]:
        """The network between nodes as users name it: the net NCCL took, None on a job of one node (nothing went
        between nodes) or where the lines do not show it."""
        return None if self.one_node else self.loaded_network

    @property
    def gpudirect(self) -> Optional[bool]:
        return nccl_network.gpudirect(self.ranks, self.inter, self.loaded_network)

    @property
    def fallbacks(self) -> List[Tuple[str, str]]:
        return nccl_network.fallbacks(self.ranks, self.loaded_network, VIRTUAL_IF, self.job)

    @property
    def fallback(self) -> Optional[str]:
        """The NCCL line that shows the costliest fallback (None: none shown)."""
        found = self.fallbacks
        return found[0][1] if found else None

    def fallback_of(self, kind: str) -> Optional[str]:
        return next((line for k, line in self.fallbacks if k == kind), None)

    @property
    def plugin_name(self) -> Optional[str]:
        return nccl_network.plugin_name(self.ranks)

    def between(self) -> str:
        inter = self.inter
        if not inter and self.one_node:
            loaded = self.loaded_network
            return "none: one node" + (f" (NCCL took {loaded}, its net between nodes)" if loaded else "")
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
    job = nccl_network.job_context([r for s in summaries.values() for r in s.get("ranks") or []])
    return {node: NodePath(node, list(summary.get("ranks") or []), int(summary.get("files") or 0), job)
            for node, summary in summaries.items()}


def paths_by_host(summary: Dict) -> Dict[str, NodePath]:
    ranks = summary.get("ranks") or []
    job = nccl_network.job_context(ranks)
    found: Dict[str, NodePath] = {}
    for rank in ranks:
        found.setdefault(rank["host"], NodePath(rank["host"], job=job)).ranks.append(rank)
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
    failures = [line for r in path.ranks for line in r.get("net_failures") or []]
    if failures:
        return f"NCCL said: {failures[0]}"
    shown = nccl_network.rdma_shown(path.ranks, path.job)
    if shown:
        return f"the log shows RDMA ({shown}) yet NCCL did not say why it took sockets"
    return "NCCL did not say why (its NET lines were not captured)"


def _versions(paths: Dict[str, NodePath], order: List[str], from_probe: bool) -> List[Finding]:
    versions = {n: " / ".join(p.versions) for n, p in paths.items() if p.versions}
    grouping = group_by_value(versions, order) if versions else None
    mixed = [n for n, p in paths.items() if len(p.versions) > 1]
    if not grouping or (grouping.uniform and not mixed):
        return []
    odd = sorted(set(grouping.odd_nodes) | set(mixed), key=order.index)
    # from a log alone, several runs pasted into one file read the same: a WARN there, a FAIL on our own capture
    status, alone = (Status.FAIL, "") if from_probe else (Status.WARN, " (or the log holds several runs)")
    return [Finding("nccl.version", status, f"NCCL versions differ between ranks{alone}: {fold(odd)}",
                    grouping.evidence(), "one NCCL everywhere: the same torch wheel (its nvidia-nccl wheel) and no "
                                         "libnccl on LD_LIBRARY_PATH shadowing it (clustercheck env compares both)",
                    odd)]


def _transport(node: str, path: NodePath, active: Optional[bool]) -> List[Finding]:
    """A net plugin that failed to load (FAIL beside an active RDMA port, else WARN), and sockets between nodes on
    a node whose probe shows an active RDMA port: FAIL (the WARN from the lines alone: _fallen_back)."""
    plugin = path.plugin
    failed = bool(plugin and plugin["status"] == "failed")
    findings = []
    if failed:
        findings.append(Finding("nccl.plugin", Status.FAIL if active else Status.WARN,
                                f"a net plugin failed to load on {node}", [plugin.get("detail", "")],
                                "install the plugin built for this NCCL (aws-ofi-nccl, nccl-rdma-sharp-plugins) or "
                                "unset NCCL_NET_PLUGIN; NCCL falls back to sockets silently", [node]))
    line = path.fallback_of("sockets")
    if active and path.sockets_between_nodes:
        findings.append(Finding("nccl.transport", Status.FAIL, f"{node} talked to other nodes over TCP sockets though "
                                                               f"it has an active RDMA port: {why_sockets(path)}",
                                [f"{node}: between nodes {path.between()}"] + ([line] if line else []),
                                "let NCCL use the RDMA ports: unset NCCL_IB_DISABLE / NCCL_NET, give the container "
                                "/dev/infiniband and the verbs libraries, or fix the plugin; sockets cost 10x to "
                                "100x of the bandwidth", [node]))
    return findings


def _fallen_back(paths: Dict[str, NodePath], facts: Dict[str, Optional[Dict]]) -> List[Finding]:
    """Sockets between nodes where NCCL's lines show why, on nodes with no active RDMA port seen: one WARN per
    cause, its nodes folded."""
    causes: Dict[Tuple[str, str, bool], List[str]] = {}
    for node, path in paths.items():
        failed = bool(path.plugin and path.plugin["status"] == "failed")
        line = path.fallback_of("sockets") or (path.plugin.get("detail", "") if failed else None)
        if path.loaded_network == "Socket" and line and not (rdma_active(facts.get(node))
                                                             and path.sockets_between_nodes):
            causes.setdefault((why_sockets(path), line, path.one_node), []).append(node)
    return [Finding("nccl.transport", Status.WARN,
                    f"{fold(nodes)}: NCCL took TCP sockets as its net between nodes, {why}: this log shows one node, "
                    "so nothing crossed a network here, but a job across nodes would run on sockets" if one else
                    f"{fold(nodes)} fell back to TCP sockets between nodes: {why}",
                    [f"{fold(nodes)}: {line}"],
                    "where the nodes have RDMA ports (InfiniBand, RoCE, EFA): unset NCCL_IB_DISABLE / NCCL_NET, give "
                    "the container /dev/infiniband and the verbs libraries, install the plugin built for this NCCL; "
                    "sockets cost 10x to 100x of the bandwidth", nodes) for (why, line, one), nodes in causes.items()]


def _gdr(paths: Dict[str, NodePath], facts: Dict[str, Optional[Dict]]) -> List[Finding]:
    """RDMA between nodes without GPUDirect: one WARN per cause, its nodes folded."""
    off: Dict[bool, List[str]] = {}
    for node, path in paths.items():
        if path.network in ("InfiniBand", "RoCE", "EFA", "libfabric") and path.gpudirect is False:
            off.setdefault(bool(get(facts.get(node), "gpudirect", "modules")), []).append(node)
    findings = []
    for loaded, nodes in off.items():
        cause = ("GPUDirect RDMA is possible (nvidia_peermem is loaded) but off" if loaded else
                 "GPUDirect RDMA is off (is nvidia_peermem loaded? modprobe nvidia_peermem, or a kernel and driver "
                 "with DMA-BUF)")
        findings.append(Finding("nccl.gdr", Status.WARN, f"{fold(nodes)}: RDMA between nodes without GPUDirect: "
                                                         f"{cause}",
                                [f"{n}: between nodes {paths[n].between()}" for n in nodes[:8]],
                                "load nvidia_peermem (or use DMA-BUF: NCCL_DMABUF_ENABLE=1 on a recent kernel) and "
                                "check NCCL_NET_GDR_LEVEL: without GPUDirect every transfer is staged through host "
                                "memory", nodes))
    return findings


def _inside(node: str, path: NodePath) -> List[Finding]:
    disabled = [d for r in path.ranks for d in r.get("p2p_disabled") or []]
    nvlink_off = [d for d in disabled if d.get("nvlink")]
    line = path.fallback_of("inside")
    if not disabled and not line:
        return []
    said = ("P2P disabled between NVLink-connected GPUs (NCCL says)" if nvlink_off else
            nccl_network.forced_what(line) if line else
            "P2P disabled between connected GPUs (NCCL says): their traffic goes through host memory")
    quoted = [d["line"] for d in (nvlink_off or disabled)[:1] if d.get("line")]
    return [Finding("nccl.p2p", Status.WARN, f"{node}: {said}", [f"{node}: inside the node {path.inside()}"] +
                    ([line] if line else []) + quoted,
                    "unset NCCL_P2P_DISABLE, NCCL_P2P_LEVEL and NCCL_SHM_DISABLE (set for a broken machine, they "
                    "cost the bandwidth of NVLink and PCIe); if NCCL says NVLink-connected GPUs cannot talk, check "
                    "the NVLinks (nvidia-smi nvlink -s, clustercheck env)", [node])]


def _bootstrap(paths: Dict[str, NodePath]) -> List[Finding]:
    virtual = {n: p.fallback_of("bootstrap") for n, p in paths.items() if p.fallback_of("bootstrap")}
    if not virtual:
        return []
    return [Finding("nccl.bootstrap", Status.WARN, f"NCCL's bootstrap or socket network runs over loopback, a "
                                                   f"bridge or a virtual interface on {fold(list(virtual))}",
                    [f"{n}: {line}" for n, line in virtual.items()],
                    "set NCCL_SOCKET_IFNAME to the training interface on every node (not lo, docker0, a bridge or a "
                    "veth); in a container, run on the host network: other nodes cannot reach these addresses",
                    list(virtual))]


def judge_paths(paths: Dict[str, NodePath], facts: Optional[Dict[str, Optional[Dict]]] = None) -> List[Finding]:
    """NCCL's path judged: from its lines alone (facts None: a user's log) or beside each node's probe."""
    paths = {n: p for n, p in paths.items() if p.ranks}
    if not paths:
        return []
    order = list(paths)
    findings = _versions(paths, order, facts is not None)
    facts = facts or {}
    for node, path in paths.items():
        findings += _transport(node, path, rdma_active(facts.get(node)))
        findings += _inside(node, path)
    findings += _fallen_back(paths, facts) + _gdr(paths, facts) + _bootstrap(paths) + judge_facts(paths)
    if not findings and any(p.inter or p.intra or p.network for p in paths.values()):
        nets = sorted({p.network for p in paths.values() if p.network})
        findings.append(Finding("nccl.path", Status.OK, f"NCCL's path on {fold(order)}: network "
                                                        f"{', '.join(nets) or 'not said'}, between nodes "
                                                        f"{'; '.join(sorted({p.between() for p in paths.values()}))}, "
                                                        f"inside the node "
                                                        f"{'; '.join(sorted({p.inside() for p in paths.values()}))}"))
    return findings


def path_rows(paths: Dict[str, NodePath]) -> List[List[str]]:
    """The report's table: per node, NCCL's version, the network, the path between nodes and inside the node, the
    plugin, GPUDirect RDMA, the bootstrap."""
    gdr = {True: "yes", False: "no", None: "?"}
    return [[node, ", ".join(p.versions) or "?", p.network or "?", p.between(), p.inside(), p.plugin_name or "-",
             gdr[p.gpudirect], ", ".join(p.bootstrap) or "?"] for node, p in paths.items() if p.ranks]



PATH_HEADERS = ["node", "NCCL", "network", "between nodes", "inside the node", "plugin", "GPUDirect", "bootstrap"]
