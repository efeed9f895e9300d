"""Is a directory one filesystem for every node, or a disk per node? The first node writes a token
into it; every node looks for it. The guides users follow put data and checkpoints on a shared
filesystem, or a full copy on every node: a path shared by some nodes only is the trap."""

from __future__ import annotations

import shlex
import uuid
from typing import Dict, List, Sequence

from clustercheck.core.inventory import Node, fold
from clustercheck.core.result import Finding, Status
from clustercheck.transport.base import NodeResult, Transport
from clustercheck.transport.fanout import Cluster


def probe_shared(cluster: Cluster, nodes: Sequence[Node], directory: str, timeout_s: float) -> Dict[str, str]:
    """node -> "sees" / "does not see" / why it could not look, for a token the first node wrote."""
    token = f"{directory.rstrip('/')}/.clustercheck-shared-{uuid.uuid4().hex[:12]}"
    quoted = shlex.quote(token)
    [written] = cluster.run(f"umask 022; echo clustercheck > {quoted}", timeout_s, nodes[:1])
    if not written.ok:
        return {nodes[0].name: f"could not write {token}: {(written.stderr or written.detail).strip()[:200]}"}

    def look(transport: Transport, node: Node) -> NodeResult:
        return transport.run(f"test -d {shlex.quote(directory)} || exit 3; test -e {quoted}", timeout_s)

    views = {r.node: ("sees" if r.ok else "does not see" if r.exit_code == 1 else
                      "has no such directory" if r.exit_code == 3 else f"could not look: {r.detail}")
             for r in cluster.each(look, nodes)}
    cluster.run(f"rm -f {quoted}", timeout_s, nodes[:1])
    return views


def judge_shared(directory: str, views: Dict[str, str], order: Sequence[str]) -> List[Finding]:
    check = f"storage.{directory}"
    seeing = [n for n in order if views.get(n) == "sees"]
    blind = [n for n in order if views.get(n) == "does not see"]
    unknown = [n for n in order if n in views and views[n] not in ("sees", "does not see")]
    if unknown:
        return [Finding(check, Status.WARN, f"could not tell whether {directory} is shared",
                        [f"{n}: {views[n]}" for n in unknown], "check that the directory exists and is writable on "
                                                                  "every node", unknown)]
    if len(seeing) == len(views):
        where = "shared by every node" if len(views) > 1 else "on the one node"
        return [Finding(check, Status.OK, f"{directory}: {where}")]
    if seeing == order[:1]:
        return [Finding(check, Status.OK, f"{directory}: a disk per node (the same path, node-local); data and "
                                          f"checkpoints there need a full copy on every node")]
    return [Finding(check, Status.FAIL, f"{directory} is shared by some nodes only",
                    [f"{fold(seeing)}: see what {order[0]} wrote", f"{fold(blind)}: do not"],
                    "mount the same filesystem at that path on every node (or none): ranks that read or resume "
                    "from it see different files", blind)]
