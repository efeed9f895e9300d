"""How `clustercheck net` shows its result: the connection matrix, the findings, JSON, Markdown."""

from __future__ import annotations

from typing import Dict, List, Sequence

from tabulate import tabulate

from clustercheck.core.inventory import fold
from clustercheck.core.result import Finding
from clustercheck.display.findings import cell, findings_lines, findings_markdown, json_header, report_header
from clustercheck.node.facts import get
from clustercheck.stages.net.facts import NetFacts

MATRIX_MAX_NODES = 32
SYMBOL = {"open": ".", "filtered": "F", "refused": "R", "unreachable": "U", "unresolved": "N"}
LEGEND = ". open   F filtered (no answer)   R refused   U no route   N name does not resolve   ? no result"


def matrix_rows(facts: NetFacts) -> List[List[str]]:
    """One row per source node, one column per target: the worst state over the ports tried."""
    names = [n.name for n in facts.nodes]
    worst_state: Dict[tuple, str] = {}
    order = ["open", "filtered", "refused", "unreachable", "unresolved"]
    for source, target, _, state, _ in facts.attempts():
        previous = worst_state.get((source, target), "open")
        rank = order.index(state) if state in order else len(order)
        worst_state[(source, target)] = state if rank > order.index(previous) else previous
    rows = []
    for source in names:
        row = [source]
        for target in names:
            if source == target:
                row.append("-")
            else:
                state = worst_state.get((source, target))
                row.append(SYMBOL.get(state, "?") if state else "?")
        rows.append(row)
    return rows


def matrix_lines(facts: NetFacts, tablefmt: str) -> List[str]:
    names = [n.name for n in facts.nodes]
    if len(names) < 2 or len(names) > MATRIX_MAX_NODES:
        return []
    headers = ["from \\ to"] + [str(i + 1) for i in range(len(names))]
    rows = [[f"{i + 1} {row[0]}"] + row[1:] for i, row in enumerate(matrix_rows(facts))]
    return [tabulate(rows, headers=headers, tablefmt=tablefmt), LEGEND]


def _ports_line(facts: NetFacts) -> str:
    sample = {n: get(d, "ports", "ephemeral", default=[]) for n, d in facts.listeners.items()}
    count = sum(len(p) for p in sample.values())
    launch = ", ".join(map(str, facts.launch_ports))
    plan = f"; {facts.plan.describe(len(facts.attempts()))}" if facts.plan and facts.mesh else ""
    retried = (f"; {facts.retried} failed attempts tried again, {facts.recovered} then open" if facts.retried
               else "")
    return f"ports tried: launch {launch} on every node (master {facts.master}), {count} sampled from the " \
           f"nodes' ephemeral ranges{plan}{retried}"


def plan_json(facts: NetFacts) -> Dict:
    if facts.plan is None:
        return {}
    return {"mode": facts.plan.mode, "peers": facts.plan.peers, "pairs": facts.plan.pairs,
            "attempts": len(facts.attempts()), "retried": facts.retried, "recovered": facts.recovered}


def render_terminal(facts: NetFacts, findings: Sequence[Finding], verbose: bool = False) -> str:
    names = [n.name for n in facts.nodes]
    lines = [f"clustercheck net: {len(names)} node{'s' if len(names) != 1 else ''} ({fold(names)}), "
             f"{len(facts.listeners)} listening; {_ports_line(facts)}", ""]
    matrix = matrix_lines(facts, "plain")
    if matrix:
        lines += matrix + [""]
    lines += findings_lines(findings, verbose)
    return "\n".join(lines)


def to_json(facts: NetFacts, findings: Sequence[Finding]) -> Dict:
    return {**json_header("net", findings), "plan": plan_json(facts),
            "nodes": {n.name: {"problem": facts.problems.get(n.name), "listener": facts.listeners.get(n.name),
                               "attempts": facts.mesh.get(n.name)} for n in facts.nodes},
            "links": facts.links, "node_ssh": facts.node_ssh}


def render_markdown(facts: NetFacts, findings: Sequence[Finding], command: str) -> str:
    names = [n.name for n in facts.nodes]
    out = report_header("net", findings, command, [f"- nodes: {len(names)} ({fold(names)})",
                                                    f"- {_ports_line(facts)}"])
    out += findings_markdown(findings)
    matrix = matrix_lines(facts, "github")
    if matrix:
        out += ["## Connections", "", matrix[0], "", f"`{matrix[1]}`", ""]
    if facts.links:
        rows = [[e["from"], e["to"], e.get("rtt_ms", ""), e.get("mbit_s", ""), cell(e.get("error", ""))]
                for e in facts.links]
        out += ["## Links", "", tabulate(rows, headers=["from", "to", "rtt ms", "Mb/s", "error"], tablefmt="github"),
                ""]
    return "\n".join(out)
