"""How `clustercheck bench` shows its result: nccl-tests tables, the pair matrix, findings."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from tabulate import tabulate

from clustercheck.core.inventory import fold
from clustercheck.core.result import Finding
from clustercheck.display.findings import findings_lines, findings_markdown, json_header, report_header
from clustercheck.nccl.path_judge import PATH_HEADERS, path_rows
from clustercheck.onnode.rounds import SLOW
from clustercheck.ranks.runs import launched_by
from clustercheck.stages.bench.facts import BenchFacts
from clustercheck.stages.bench.rules import nccl_paths
from clustercheck.outputs.nccl_tests import format_table, peak


def sweep_tables(facts: BenchFacts) -> List[str]:
    lines: List[str] = []
    for stage in facts.stages:
        if not stage.events("row"):
            continue
        start = stage.start or {}
        lines.append(f"# {start.get('world', '?')} ranks on {len(stage.runs)} nodes, backend {start.get('backend')}"
                     + (f", NCCL {start['nccl']}" if start.get("nccl") else "")
                     + f", algorithm {start.get('nccl_algo') or 'NCCL default' if start.get('nccl') else 'gloo'}"
                     + f", iters up to {stage.config['iters']} and warmup up to {stage.config['warmup']} within "
                       f"{stage.config['size_budget']:g} s a size, "
                       f"data check {'on' if stage.config['check'] else 'off'}")
        for name, coll_rows in facts.figures.by_collective.items():
            lines += format_table(name, coll_rows) + [percent_line(facts, name, coll_rows), ""]
        for event in facts.figures.budget:
            if event.get("stage") == "sweep":
                lines += [f"# stopped after {event['last_bytes']} B: {event['reason']}", ""]
    return lines


def percent_line(facts: BenchFacts, name: str, rows: List[Dict]) -> str:
    """The peak against what the collective should reach, under its table."""
    top, _ = peak(rows)
    if name != "all_reduce":
        return f"# Peak bus bandwidth   : {top:.4g} GB/s"
    if facts.expected is None:
        return f"# Peak bus bandwidth   : {top:.4g} GB/s (no expected figure for {facts.backend} on these nodes)"
    gbps, source = facts.expected.at_largest(max(row["size"] for row in rows))
    return f"# Peak bus bandwidth   : {top:.4g} GB/s = {top / gbps:.0%} of expected {gbps:g} GB/s ({source})"


def search_rounds(facts: BenchFacts, tablefmt: str) -> Optional[str]:
    """The adaptive search round by round: its pairs (the slow ones, and how many were fast)."""
    search = facts.figures.search
    if search is None or search.reference is None:
        return None
    limit = SLOW * search.reference
    table = []
    for index, speeds in enumerate(facts.figures.rounds):
        phases = {phase for r, phase, *_ in search.measured if r == index}
        slow = sorted((s, a, b) for (a, b), s in speeds.items() if s < limit)
        fast = [s for s in speeds.values() if s >= limit]
        table.append([index + 1, ", ".join(sorted(phases)), len(speeds),
                      "; ".join(f"{a} <-> {b} {s:.3f}" for s, a, b in slow[:8]) + (" ..." if len(slow) > 8 else ""),
                      f"{min(fast):.3f} to {max(fast):.3f}" if fast else ""])
    return tabulate(table, headers=["round", "phase", "pairs", "slow pairs (GB/s)", "fast pairs (GB/s)"],
                    tablefmt=tablefmt)


def pair_matrix(facts: BenchFacts, tablefmt: str) -> Optional[str]:
    if facts.figures.pair_mode != "full":
        return None
    speeds = facts.figures.pairs.get("matrix", {})
    names = [n.name for n in facts.nodes]
    table = []
    for a in names:
        row = [a]
        for b in names:
            speed = speeds.get((a, b), speeds.get((b, a)))
            row.append("-" if a == b else f"{speed:.3f}" if speed is not None else "?")
        table.append(row)
    return tabulate(table, headers=["GB/s"] + names, tablefmt=tablefmt)


def nccl_path_table(facts: BenchFacts, tablefmt: str) -> str:
    """Per node, the path NCCL took inside the node and between nodes ("" where none was captured)."""
    rows = path_rows(nccl_paths(facts))
    return tabulate(rows, headers=PATH_HEADERS, tablefmt=tablefmt) if rows else ""


def render_terminal(facts: BenchFacts, findings: Sequence[Finding], verbose: bool = False) -> str:
    names = [n.name for n in facts.nodes]
    lines = [f"clustercheck bench: {len(names)} node{'s' if len(names) != 1 else ''} ({fold(names)}), "
             f"backend {facts.backend}, {sum(facts.nproc.values()) or '?'} ranks" + launched_by(facts.stages), ""]
    lines += sweep_tables(facts)
    matrix = pair_matrix(facts, "simple")
    if matrix:
        lines += ["pairwise exchange, both directions at once:", matrix, ""]
    rounds = search_rounds(facts, "simple")
    if rounds:
        lines += ["pair rounds (adaptive search), both directions at once:", rounds, ""]
    paths = nccl_path_table(facts, "simple")
    if paths:
        lines += ["the path NCCL took (its own INFO lines):", paths, ""]
    lines += findings_lines(findings, verbose)
    return "\n".join(lines)


def to_json(facts: BenchFacts, findings: Sequence[Finding]) -> Dict:
    return {
        **json_header("bench", findings),
        "backend": facts.backend, "nproc": facts.nproc, "avg_busbw": facts.figures.avg_busbw,
        "problems": facts.problems,
        "nccl_paths": {node: {"network": p.network, "one_node": p.one_node, "gpudirect": p.gpudirect,
                              "fallback": p.fallback,
                              "plugin": p.plugin_name, "between": p.between(), "inside": p.inside(), "versions": p.versions,
                              "bootstrap": p.bootstrap, "ranks": len(p.ranks), "files": p.files}
                       for node, p in nccl_paths(facts).items()},
        "stages": [{"name": s.name, "wall_s": s.wall_s, "config": s.config, "start": s.start,
                    "rows": facts.figures.rows, "pairs": s.events("pair"), "budget": s.events("budget"),
                    "nodes": {n: {"exit_code": r.exit_code, "lost": r.lost, "error": r.error}
                              for n, r in s.runs.items()}} for s in facts.stages],
    }


def render_markdown(facts: BenchFacts, findings: Sequence[Finding], command: str, images: Sequence[str] = ()) -> str:
    names = [n.name for n in facts.nodes]
    out = report_header("bench", findings, command, [f"- nodes: {len(names)} ({fold(names)})",
                                                      f"- backend: {facts.backend}"])
    out += findings_markdown(findings)
    tables = sweep_tables(facts)
    if tables:
        out += ["## Sweep (nccl-tests format)", "", "```text", *tables, "```", ""]
    matrix = pair_matrix(facts, "github")
    if matrix:
        out += ["## Pairwise exchange (GB/s)", "", matrix, ""]
    rounds = search_rounds(facts, "github")
    if rounds:
        out += ["## Pair rounds (adaptive search)", "", rounds, ""]
    paths = nccl_path_table(facts, "github")
    if paths:
        out += ["## The path NCCL took", "", paths, ""]
    for image in images:
        out += [f"![{image}]({image})", ""]
    return "\n".join(out)
