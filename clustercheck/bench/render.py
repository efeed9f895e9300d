"""How `clustercheck bench` shows its result: nccl-tests tables, the pair matrix, findings."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from tabulate import tabulate

from clustercheck.bench.gather import BenchFacts
from clustercheck.bench.table import format_table
from clustercheck.inventory import fold
from clustercheck.render import findings_lines, findings_markdown, report_header
from clustercheck.result import Finding, sort_findings, worst


def sweep_tables(facts: BenchFacts) -> List[str]:
    lines: List[str] = []
    for stage in facts.stages:
        if stage.name != "sweep" or not stage.events("row"):
            continue
        start = stage.start or {}
        lines.append(f"# {start.get('world', '?')} ranks on {len(stage.runs)} nodes, backend {start.get('backend')}"
                     + (f", NCCL {start['nccl']}" if start.get("nccl") else "")
                     + f", algorithm {start.get('nccl_algo') or 'NCCL default' if start.get('nccl') else 'gloo'}"
                     + f", iters {stage.config['iters']}, warmup {stage.config['warmup']}, "
                       f"data check {'on' if stage.config['check'] else 'off'}")
        for name, coll_rows in facts.figures.by_collective.items():
            lines += format_table(name, coll_rows) + [""]
    return lines


def pair_matrix(facts: BenchFacts, tablefmt: str) -> Optional[str]:
    if not any(s.name == "pairwise" for s in facts.stages):
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


def render_terminal(facts: BenchFacts, findings: Sequence[Finding], verbose: bool = False) -> str:
    names = [n.name for n in facts.nodes]
    lines = [f"clustercheck bench: {len(names)} node{'s' if len(names) != 1 else ''} ({fold(names)}), "
             f"backend {facts.backend}, {sum(facts.nproc.values()) or '?'} ranks", ""]
    lines += sweep_tables(facts)
    matrix = pair_matrix(facts, "simple")
    if matrix:
        lines += ["pairwise exchange, both directions at once:", matrix, ""]
    lines += findings_lines(findings, verbose)
    return "\n".join(lines)


def to_json(facts: BenchFacts, findings: Sequence[Finding]) -> Dict:
    status = worst(findings)
    return {
        "schema": 1, "command": "bench", "verdict": status.name, "exit_code": status.exit_code,
        "backend": facts.backend, "nproc": facts.nproc, "avg_busbw": facts.figures.avg_busbw,
        "findings": [f.to_dict() for f in sort_findings(findings)], "problems": facts.problems,
        "stages": [{"name": s.name, "wall_s": s.wall_s, "config": s.config, "start": s.start,
                    "rows": facts.figures.rows if s.name == "sweep" else [],
                    "pairs": s.events("pair"),
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
    for image in images:
        out += [f"![{image}]({image})", ""]
    return "\n".join(out)
