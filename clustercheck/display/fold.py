"""Fold identical node outputs into one block under a compact host list, as clush -b does."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

from clustercheck.core.inventory import fold
from clustercheck.transport.base import CUT_MARK, MAX_CAPTURE_BYTES, NodeResult, Outcome


@dataclass
class Block:
    nodes: List[str]
    stdout: str
    stderr: str

    @property
    def hosts(self) -> str:
        return fold(self.nodes)


def fold_outputs(results: Sequence[NodeResult]) -> List[Block]:
    """Group the nodes whose command ran and printed, by identical (stdout, stderr); largest first."""
    groups: Dict[Tuple[str, str], List[str]] = {}
    for result in results:
        if result.outcome.reached and (result.stdout or result.stderr):
            groups.setdefault((result.stdout, result.stderr), []).append(result.node)
    blocks = [Block(nodes, out, err) for (out, err), nodes in groups.items()]
    return sorted(blocks, key=lambda b: (-len(b.nodes), b.nodes[0]))


def fold_failures(results: Sequence[NodeResult]) -> List[Tuple[str, str, List[str]]]:
    """(outcome, detail, nodes) for every node that did not end OK, identical ones together."""
    groups: Dict[Tuple[Outcome, str], List[str]] = {}
    for result in results:
        if not result.ok:
            groups.setdefault((result.outcome, result.detail), []).append(result.node)
    return [(outcome.value, detail, nodes) for (outcome, detail), nodes in groups.items()]


def render_run(results: Sequence[NodeResult]) -> str:
    """The terminal view of `clustercheck run`: folded outputs, then a summary of failures."""
    lines: List[str] = []
    for block in fold_outputs(results):
        title = f"{block.hosts} ({len(block.nodes)})"
        rule = "-" * max(15, len(title))
        lines += [rule, title, rule]
        if block.stdout:
            lines.append(block.stdout.rstrip("\n"))
        if block.stderr:
            lines.append("[stderr]")
            lines.append(block.stderr.rstrip("\n"))
    ok = [r.node for r in results if r.ok]
    lines.append("")
    lines.append(f"ok: {len(ok)}/{len(results)} nodes" + (f" ({fold(ok)})" if ok and len(ok) < len(results) else ""))
    cut = [r.node for r in results if CUT_MARK in r.stdout or CUT_MARK in r.stderr]
    if cut:
        lines.append(f"output cut (only its first {MAX_CAPTURE_BYTES // 2 ** 20} MiB kept) on {fold(cut)}: "
                     f"redirect it to a file on the nodes for all of it")
    remedies = {r.outcome.value: r.remedy for r in results if not r.ok}
    for outcome, detail, nodes in fold_failures(results):
        lines.append(f"{outcome}: {fold(nodes)}" + (f": {detail}" if detail and len(nodes) == 1 else
                                                   f" ({detail})" if detail else ""))
    for outcome, remedy in remedies.items():
        if remedy:
            lines.append(f"  fix ({outcome}): {remedy}")
    return "\n".join(lines)
