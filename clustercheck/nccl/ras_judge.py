"""What NCCL's RAS says of a running job (NCCL 2.24+, on by default), judged: ranks dead or missing, ranks in error,
and the collective whose counts differ between ranks, the ranks behind named with their process and node.

The replies come from onnode/nccl_ras_client.py on each node, which reads both of NCCL's formats into one shape there (only
that crosses the network; its reader is used here for a reply recorded whole), judged here once: the JSON of `SET FORMAT json` (2.28.7+: communicators, their ranks with status and collective_counts, the
missing_ranks with unresponsive / considered_dead) and the text report of `VERBOSE STATUS` (its Errors and Warnings
sections: DEAD and INCOMPLETE processes, `#g-c (hash) INCOMPLETE` with the missing ranks, `MISMATCH` with "N ranks
have launched up to operation X" and the outlier ranks, `ERROR` blocks), as NCCL's RAS documentation
(docs/userguide/source/troubleshooting/ras.rst) and src/ras/client_support.cc print them. Every RAS thread holds
the whole job's view, so one answer serves all; a node whose port did not answer is UNKNOWN with why. A count
mismatch alone is a WARN (RAS's documentation: often transient, the counts move between queries); beside a hang
the ranks behind are the ones the others wait for. Pure: no I/O.
"""

from __future__ import annotations

from typing import Dict, List

from clustercheck.core.inventory import fold
from clustercheck.core.result import Finding, Status
from clustercheck.onnode.nccl_ras_client import MAX_SAID, read_reply

def judge_ras(replies: Dict[str, Dict], hung: bool = False) -> List[Finding]:
    """replies: node -> onnode/nccl_ras_client.py's document. hung: asked because the job stopped moving."""
    read = {node: doc["view"] if "view" in doc else read_reply(doc) for node, doc in replies.items()
            if doc.get("answered")}
    unknown = {node: doc.get("why") or "its reply reads as neither of NCCL's RAS formats"
               for node, doc in replies.items() if not read.get(node)}
    findings = _unknown(unknown)
    views = [v for v in read.values() if v]
    if not views:
        return findings
    view = max(views, key=lambda v: sum(len(v[k]) for k in ("dead", "missing", "mismatch", "errors")))
    findings += _problems(view, hung)
    if not any(view[k] for k in ("dead", "missing", "mismatch", "errors")):
        findings.append(Finding("nccl.ras", Status.OK, f"NCCL's RAS (asked on {fold(sorted(read))}): "
                                                       f"{view['comms']} communicator(s), every rank answering, no "
                                                       f"error, collective counts agree"))
    return findings


def _unknown(unknown: Dict[str, str]) -> List[Finding]:
    by_why: Dict[str, List[str]] = {}
    for node, why in unknown.items():
        by_why.setdefault(why, []).append(node)
    return [Finding("nccl.ras", Status.UNKNOWN, f"NCCL's RAS could not be read on {fold(nodes)}: {why}", [],
                    "RAS answers on NCCL_RAS_ADDR (localhost:28028) of a node running an NCCL 2.24+ job with "
                    "NCCL_RAS_ENABLE unset or 1", nodes) for why, nodes in by_why.items()]


def _problems(view: Dict, hung: bool) -> List[Finding]:
    findings = []
    for key, what, remedy in (("dead", "dead (unreachable over the RAS network for 60 s)",
                               "the dead process's node: its log, dmesg (OOM, Xid), clustercheck env on it; restart "
                               "the job without it"),
                              ("missing", "missing from their communicators (unresponsive)",
                               "the missing ranks' nodes: a stopped or hung process (clustercheck stacks on them), "
                               "a network that drops the RAS traffic"),
                              ("errors", "in error", "the rank's own log: NCCL's WARN before the error")):
        items = view[key]
        if items:
            hosts = sorted({i["host"] for i in items if i["host"]})
            findings.append(Finding("nccl.ras", Status.FAIL, f"NCCL's RAS: {len(items)} rank(s) or process(es) "
                                                              f"{what}{' on ' + fold(hosts) if hosts else ''}",
                                    [i["text"] for i in items[:MAX_SAID]], remedy, hosts))
    for mismatch in view["mismatch"]:
        groups = [line for line in mismatch["lines"] if not line.startswith("  ")]
        stuck = " (the job stopped moving: the ranks at the lowest count are the ones the others wait for)" if hung \
            else ""
        # no node is blamed: RAS lists the smaller group, which may be ahead as well as behind
        findings.append(Finding("nccl.ras", Status.WARN, f"NCCL's RAS: ranks disagree on "
                                                         f"{mismatch['what'] or 'their state'} in communicator "
                                                         f"{mismatch['comm']}: {'; '.join(groups)}{stuck}",
                                mismatch["lines"][:MAX_SAID + 3],
                                "repeat the query: counts that move are normal; counts that stay put name the ranks "
                                "behind: look at their stacks (clustercheck stacks)"))
    return findings
