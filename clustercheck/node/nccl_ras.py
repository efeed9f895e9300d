"""What NCCL's RAS says of a running job (NCCL 2.24+, on by default), judged: ranks dead or missing, ranks in error,
and the collective whose counts differ between ranks, the ranks behind named with their process and node.

The replies come from onnode/ncclras.py on each node. Both of NCCL's formats are read into one shape, then judged
once: the JSON of `SET FORMAT json` (2.28.7+: communicators, their ranks with status and collective_counts, the
missing_ranks with unresponsive / considered_dead) and the text report of `VERBOSE STATUS` (its Errors and Warnings
sections: DEAD and INCOMPLETE processes, `#g-c (hash) INCOMPLETE` with the missing ranks, `MISMATCH` with "N ranks
have launched up to operation X" and the outlier ranks, `ERROR` blocks), as NCCL's RAS documentation
(docs/userguide/source/troubleshooting/ras.rst) and src/ras/client_support.cc print them. Every RAS thread holds
the whole job's view, so one answer serves all; a node whose port did not answer is UNKNOWN with why. A count
mismatch alone is a WARN (RAS's documentation: often transient, the counts move between queries); beside a hang
the ranks behind are the ones the others wait for. Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from typing import Dict, List, Optional

from clustercheck.core.inventory import fold
from clustercheck.core.result import Finding, Status

_PROCESS = re.compile(r"Process (\d+) on node (\S+) managing GPUs? (\S+)")
_RANK = re.compile(r"Rank (\d+) -- GPU (\S+) managed by process (\d+) on node (\S+)")
_MISSING = re.compile(r"The missing ranks?: ([\d, ]+)")
_BLOCK = re.compile(r"^#(\d+-\d+) \((\w+)\) ([A-Z,]+)$")
_GROUP = re.compile(r"(\d+) ranks? ha(?:s|ve) (?:launched up to operation (\d+)|status (\w+))")
_DIFFERENT = re.compile(r"Communicator ranks have different (.+)")
MAX_SAID = 10


def empty() -> Dict:
    return {"dead": [], "missing": [], "mismatch": [], "errors": [], "comms": 0}


def from_json(doc: Dict) -> Dict:
    found = empty()
    for comm in doc.get("communicators") or []:
        found["comms"] += 1
        name = str(comm.get("hash", "?"))
        for rank in comm.get("missing_ranks") or []:
            status = rank.get("status") or {}
            where = f"rank {rank.get('rank')} (process {rank.get('pid')} on {rank.get('host')}, GPU {rank.get('cuda_dev')})"
            found["dead" if status.get("considered_dead") else "missing"].append(
                {"text": f"{where}{' unresponsive' if status.get('unresponsive') else ''} in communicator {name}",
                 "host": str(rank.get("host"))})
        ranks = comm.get("ranks") or []
        for rank in ranks:
            status = rank.get("status") or {}
            bad = {k: status.get(k) for k in ("init_state", "async_error") if status.get(k) not in (None, 0, 7)}
            if bad or status.get("abort_flag"):
                found["errors"].append({"text": f"rank {rank.get('rank')} on {rank.get('host')} in communicator "
                                                f"{name}: {bad or 'aborted'}", "host": str(rank.get("host"))})
        ops = sorted({op for r in ranks for op in (r.get("collective_counts") or {})})
        for op in ops:
            counts = {r.get("rank"): (r.get("collective_counts") or {}).get(op) for r in ranks}
            if len(set(counts.values())) > 1:
                low = min(c for c in counts.values() if c is not None)     # the ranks behind: listed
                behind = [r for r in ranks if (r.get("collective_counts") or {}).get(op) == low]
                lines = [f"{sum(1 for c in counts.values() if c == v)} rank(s) have launched up to operation {v}"
                         for v in sorted(set(counts.values()) - {None})]
                lines[1:1] = [f"  rank {r.get('rank')} (process {r.get('pid')} on {r.get('host')}, GPU "
                              f"{r.get('cuda_dev')})" for r in behind[:MAX_SAID]]
                found["mismatch"].append({"comm": name, "what": f"{op} operation counts", "lines": lines})
    return found


def from_text(text: str) -> Dict:
    found, section, block = empty(), "", None
    for raw in text.splitlines():
        line = raw.strip()
        if line in ("Errors", "Warnings", "Job summary") or line.startswith("Communicators"):
            section, block = line.split()[0].rstrip("."), None
            continue
        header = _BLOCK.match(line)
        if header or line in ("DEAD", "INCOMPLETE", "TIMEOUT"):
            block = {"comm": header.group(2), "kind": header.group(3)} if header else {"comm": None, "kind": line}
            if header and "MISMATCH" in header.group(3):
                block["mismatch"] = {"comm": header.group(2), "what": "", "lines": []}
                found["mismatch"].append(block["mismatch"])
            continue
        if re.match(r"^\d+\s+\d+\s+\d+", line) and section == "Communicators":
            found["comms"] += int(line.split()[1])
        if block is None:
            continue
        _text_line(found, block, line)
    return found


def _text_line(found: Dict, block: Dict, line: str) -> None:
    kind, process, rank = block["kind"], _PROCESS.search(line), _RANK.search(line)
    mismatch = block.get("mismatch")
    if mismatch is not None:
        different, group = _DIFFERENT.search(line), _GROUP.search(line)
        if different:
            mismatch["what"] = different.group(1)
        elif group:              # RAS lists the members of a group (an outlier) under the group's line
            mismatch["lines"].append(line)
        elif rank:
            mismatch["lines"].append(f"  rank {rank.group(1)} (process {rank.group(3)} on {rank.group(4)}, GPU "
                                     f"{rank.group(2)})")
        return
    where = "dead" if kind == "DEAD" else "missing" if "INCOMPLETE" in kind else "errors" if "ERROR" in kind else ""
    if not where:
        return
    if process:
        found[where].append({"text": f"process {process.group(1)} on {process.group(2)} (GPU {process.group(3)})",
                             "host": process.group(2)})
    elif rank:
        found[where].append({"text": f"rank {rank.group(1)} (process {rank.group(3)} on {rank.group(4)}, GPU "
                                     f"{rank.group(2)})", "host": rank.group(4)})
    elif _MISSING.search(line):
        found[where].append({"text": f"{line} in communicator {block['comm']}", "host": ""})
    elif where == "errors" and line:
        found[where].append({"text": f"communicator {block['comm']}: {line}", "host": ""})


def read_reply(doc: Dict) -> Optional[Dict]:
    """The RAS report in one shape (None: no report, or one that reads as neither format)."""
    reply = doc.get("reply") or ""
    if doc.get("format") == "json":
        try:
            parsed = json.loads(reply)
        except ValueError:
            return None
        return from_json(parsed) if isinstance(parsed, dict) and "communicators" in parsed else None
    found = from_text(reply)
    return found if found["comms"] or any(found[k] for k in ("dead", "missing", "mismatch", "errors")) else None


def judge_ras(replies: Dict[str, Dict], hung: bool = False) -> List[Finding]:
    """replies: node -> onnode/ncclras.py's document. hung: asked because the job stopped moving."""
    read = {node: read_reply(doc) for node, doc in replies.items() if doc.get("answered")}
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
            findings.append(Finding(f"nccl.ras", Status.FAIL, f"NCCL's RAS: {len(items)} rank(s) or process(es) "
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
