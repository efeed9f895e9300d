"""The readiness report: reports/<date>-<name>.md and .json, with PNG plots beside them.

The first line says READY or NOT READY with counts; then the findings by severity with
their nodes and remedies, each stage with the command that reproduces it, the version
matrix, the connection matrix, the bandwidth tables and plots, the training curve.
"""

from __future__ import annotations

import json
import os
import time
from typing import Dict, List, Optional

from tabulate import tabulate

from clustercheck.bench.plots import save_plots
from clustercheck.bench.render import pair_matrix, sweep_tables
from clustercheck.bench.render import to_json as bench_json
from clustercheck.env.render import facts_markdown
from clustercheck.inventory import fold
from clustercheck.net.render import LEGEND, matrix_lines
from clustercheck.net.render import to_json as net_json
from clustercheck.preflight import PreflightResult
from clustercheck.render import cell
from clustercheck.result import Status, sort_findings, verdict_line
from clustercheck.smoke.render import to_json as smoke_json


def to_json(result: PreflightResult, command: str) -> Dict:
    stages = result.stages
    doc = {"schema": 1, "command": "preflight", "version": result.version,
           "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "invocation": command,
           "nodes": [n.name for n in result.nodes], "verdict": verdict_line(result.findings),
           "exit_code": result.exit_code,
           "findings": [dict(f.to_dict(), stage=s.name) for s in stages.values() for f in sort_findings(s.findings)],
           "stages": {s.name: {"status": s.status.name if not s.skipped else "SKIPPED", "skipped": s.skipped or None,
                               "wall_s": round(s.wall_s, 2), "command": s.command} for s in stages.values()}}
    env = stages.get("env")
    if env is not None and env.facts is not None:
        doc["versions"] = env.facts.values
    for name, to_doc in (("net", net_json), ("bench", bench_json), ("smoke", smoke_json)):
        stage = stages.get(name)
        if stage is not None and stage.facts is not None:
            doc[name] = to_doc(stage.facts, stage.findings)
    return doc


def _training_curve(result: PreflightResult, stem: str) -> Optional[str]:
    smoke = result.stages.get("smoke")
    steps = smoke.facts.stage.events("step") if smoke and smoke.facts and smoke.facts.stage else []
    if not steps:
        return None
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([s["step"] for s in steps], [s["loss"] for s in steps], marker="o")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (mean over ranks)")
    ax.set_title("smoke: training loss")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    path = f"{stem}-loss.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return os.path.basename(path)


def render_markdown(result: PreflightResult, command: str, images: Dict[str, List[str]]) -> str:
    findings = result.findings
    names = [n.name for n in result.nodes]
    out = [f"# {verdict_line(findings)}: clustercheck preflight of {len(names)} node{'s' if len(names) != 1 else ''}",
           "",
           f"- nodes: {fold(names)}", f"- when: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
           f"- command: `{command}`", f"- clustercheck {result.version}", "", "## Findings", ""]
    rows = [[f.status.label, stage.name, cell(f.summary), cell(", ".join(f.nodes) if f.nodes else ""),
             cell(f.remedy if f.status is not Status.OK else "")]
            for stage in result.stages.values() for f in stage.findings if f.status is not Status.OK]
    rows.sort(key=lambda r: -Status[r[0]])
    passed = sum(1 for f in findings if f.status is Status.OK)
    out += [tabulate(rows, headers=["status", "stage", "finding", "nodes", "fix"], tablefmt="github")
            if rows else "No problems found.", "", f"{passed} checks passed.", ""]
    out += ["## Stages", "", tabulate([[s.name, "skipped: " + s.skipped if s.skipped else s.status.name,
                                        f"{s.wall_s:.1f} s" if not s.skipped else "", f"`{s.command}`"]
                                       for s in result.stages.values()],
                                      headers=["stage", "result", "time", "reproduce with"], tablefmt="github"), ""]
    env = result.stages.get("env")
    if env is not None and env.facts is not None:
        out += ["## Versions and settings", "", facts_markdown(env.facts.probed, env.facts.values), ""]
    net = result.stages.get("net")
    if net is not None and net.facts is not None and matrix_lines(net.facts, "github"):
        matrix, legend = matrix_lines(net.facts, "github")
        out += ["## Network", "", matrix, "", f"`{legend}`", ""]
    bench = result.stages.get("bench")
    if bench is not None and bench.facts is not None:
        tables = sweep_tables(bench.facts)
        if tables:
            out += ["## Bandwidth (nccl-tests format)", "", "```text", *tables, "```", ""]
        pairs = pair_matrix(bench.facts, "github")
        if pairs:
            out += ["### Pairwise exchange (GB/s)", "", pairs, ""]
        out += [f"![{image}]({image})" for image in images.get("bench", [])] + [""]
    if images.get("smoke"):
        out += ["## Training", "", f"![{images['smoke'][0]}]({images['smoke'][0]})", ""]
    out += ["---", f"clustercheck {result.version}. Legend for the network matrix: {LEGEND}", ""]
    return "\n".join(out)


def write_preflight_report(result: PreflightResult, command: str, directory: str, name: str) -> Dict[str, str]:
    """Write the .md, .json and plots; returns their paths."""
    os.makedirs(directory, exist_ok=True)
    stem = os.path.join(directory, f"{time.strftime('%Y%m%d-%H%M%S')}-{name}")
    images: Dict[str, List[str]] = {}
    bench = result.stages.get("bench")
    if bench is not None and bench.facts is not None:
        images["bench"] = save_plots(bench.facts, stem)
    curve = _training_curve(result, stem)
    if curve:
        images["smoke"] = [curve]
    with open(stem + ".md", "w", encoding="utf-8") as handle:
        handle.write(render_markdown(result, command, images))
    with open(stem + ".json", "w", encoding="utf-8") as handle:
        json.dump(to_json(result, command), handle, indent=1, default=str)
    return {"markdown": stem + ".md", "json": stem + ".json"}
