"""The readiness report: reports/<date>-<name>.md and .json, with PNG plots beside them.

The first line says READY or NOT READY with counts; then the findings by severity with
their nodes and remedies, each stage with the command that reproduces it, and each stage's
own section (versions, connections, bandwidth, training) through the stage interface.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from typing import Dict, List, Optional, Sequence

from tabulate import tabulate

from clustercheck import __version__
from clustercheck.core.inventory import fold
from clustercheck.core.result import Status, sort_findings, verdict_line
from clustercheck.display.findings import cell
from clustercheck.runner.healthy import failed_nodes, healthy_files, healthy_nodes, slots_of
from clustercheck.runner.stage import RunResult, Stage
from clustercheck.tools import launch_recipes as recipe


def _ran(stages: Sequence[Stage], run: RunResult):
    return [(stage, result) for stage, result in zip(stages, run.stages) if result.ran and result.facts is not None]


def to_json(stages: Sequence[Stage], run: RunResult, command: str) -> Dict:
    doc = {"schema": 1, "command": "preflight", "version": __version__,
           "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "invocation": command,
           "nodes": [n.name for n in run.nodes], "verdict": verdict_line(run.findings),
           "exit_code": run.exit_code,
           "findings": [dict(f.to_dict(), stage=s.name) for s in run.stages for f in sort_findings(s.findings)],
           "stages": {s.name: {"status": s.status.name if s.ran else "SKIPPED", "skipped": s.skipped or None,
                               "wall_s": round(s.wall_s, 2), "command": s.command} for s in run.stages}}
    for stage, result in _ran(stages, run):
        doc.update(stage.report_json(result))
    doc["checkpoint_time"] = checkpoint_time(doc)
    spec, reason = recipe.from_run(run)
    doc["launch"] = {"ready": spec is not None, "reason": reason or None,
                     "spec": asdict(spec) if spec else None}
    failed = failed_nodes(run)
    doc["failed_nodes"], doc["healthy_nodes"], doc["slots"] = failed, healthy_nodes(run), slots_of(run)
    if failed:     # what the healthy nodes alone can launch (clustercheck launch --from this report)
        spec, reason = recipe.healthy_spec(run, failed)
        doc["healthy_launch"] = {"ready": spec is not None, "reason": reason or None,
                                 "spec": asdict(spec) if spec else None}
    return doc


def checkpoint_time(doc: Dict) -> Optional[Dict]:
    """The checkpoint's save and load time as storage estimated it and as smoke's trainer measured it, side by
    side (None when neither ran)."""
    estimated = (doc.get("storage") or {}).get("estimate") or {}
    measured = (doc.get("smoke") or {}).get("checkpoint") or {}
    if not estimated and not measured:
        return None
    return {"estimated_save_s": estimated.get("save_s"), "estimated_load_s": estimated.get("load_s"),
            "estimated_bytes": estimated.get("bytes"), "measured_save_s": measured.get("save_s"),
            "measured_load_s": measured.get("load_s"), "measured_bytes_on_rank0_node": measured.get("save_bytes")}


def checkpoint_lines(stages: Sequence[Stage], run: RunResult) -> List[str]:
    doc: Dict = {}
    for stage, result in _ran(stages, run):
        if stage.name in ("storage", "smoke"):     # the two documents checkpoint_time reads
            doc.update(stage.report_json(result))
    times = checkpoint_time(doc)
    if not times:
        return []
    def say(value):
        return "" if value is None else f"{value:.2f} s"
    rows = [["save", say(times["estimated_save_s"]), say(times["measured_save_s"])],
            ["load", say(times["estimated_load_s"]), say(times["measured_load_s"])]]
    return ["## Checkpoint time", "", "storage's estimate for smoke's model and mode beside what smoke's trainer "
            "measured (each ending at a barrier: the slowest rank's)", "",
            tabulate(rows, headers=["", "estimated (storage)", "measured (smoke)"], tablefmt="github"), ""]


def render_markdown(stages: Sequence[Stage], run: RunResult, command: str, images: Dict[str, List[str]]) -> str:
    findings = run.findings
    names = [n.name for n in run.nodes]
    out = [f"# {verdict_line(findings)}: clustercheck preflight of {len(names)} node{'s' if len(names) != 1 else ''}",
           "",
           f"- nodes: {fold(names)}", f"- when: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
           f"- command: `{command}`", f"- clustercheck {__version__}", "", "## Findings", ""]
    rows = [[f.status.label, stage.name, cell(f.summary + (f" (asked by {f.answers})" if f.answers else "")),
             cell(", ".join(f.nodes) if f.nodes else ""), cell(f.remedy if f.status is not Status.OK else "")]
            for stage in run.stages for f in stage.findings if f.status is not Status.OK or f.answers]
    rows.sort(key=lambda r: -Status[r[0]])     # a figure asked by a flag is listed whatever its status
    passed = sum(1 for f in findings if f.status is Status.OK and not f.answers)
    out += [tabulate(rows, headers=["status", "stage", "finding", "nodes", "fix"], tablefmt="github")
            if rows else "No problems found.", "", f"{passed} checks passed.", ""]
    out += ["## Stages", "", tabulate([[s.name, "skipped: " + s.skipped if s.skipped else s.status.name,
                                        f"{s.wall_s:.1f} s" if s.ran else "", f"`{s.command}`"]
                                       for s in run.stages],
                                      headers=["stage", "result", "time", "reproduce with"], tablefmt="github"), ""]
    for stage, result in _ran(stages, run):
        out += stage.report_section(result, images.get(stage.name, []))
    failed = failed_nodes(run)
    if failed:
        healthy = healthy_nodes(run)
        out += ["## The nodes that passed", "",
                f"{len(healthy)} of {len(run.nodes)} nodes passed: {fold(healthy) if healthy else 'none'}; failed or "
                f"not checked: {fold(failed)}. Beside this report: the healthy nodes as a nodes file "
                f"(`.healthy-nodes.txt`), a DeepSpeed hostfile (`.healthy-hostfile`) and Slurm's "
                f"`--exclude=` (`.exclude.txt`); `clustercheck launch --from` this report's .json prints the "
                f"launch commands for the healthy nodes.", ""]
    out += checkpoint_lines(stages, run)
    if any(s.name == "net" and s.ran for s in run.stages):
        out += recipe.markdown(run)
    out += ["---", f"clustercheck {__version__}", ""]
    return "\n".join(out)


def write_preflight_report(stages: Sequence[Stage], run: RunResult, command: str, directory: str,
                           name: str) -> Dict[str, str]:
    """Write the .md, .json and plots; returns their paths."""
    os.makedirs(directory, exist_ok=True)
    stem = os.path.join(directory, f"{time.strftime('%Y%m%d-%H%M%S')}-{name}")
    images = {stage.name: stage.save_images(result, stem) for stage, result in _ran(stages, run)}
    with open(stem + ".md", "w", encoding="utf-8") as handle:
        handle.write(render_markdown(stages, run, command, images))
    with open(stem + ".json", "w", encoding="utf-8") as handle:
        json.dump(to_json(stages, run, command), handle, indent=1, default=str)
    written = {"markdown": stem + ".md", "json": stem + ".json"}
    for suffix, content in healthy_files(run).items():
        with open(f"{stem}.{suffix}", "w", encoding="utf-8") as handle:
            handle.write(content)
        written[suffix] = f"{stem}.{suffix}"
    return written
