"""How `clustercheck storage` shows itself: a table of every node's filesystem and figures, then the findings."""

from __future__ import annotations

from typing import Dict, List, Sequence

from tabulate import tabulate

from clustercheck.core.result import Finding, Status
from clustercheck.display.findings import findings_lines, findings_markdown, json_header, report_header
from clustercheck.stages.storage.estimate import checkpoint_estimate
from clustercheck.stages.storage.facts import StorageFacts, Throughput


def _rate(measured: "Throughput | None") -> str:
    return f"{measured.rate / 1e6:,.1f}" if measured else ""


def table(facts: StorageFacts, tablefmt: str) -> List[str]:
    views = facts.views()
    if not views:
        return []
    data = bool(facts.data_dir)
    rows = []
    for view in views:
        mount = view.mount
        free = view.filesystem.get("free_bytes")
        row = [view.node, f"{mount.get('fstype', '?')} {mount.get('source', '')}".strip(),
               f"{free / 1e9:,.1f}" if isinstance(free, int) else "?", facts.ranks.get(view.node, 1),
               _rate(view.write()), _rate(view.read())]
        if data:
            measured = view.data()
            row += [_rate(measured), f"{measured.files_rate:,.0f}" if measured else ""]
        rows.append(row)
    headers = ["node", "filesystem", "free GB", "slots", "write MB/s", "read MB/s"]
    headers += ["data MB/s", "files/s"] if data else []
    return tabulate(rows, headers=headers, tablefmt=tablefmt).splitlines()


def headline(facts: StorageFacts) -> str:
    names = facts.order
    where = facts.directory or "each node's run directory"
    total = sum(v.write().bytes for v in facts.views() if v.write())
    return (f"clustercheck storage: {where} from {len(names)} node{'s' if len(names) != 1 else ''} and "
            f"{sum(facts.ranks.get(n, 1) for n in names)} rank slots at once ({total / 1e9:,.2f} GB written)")


def the_save(findings: Sequence[Finding]) -> List[str]:
    """The answer to --params, first and every time it was measured: the time per save, on which node, and
    what it means for the run (the estimate's first evidence)."""
    found = next((f for f in findings if f.check == "storage.estimate" and f.status is not Status.UNKNOWN), None)
    if found is None:
        return []
    return [found.summary[0].upper() + found.summary[1:], *(f"  {line}" for line in found.evidence[:1])]


def render_terminal(facts: StorageFacts, findings: Sequence[Finding], verbose: bool = False) -> str:
    lines = [headline(facts), *the_save(findings), ""] + table(facts, "plain") + [""]
    return "\n".join(lines + findings_lines(findings, verbose, headlined=["storage.estimate"]))


def to_json(facts: StorageFacts, findings: Sequence[Finding]) -> Dict:
    return {**json_header("storage", findings), "directory": facts.directory or None,
            "data_dir": facts.data_dir or None,
            "model": facts.model, "params": facts.params, "mode": facts.mode, "keep": facts.keep,
            "wall_s": round(facts.wall_s, 2), "estimate": checkpoint_estimate(facts),
            "nodes": {n: {"problem": facts.problems.get(n), "probe": facts.measured.get(n),
                          "coherence": facts.coherence.get(n) or facts.coherence_problems.get(n)} for n in facts.order}}


def render_markdown(facts: StorageFacts, findings: Sequence[Finding], command: str) -> str:
    out = report_header("storage", findings, command, [f"- {headline(facts)}", *(f"- {line.strip()}"
                                                                                  for line in the_save(findings))])
    out += findings_markdown(findings)
    rows = table(facts, "github")
    if rows:
        out += ["## Storage", "", *rows, ""]
    return "\n".join(out)
