"""NCCL's path in a user's log, node by node, on explain's first screen and in its JSON: the network between
nodes as users name it, what carried the traffic inside the node, the net plugin, GPUDirect RDMA, the line that
shows a fallback; judged from the log alone (nccl/path_judge.py with no probe beside it), with what NCCL's own
diagnostics said (nccl/diag_judge.py)."""

from __future__ import annotations

from typing import Dict, List, Tuple

from clustercheck.core.inventory import fold
from clustercheck.core.result import Finding
from clustercheck.nccl.diag_judge import judge_nccl_diag
from clustercheck.nccl.path_judge import NodePath, judge_paths, paths_by_host


def node_doc(path: NodePath) -> Dict:
    return {"network": path.network, "one_node": path.one_node, "gpudirect": path.gpudirect, "fallback": path.fallback,
            "plugin": path.plugin_name, "between": path.between(), "inside": path.inside(),
            "versions": path.versions, "bootstrap": path.bootstrap,
            "fallbacks": [line for _, line in path.fallbacks], "ranks": len(path.ranks)}


def read_paths(nccl_ranks: Dict) -> Dict[str, NodePath]:
    return paths_by_host({"ranks": [r for r in nccl_ranks.values() if r["lines"]]})


def judge(nccl_ranks: Dict) -> Tuple[Dict[str, Dict], List[Finding]]:
    """(node -> its path for --json, the findings) of the NCCL lines explain read."""
    paths = read_paths(nccl_ranks)
    ranks = [r for r in nccl_ranks.values() if r["lines"]]
    return {node: node_doc(p) for node, p in paths.items()}, judge_paths(paths) + judge_nccl_diag(ranks)


def _yes_no(value) -> str:
    return "?" if value is None else "yes" if value else "no"


def screen_lines(docs: Dict[str, Dict], limit: int = 12) -> List[str]:
    """The path per node, nodes with the same path folded into one row (ClusterShell's way): shown without -v,
    since the path is what a user runs explain on an NCCL log to learn."""
    if not docs:
        return []
    rows: Dict[Tuple, List[str]] = {}
    for node, doc in docs.items():
        if not (doc["network"] or doc["plugin"] or doc["fallback"] or doc["between"] != "-" or doc["inside"] != "-"):
            continue            # a node whose lines say nothing of the path (a WARN, a DIAG report alone)
        row = (doc["network"] or ("none (one node)" if doc.get("one_node") else "?"), doc["between"], doc["inside"], doc["plugin"] or "-", _yes_no(doc["gpudirect"]),
               doc["fallback"] or "-")
        rows.setdefault(row, []).append(node)
    if not rows:
        return []
    lines = ["NCCL's path (from its own lines):"]
    for row, nodes in list(rows.items())[:limit]:
        network, between, inside, plugin, gdr, fallback = row
        lines.append(f"  {fold(nodes)}: network {network}; between nodes {between}; inside the node {inside}; "
                     f"plugin {plugin}; GPUDirect RDMA {gdr}")
        if fallback != "-":
            lines.append(f"    fallback: {fallback}")
    if len(rows) > limit:
        lines.append(f"  ... {len(rows) - limit} more distinct path(s): --json has every node")
    return lines + [""]
