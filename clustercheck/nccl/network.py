"""The network NCCL used, named as users know it, whether GPUDirect RDMA carried it, and the line that shows a
fallback: read from NCCL's own lines alone (onnode/nccl_log_reader.py's summaries), so that a user's log is judged from
its own evidence.

NCCL names its net by the transport or plugin (`ncclNet->name`: "IB", "Socket", "IBext_v8", "AWS Libfabric",
"Libfabric"), never by the fabric under it. The fabric is told by what NCCL prints beside it: the port's link layer
on each IB device (`[0]mlx5_0:1/IB`, `/RoCE`: NCCL_IB_LLSTR, src/transport/net_ib), and the libfabric provider
aws-ofi-nccl selected (`NET/OFI Selected provider is efa`). Pure: no I/O.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Dict, List, Optional, Tuple

NETWORKS = ("InfiniBand", "RoCE", "EFA", "libfabric", "Socket", "none")

# ncclNet->name (lower case, by prefix) -> the family of transport it is; the HPC-X plugin calls itself "IBext"
# (its v8 "IBext_v8") and "NCCL RDMA Plugin", the SHARP plugin's collnet is "SHARP"; aws-ofi-nccl "AWS Libfabric"
# up to 1.7, "Libfabric" after, "OFI" in its first releases
NET_FAMILY = (("socket", "socket"), ("ibext", "ib"), ("ib", "ib"), ("nccl rdma plugin", "ib"),
              ("aws libfabric", "ofi"), ("libfabric", "ofi"), ("ofi", "ofi"))
# variables that take a transport away (NCCL's docs, Environment Variables): (name, values that do, what it does)
FORCED = (("NCCL_IB_DISABLE", ("1",), "sockets between nodes: NCCL_IB_DISABLE=1"),
          ("NCCL_NET", ("socket",), "sockets between nodes: NCCL_NET=Socket"),
          ("NCCL_P2P_DISABLE", ("1",), "no P2P between the node's GPUs: NCCL_P2P_DISABLE=1"),
          ("NCCL_P2P_LEVEL", ("loc", "0"), "no P2P between the node's GPUs: NCCL_P2P_LEVEL=LOC"),
          ("NCCL_SHM_DISABLE", ("1",), "no shared memory inside the node: NCCL_SHM_DISABLE=1"))


# EC2's own host names (ip-10-0-1-23, ip-172-31-6-104.ec2.internal): aws-ofi-nccl there runs over EFA, the only RDMA
# NIC an instance has (its other providers, tcp and sockets, are what it falls back to and name themselves)
EC2_HOST = re.compile(r"^ip-\d{1,3}-\d{1,3}-\d{1,3}-\d{1,3}(?:\.|$)")


def family(name: str) -> Optional[str]:
    low = (name or "").strip().lower()
    return next((fam for prefix, fam in NET_FAMILY if low.startswith(prefix)), None)


def _ranks_say(ranks: List[Dict], key: str) -> List:
    return [r[key] for r in ranks if r.get(key)]


def job_context(ranks: List[Dict]) -> Dict:
    """What one node's lines may lack and another's say: the IB ports' link layers, the libfabric provider, the
    network most of the job's lines show."""
    job = {"link_layers": sorted({ll for r in ranks for ll in r.get("link_layers") or []}),
           "provider": next(iter(_ranks_say(ranks, "ofi_provider")), None),
           "ec2": any(EC2_HOST.match(str(r.get("host") or "")) for r in ranks),
           "rdma_line": next(iter(_ranks_say(ranks, "rdma_line")), None)}
    hosts = {r.get("host") for r in ranks}
    job["hosts"] = len(hosts) if ranks and all(h and h != "?" for h in hosts) else None  # None: a line names none
    inter: Dict[str, int] = {}
    for rank in ranks:
        for name, count in (rank.get("inter") or {}).items():
            inter[name] = inter.get(name, 0) + count
    job["network"] = network(ranks, inter, job)     # for a node whose own lines do not say it
    return job


def _families(ranks: List[Dict], inter: Dict[str, int]) -> Counter:
    found: Counter = Counter()
    for name, count in inter.items():
        found[family(name.split("/")[1])] += count
    if not found:
        for name in _ranks_say(ranks, "network"):
            found[family(name)] += 1
    if not found:       # no connection, no "Using network": the net that started says it
        fam = _started(ranks)
        if fam:
            found[fam] += 1
    found.pop(None, None)
    return found


def _started(ranks: List[Dict]) -> Optional[str]:
    """The family of the net NCCL's start-up lines show in use: IB ports listed, aws-ofi-nccl's lines (NET/OFI, not
    its failures), sockets listed, a WARN of a net's own transfers (`NET/IB : Got completion from peer`); else
    sockets where the IB transport found no device or failed to start and no plugin loaded: NCCL tries its nets
    in order (a plugin, IB, Socket: src/plugin/net.cc, net.cc) and Socket is the one left."""
    ofi_failed = any("NET/OFI" in line for r in ranks for line in r.get("net_failures") or [])
    if _ranks_say(ranks, "link_layers"):
        return "ib"
    if _ranks_say(ranks, "ofi_provider") or (_ranks_say(ranks, "ofi") and not ofi_failed):
        return "ofi"
    if _ranks_say(ranks, "socket_ifs"):
        return "socket"
    warned = _ranks_say(ranks, "warned_net")
    if warned:
        return family(Counter(warned).most_common(1)[0][0])
    loaded = any((r.get("plugin") or {}).get("status") == "loaded" for r in ranks)
    if any("IB" in (r.get("nets_failed") or []) for r in ranks) and not loaded:
        return "socket"
    return None


def network(ranks: List[Dict], inter: Dict[str, int], job: Dict) -> Optional[str]:
    """The network NCCL chose, in NETWORKS' words (on one node too: the net it would use between nodes); None
    where the lines do not show it (or a plugin this table does not know)."""
    found = _families(ranks, inter)
    if not found:
        return None
    fam = found.most_common(1)[0][0]
    if fam == "socket":
        return "Socket"
    if fam == "ib":
        layers = {ll for r in ranks for ll in r.get("link_layers") or []} or set(job.get("link_layers") or [])
        return "RoCE" if layers and layers <= {"RoCE"} else "InfiniBand"
    # aws-ofi-nccl runs other providers too (cxi on Slingshot, tcp, verbs): EFA only where the provider or the AWS
    # platform it configures for (`Running on p4d.24xlarge platform`) says so
    provider = (next(iter(_ranks_say(ranks, "ofi_provider")), None) or job.get("provider") or "").lower()
    if not provider and (job.get("ec2") or any(EC2_HOST.match(str(r.get("host") or "")) for r in ranks)):
        provider = "efa"
    return "EFA" if provider == "efa" else "libfabric"


def gpudirect(ranks: List[Dict], inter: Dict[str, int], net: Optional[str]) -> Optional[bool]:
    """Whether GPUDirect RDMA carried the traffic between nodes: the connections say it (`/GDRDMA`), else
    NCCL's or aws-ofi-nccl's GPUDirect lines; None where nothing says (and on sockets, which have none)."""
    rdma = {n: c for n, c in inter.items() if family(n.split("/")[1]) in ("ib", "ofi")}
    if rdma:
        return any(n.endswith("/GDRDMA") for n in rdma)
    said: Counter = Counter()
    for rank in ranks:
        said.update(rank.get("gdr") or {})
    if net == "Socket":     # sockets have none: False only where NCCL says so (`NET/Socket : GPU Direct RDMA Disabled`)
        return False if said.get("disabled") else None
    if said.get("disabled") and not said.get("enabled"):
        return False
    return True if said.get("enabled") else None


def _virtual(name: str, addr: str, virtual_if) -> bool:
    return bool(virtual_if.match(name) or addr.startswith(("127.", "::1", "172.17.")))


def _virtual_bootstrap(ranks: List[Dict], virtual_if, net: Optional[str] = None) -> Optional[str]:
    """The bootstrap, or an interface of NCCL's socket net (by default NCCL leaves lo and docker out of it unless
    nothing else is up: src/misc/socket.cc), on loopback, Docker's network, a bridge or a virtual interface. The
    socket net's first interface is the bootstrap's too where no bootstrap line says otherwise (the same search
    picks both); the ones after it carry traffic only where the job runs on sockets: a `virbr0` listed second
    beside InfiniBand is no path of the job's."""
    for rank in ranks:
        boot = rank.get("bootstrap")
        if boot and _virtual(boot["if"], boot["addr"], virtual_if):
            return boot.get("line") or f"Bootstrap : Using {boot['if']}:{boot['addr']}"
    for rank in ranks:
        lines = rank.get("socket_lines") or []      # 2.3's, one per interface
        for i, (name, addr) in enumerate(zip(rank.get("socket_ifs") or [], rank.get("socket_addrs") or [])):
            if i and net not in (None, "Socket"):
                continue
            if _virtual(name, addr, virtual_if):
                return lines[i] if i < len(lines) else rank.get("socket_line") or f"NET/Socket : Using [{i}]{name}:{addr}"
    return None


def rdma_shown(ranks: List[Dict], job: Optional[Dict] = None) -> Optional[str]:
    """The line that shows RDMA hardware or software beside a job on sockets: an RDMA device named in any line
    (this node's, else another's of the same job), a net plugin that loaded, aws-ofi-nccl's provider (None: the
    lines show none; a machine without RDMA runs on sockets as it should)."""
    named = next(iter(_ranks_say(ranks, "rdma_line")), None)
    if named:
        return named
    loaded = [r["plugin"] for r in ranks if (r.get("plugin") or {}).get("status") == "loaded"]
    if loaded and family(loaded[0].get("name", "")) != "socket":
        return f"NCCL INFO NET/Plugin : Loaded net plugin {loaded[0].get('name')}"
    provider = next(iter(_ranks_say(ranks, "ofi_provider")), None)
    if provider and provider.lower() not in ("tcp", "sockets", "udp"):
        return f"NCCL INFO NET/OFI Selected provider is {provider}"
    return (job or {}).get("rdma_line")


def fallbacks(ranks: List[Dict], net: Optional[str], virtual_if, job: Optional[Dict] = None) -> List[Tuple[str, str]]:
    """(kind, the NCCL line) of each way the job is off the path it was meant to take, the one that costs most
    first: "sockets" (a variable, or a net plugin or the IB transport that failed or found no device, with the job
    then on sockets), "inside" (P2P or SHM turned off by a variable), "bootstrap" (on loopback, docker0 or
    Docker's default 172.17/16, a bridge or a virtual interface)."""
    env: Dict[str, str] = {}
    for rank in ranks:
        env.update(rank.get("env") or {})
    found = [("sockets" if what.startswith("sockets") else "inside", f"{name} set by environment to {env[name]}")
             for name, values, what in FORCED if env.get(name, "").lower() in values]
    failures = [line for r in ranks for line in r.get("net_failures") or []]
    on_sockets = net == "Socket" or net is None and any(r.get("socket_ifs") for r in ranks)
    if failures and on_sockets:
        found.append(("sockets", failures[0]))      # after a variable: NCCL_IB_DISABLE is why IB found no device
    elif on_sockets and any((r.get("nnodes") or 0) != 1 for r in ranks):
        shown = rdma_shown(ranks, job)      # sockets though the log shows RDMA: said with the line that shows it
        if shown:
            found.append(("sockets", shown))
    boot = _virtual_bootstrap(ranks, virtual_if, net)
    if boot:
        found.append(("bootstrap", boot))
    return sorted(found, key=lambda kind_line: ("sockets", "inside", "bootstrap").index(kind_line[0]))


def forced_what(line: Optional[str]) -> Optional[str]:
    """What a variable's line turns off (None for a line of another kind)."""
    return next((what for name, _, what in FORCED if line and line.startswith(name + " ")), None)


def plugin_name(ranks: List[Dict]) -> Optional[str]:
    loaded = [r["plugin"]["name"] for r in ranks if r.get("plugin") and r["plugin"].get("status") == "loaded"]
    collnet = _ranks_say(ranks, "collnet")
    names = sorted(set(loaded)) + [f"collnet {c}" for c in sorted(set(collnet))]
    return ", ".join(names) or None
