"""Facts NCCL prints that cannot hold on a healthy job (issue 48), judged from its own lines alone: each a WARN
that quotes the line and says what to do (an INFO line alone is never a FAIL).

- P2P or SHM between ranks that NCCL's own prefixes put on hosts of different names: NCCL took two hosts for one
  (its host hash is the host name and /proc/sys/kernel/random/boot_id, or NCCL_HOSTID: containers cloned from one
  image, a NCCL_HOSTID set alike), and the transfers will fail or hang;
- a network connection (`via NET/IB/0`, `via NET/Socket/1`) between ranks on one host: NCCL's `nNodes 1`, or both
  ranks on one host name with one bootstrap address (the same machine: not two machines sharing a name): P2P and
  SHM were unusable between them (different containers without a shared IPC namespace or /dev/shm, or turned off);
- a bootstrap or socket interface that changes between nodes while NCCL_SOCKET_IFNAME is unset: NCCL picked the
  first interface it liked on each (src/misc/socket.cc), and nodes that speak on different networks may not reach
  each other;
- GPUDirect RDMA on some ranks of a node and not on others: the GPUs too far from their NIC (NCCL_NET_GDR_LEVEL,
  src/graph/paths.cc) go through host memory.

Where the ranks sit is read from NCCL's connection lines (`Channel 00/0 : 0[0] -> 1[1] via P2P/IPC`, printed by the
sender, by the receiver where it says `[receive]`: transport/p2p.cc, shm.cc, net.cc) and its `comm 0x.. rank N
nRanks M` lines; a rank whose host is ambiguous (several communicators of one size) is not judged. Only hosts
NCCL's own `host:pid:tid` prefix names count: a launcher's rank label or a file's name is not a host. Pure: no I/O.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Set, Tuple

from clustercheck.core.compare import group_by_value
from clustercheck.core.inventory import fold
from clustercheck.core.result import Finding, Status

RDMA_PREFIXES = ("NET/IB", "NET/AWS", "NET/Libfabric", "NET/OFI", "NET/IBext")


def _real(rank: Dict) -> bool:
    """A process whose host NCCL's own prefix named (where() gives pid 0 to any other origin)."""
    return bool(rank.get("pid")) and not str(rank.get("host", "")).startswith(("rank ", "pid "))


def _hosts_of_ranks(ranks: List[Dict]) -> Dict[Tuple, Set[str]]:
    """(nRanks, rank) -> the hosts whose processes are that rank: from the comm lines and connection printers."""
    found: Dict[Tuple, Set[str]] = {}
    for rank in ranks:
        if not _real(rank):
            continue
        own = {rank["rank"]} if rank.get("rank") is not None else set()
        own |= {int(pair.split(">")[0]) for pair in rank.get("peers") or {}}
        for number in own:
            found.setdefault((rank.get("nranks"), number), set()).add(rank["host"])
    return found


def _addresses(ranks: List[Dict]) -> Dict[str, Set[str]]:
    found: Dict[str, Set[str]] = {}
    for rank in ranks:
        if rank.get("bootstrap"):
            found.setdefault(rank["host"], set()).add(rank["bootstrap"]["addr"])
    return found


def _misplaced(ranks: List[Dict]) -> Tuple[List[Tuple[str, str, str]], List[Tuple[str, str]]]:
    """([(host, peer host, line)] of P2P/SHM between hosts, [(host, line)] of a network inside one host)."""
    where = _hosts_of_ranks(ranks)
    addresses = _addresses(ranks)
    across, inside = [], []
    for rank in ranks:
        if not _real(rank):
            continue
        host = rank["host"]
        one_node = rank.get("nnodes") == 1
        for pair, (table, kind, line) in (rank.get("peers") or {}).items():
            peer_hosts = where.get((rank.get("nranks"), int(pair.split(">")[1])), set())
            peer = next(iter(peer_hosts)) if len(peer_hosts) == 1 else None
            if table == "intra" and kind != "NVLS" and peer and peer != host:
                across.append((host, peer, line))
            elif table == "inter" and (one_node or peer == host and len(addresses.get(host, ())) == 1):
                inside.append((host, line))
    return across, inside


def _placement(ranks: List[Dict]) -> List[Finding]:
    across, inside = _misplaced(ranks)
    findings = []
    if across:
        nodes = sorted({h for h, _, _ in across} | {p for _, p, _ in across})
        findings.append(Finding(
            "nccl.hosts", Status.WARN, f"NCCL took hosts of different names for one: P2P or shared memory between "
                                       f"ranks on {fold(nodes)}",
            [f"{host}: {line} (the peer is on {peer})" for host, peer, line in across[:6]],
            "give every host its own identity: a distinct hostname and /proc/sys/kernel/random/boot_id per machine "
            "(containers cloned from one image share them), and unset NCCL_HOSTID or make it differ per host; "
            "P2P and SHM cannot cross machines, so these transfers fail or hang", nodes))
    if inside:
        nodes = sorted({h for h, _ in inside})
        findings.append(Finding(
            "nccl.hosts", Status.WARN, f"ranks on one host talk over the network: {fold(nodes)} (P2P and shared "
                                       f"memory were not usable between them)",
            [f"{host}: {line}" for host, line in inside[:6]],
            "run the ranks of a host in one container (or share the IPC namespace and /dev/shm: docker --ipc=host, "
            "--shm-size), and unset NCCL_P2P_DISABLE / NCCL_SHM_DISABLE: a network between GPUs of one host costs "
            "the bandwidth of NVLink and PCIe", nodes))
    return findings


def _interfaces(paths: Dict, key: str, what: str) -> Optional[Finding]:
    """The interface NCCL chose (the bootstrap's, or the socket net's first) per node, where it is not one."""
    chosen: Dict[str, str] = {}
    lines: Dict[str, str] = {}
    for node, path in paths.items():
        names = set()
        for rank in path.ranks:
            if key == "bootstrap" and rank.get("bootstrap"):
                names.add(rank["bootstrap"]["if"])
                lines.setdefault(node, f"Bootstrap : Using {rank['bootstrap']['if']}:{rank['bootstrap']['addr']}")
            elif key == "socket" and rank.get("socket_ifs"):
                names.add(rank["socket_ifs"][0])
                lines.setdefault(node, rank.get("socket_line") or "NET/Socket : Using [0]" + rank["socket_ifs"][0])
        if names:
            chosen[node] = ", ".join(sorted(names))
    order = list(paths)
    grouping = group_by_value(chosen, order) if chosen else None
    mixed = [n for n, v in chosen.items() if ", " in v]
    if not grouping or (grouping.uniform and not mixed):
        return None
    odd = sorted(set(grouping.odd_nodes) | set(mixed), key=order.index)
    return Finding("nccl.interface", Status.WARN, f"NCCL's {what} interface changes between nodes with "
                                                  f"NCCL_SOCKET_IFNAME unset: {fold(odd)}",
                   grouping.evidence() + [f"{n}: {lines[n]}" for n in odd[:4] if n in lines],
                   "set NCCL_SOCKET_IFNAME (and GLOO_SOCKET_IFNAME) to the one interface every node reaches the "
                   "others on (e.g. NCCL_SOCKET_IFNAME=ib0 or =eth0, or =^docker,lo to exclude): unset, NCCL picks "
                   "the first it likes on each node, and nodes on different networks cannot connect", odd)


def _socket_ifname_set(paths: Dict) -> bool:
    return any("NCCL_SOCKET_IFNAME" in (r.get("env") or {}) for p in paths.values() for r in p.ranks)


def _gdr_some(paths: Dict) -> List[Finding]:
    """Processes without GPUDirect RDMA on a node where others of its ranks have it."""
    off: Dict[str, str] = {}
    for node, path in paths.items():
        rdma = [r for r in path.ranks if any(n.startswith(RDMA_PREFIXES) for n in r.get("inter") or {})]
        with_gdr = [r for r in rdma if any(n.endswith("/GDRDMA") for n in r["inter"])]
        without = [r for r in rdma if not any(n.endswith("/GDRDMA") for n in r["inter"])]
        if with_gdr and without:
            rank = without[0]
            line = next((ln for table, kind, ln in (rank.get("peers") or {}).values() if table == "inter"), None)
            off[node] = line or f"between nodes {', '.join(sorted(rank['inter']))}"
    if not off:
        return []
    nodes = list(off)
    return [Finding("nccl.gdr", Status.WARN, f"GPUDirect RDMA on some ranks only: {fold(nodes)} (the others' "
                                             f"transfers go through host memory)",
                    [f"{n}: {line}" for n, line in list(off.items())[:6]],
                    "check each GPU's distance to its NIC (nvidia-smi topo -m): GPUs behind another PCIe switch or "
                    "CPU than their NIC get no GPUDirect at the default NCCL_NET_GDR_LEVEL; bind each rank to the "
                    "GPU beside a NIC (NCCL_IB_HCA per rank) or raise NCCL_NET_GDR_LEVEL where the platform allows",
                    nodes)]


def judge_facts(paths: Dict) -> List[Finding]:
    """The impossible facts of NCCL's lines over the nodes' paths (node -> path_judge.NodePath)."""
    ranks = [r for p in paths.values() for r in p.ranks]
    findings = _placement(ranks)
    if not _socket_ifname_set(paths):
        for key, what in (("bootstrap", "bootstrap"), ("socket", "socket network")):
            found = _interfaces(paths, key, what)
            if found:
                findings.append(found)
    return findings + _gdr_some(paths)
