"""How `clustercheck env` shows its result: a terminal screen, JSON, a Markdown report."""

from __future__ import annotations

from typing import Dict, List, Sequence

from tabulate import tabulate

from clustercheck.core.compare import group_by_value
from clustercheck.core.inventory import fold
from clustercheck.core.result import Finding
from clustercheck.core.thresholds import Config, as_dict
from clustercheck.display.findings import cell, findings_lines, findings_markdown, json_header, report_header
from clustercheck.node.facts import Probed
from clustercheck.stages.env import topology

# Facts named in the one-line summary of what every node shares, in this order.
HEADLINE = ("python", "torch", "torch CUDA build", "deepspeed", "NCCL wheel", "NCCL (loaded)", "NVIDIA driver",
            "GPUs", "GPU model", "InfiniBand", "training MTU")


def fact_groupings(probed: Sequence[Probed], values: Dict[str, Dict[str, str]]):
    """fact -> Grouping over the nodes that have it, facts in first-seen order."""
    order = [p.name for p in probed]
    labels: List[str] = []
    for node_values in values.values():
        labels += [label for label in node_values if label not in labels]
    out = {}
    for label in labels:
        per_node = {n: v.get(label, "(unset)" if label.startswith("$") else None) for n, v in values.items()}
        out[label] = group_by_value({n: v for n, v in per_node.items() if v is not None}, order)
    return out


def _headline(same: Dict[str, str], num_probed: int, num_nodes: int) -> str:
    shown = [f"{label} {same[label]}" for label in HEADLINE if label in same]
    rest = len(same) - len(shown)
    probed = " probed" if num_probed < num_nodes else ""
    where = f"all {num_probed}{probed} nodes" if num_probed > 1 else f"the one{probed} node"
    return (f"Same on {where}: " + ", ".join(shown) + (f" and {rest} more facts" if rest > 0 else ""))


def render_terminal(probed: Sequence[Probed], values: Dict[str, Dict[str, str]], findings: Sequence[Finding],
                    verbose: bool = False) -> str:
    names = [p.name for p in probed]
    reached = [p.name for p in probed if p.facts is not None]
    lines = [f"clustercheck env: {len(names)} node{'s' if len(names) != 1 else ''} ({fold(names)}), "
             f"{len(reached)} probed", ""]
    groupings = fact_groupings(probed, values)
    same = {label: g.baseline for label, g in groupings.items() if g.uniform and len(g.baseline_nodes) == len(reached)}
    if reached:
        lines += [_headline(same, len(reached), len(names)), ""]
    differs = [(label, g) for label, g in groupings.items() if not g.uniform or len(g.baseline_nodes) < len(reached)]
    if differs:
        rows = []
        for label, g in differs:
            others = "; ".join(f"{fold(nodes)}: {value}" for value, nodes in g.odd)
            lacking = sorted(set(reached) - {n for _, nodes in g.groups for n in nodes})
            if lacking:
                others = "; ".join(filter(None, [others, f"{fold(lacking)}: unknown"]))
            rows.append([label, f"{g.baseline}  ({fold(g.baseline_nodes)})", others])
        lines += [tabulate(rows, headers=["differs", "most nodes", "other nodes"], tablefmt="simple"), ""]
    lines += findings_lines(findings, verbose)
    return "\n".join(lines)


def to_json(probed: Sequence[Probed], values: Dict[str, Dict[str, str]], findings: Sequence[Finding],
            config: Config) -> Dict:
    return {
        **json_header("env", findings), "thresholds": as_dict(config),
        "nodes": {p.name: {"outcome": p.outcome.value, "problem": p.problem or None,
                           "clock_offset_s": p.clock_offset_s, "clock_uncertainty_s": p.clock_uncertainty_s,
                           "compared": values.get(p.name), "facts": p.facts} for p in probed},
    }


def facts_markdown(probed: Sequence[Probed], values: Dict[str, Dict[str, str]]) -> str:
    """Every fact as rows of value and nodes, the most shared value first (a GitHub table)."""
    rows = []
    for label, grouping in fact_groupings(probed, values).items():
        for i, (value, nodes) in enumerate(grouping.groups):
            rows.append([cell(label) if i == 0 else "", cell(value), fold(nodes)])
    return tabulate(rows, headers=["fact", "value", "nodes"], tablefmt="github")


def render_markdown(probed: Sequence[Probed], values: Dict[str, Dict[str, str]], findings: Sequence[Finding],
                    config: Config, command: str) -> str:
    names = [p.name for p in probed]
    out = report_header("env", findings, command, [
        f"- nodes: {len(names)} ({fold(names)}); probed: {sum(1 for p in probed if p.facts is not None)}",
        f"- thresholds: {config.source}"])
    out += findings_markdown(findings)
    out += ["## Facts", "", "Values shared by the most nodes first; a fact with one row is the same everywhere.", "",
            facts_markdown(probed, values), ""]
    out += topology.markdown(probed)
    unreached = [p for p in probed if p.facts is None]
    if unreached:
        out += ["## Not probed", ""]
        out += [f"- {p.name}: {p.problem}" for p in unreached]
        out.append("")
    return "\n".join(out)
