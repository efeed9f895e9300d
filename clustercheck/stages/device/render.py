"""How `clustercheck device` shows itself: a table of every device's figures, then the findings."""

from __future__ import annotations

from typing import Dict, List, Sequence

from tabulate import tabulate

from clustercheck.core.inventory import fold
from clustercheck.core.result import Finding
from clustercheck.display.findings import findings_lines, findings_markdown, json_header, report_header
from clustercheck.stages.device.facts import METRICS, DeviceFacts


def table(facts: DeviceFacts, tablefmt: str) -> List[str]:
    devices = [d for d in facts.devices if not d.error]
    shown = [(metric, f"{text} {unit}", scale) for metric, text, unit, scale in METRICS
             if any(metric in d.figures for d in devices)]
    if not devices:
        return []
    rows = [[d.node, "cpu" if d.kind == "cpu" else d.index, d.name]
            + [f"{d.figures[m] * scale:,.1f}" if m in d.figures else "" for m, _, scale in shown] for d in devices]
    return tabulate(rows, headers=["node", "device", "model", *(title for _, title, _ in shown)],
                    tablefmt=tablefmt).splitlines() + left_out(devices)


def left_out(devices) -> List[str]:
    """What the probes did not measure and why, once per reason: "fp8 not measured on n1, n2: GPU 0 has ..."."""
    reasons: Dict = {}
    for device in devices:
        for what, why in device.not_measured.items():
            reasons.setdefault((what, why), set()).add(device.node)
    return ["", *(f"{what} not measured on {fold(sorted(nodes))}: {why}" for (what, why), nodes in sorted(
        reasons.items()))] if reasons else []


def headline(facts: DeviceFacts) -> str:
    names = [n.name for n in facts.nodes]
    devices = facts.devices
    return (f"clustercheck device: {len(names)} node{'s' if len(names) != 1 else ''} ({fold(names)}), "
            f"{len(devices)} device{'s' if len(devices) != 1 else ''} measured for {facts.seconds:g} s at once")


def render_terminal(facts: DeviceFacts, findings: Sequence[Finding], verbose: bool = False) -> str:
    lines = [headline(facts), ""] + table(facts, "plain") + [""] + findings_lines(findings, verbose)
    return "\n".join(lines)


def to_json(facts: DeviceFacts, findings: Sequence[Finding]) -> Dict:
    return {**json_header("device", findings), "seconds": facts.seconds,
            "nodes": {n.name: {"problem": facts.problems.get(n.name), "probe": facts.documents.get(n.name)}
                      for n in facts.nodes}}


def render_markdown(facts: DeviceFacts, findings: Sequence[Finding], command: str) -> str:
    out = report_header("device", findings, command, [f"- {headline(facts)}"])
    out += findings_markdown(findings)
    rows = table(facts, "github")
    if rows:
        out += ["## Devices", "", *rows, ""]
    return "\n".join(out)
