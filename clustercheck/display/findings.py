"""Showing Findings: the lines every command prints, and the Markdown every report uses."""

from __future__ import annotations

import time
from typing import Dict, List, Sequence

from tabulate import tabulate

from clustercheck.core.result import Finding, Status, sort_findings, verdict_line, worst


def findings_lines(findings: Sequence[Finding], verbose: bool = False, headlined: Sequence[str] = (),
                   verdict: bool = True) -> List[str]:
    """Problems first with their evidence and fix; passed checks counted (listed with verbose), except those
    that answer a flag the user gave (Finding.answers), which are always shown. headlined: checks the screen's
    headline already says; passed, they are not said again. verdict: end with the verdict over them (False for
    findings shown beside a verdict of other findings)."""
    lines = []
    for finding in sort_findings(findings):
        if not finding.checked:      # a note on the reading: said, never counted as a pass
            lines.append(f"note  {finding.summary}")
            lines += [f"        {item}" for item in finding.evidence]
            continue
        if finding.status is Status.OK and (finding.check in headlined or not verbose and not finding.answers):
            continue
        lines.append(f"{finding.status.label:<5} {finding.summary}")
        lines += [f"        {item}" for item in finding.evidence]
        if finding.answers:
            lines.append(f"        (asked by {finding.answers})")
        if finding.remedy and finding.status is not Status.OK:
            lines.append(f"      fix: {finding.remedy}")
    passed = sum(1 for f in findings if f.status is Status.OK and f.checked and not f.answers
                 and f.check not in headlined)
    if passed and not verbose:
        lines.append(f"OK    {passed} checks passed (-v lists them)")
    if verdict:
        lines += ["", f"Verdict: {verdict_line(findings)}"]
    return lines


def cell(text) -> str:
    """A value made safe for a Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def findings_markdown(findings: Sequence[Finding]) -> List[str]:
    rows = [[f.status.label if f.checked else "note", cell(f.summary), cell("<br>".join(f.evidence)),
             cell(f.remedy if f.status is not Status.OK else "")] for f in sort_findings(findings)]
    return ["## Findings", "", tabulate(rows, headers=["status", "finding", "evidence", "fix"], tablefmt="github"), ""]


def report_header(kind: str, findings: Sequence[Finding], command: str, extra: Sequence[str] = ()) -> List[str]:
    return [f"# clustercheck {kind}: {verdict_line(findings)}", "",
            f"- when: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}", f"- command: `{command}`", *extra, ""]


def json_header(command: str, findings: Sequence[Finding]) -> Dict:
    """The keys every command's JSON document starts with: schema, command, verdict, exit code, findings."""
    status = worst(findings)
    return {"schema": 1, "command": command, "verdict": status.name, "exit_code": status.exit_code,
            "findings": [f.to_dict() for f in sort_findings(findings)]}
