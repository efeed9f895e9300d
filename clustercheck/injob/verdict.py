"""Rank 0's side of the verdict: the one line every rank prints, the findings, the same Markdown and JSON report
as preflight's (with the healthy nodes beside it), and the push to a Pushgateway when asked.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Dict, List, Sequence

from clustercheck.core.errors import EXIT_FAIL
from clustercheck.core.result import VERDICTS, Finding, Status, sort_findings, verdict_line, worst
from clustercheck.display.findings import findings_lines
from clustercheck.injob.judge import Gathered
from clustercheck.injob.options import InjobOptions
from clustercheck.preflight.report import write_preflight_report
from clustercheck.runner.push import push_run
from clustercheck.runner.stage import RunResult, Stage

PREFIX = "clustercheck injob"


@dataclass
class Verdict:
    """What every rank is told: the status, its exit code, the line it prints; the report's paths on rank 0."""

    status: str
    exit_code: int
    line: str
    reports: Dict[str, str] = field(default_factory=dict)
    own: bool = False          # this rank's own (it heard no verdict from rank 0): only it can say it

    @property
    def ready(self) -> bool:
        return Status[self.status] <= Status.WARN


def where(finding: Finding, gathered: Gathered) -> str:
    """'on n3 (rank 2)': the nodes a finding names, with their ranks."""
    if not finding.nodes:
        return ""
    parts = []
    for node in finding.nodes[:4]:
        ranks = gathered.ranks_on(node)
        parts.append(f"{node} (rank{'s' * (len(ranks) != 1)} {','.join(map(str, ranks)) or '?'})")
    return " on " + ", ".join(parts) + (" ..." if len(finding.nodes) > 4 else "")


def one_line(findings: Sequence[Finding], gathered: Gathered) -> str:
    """The verdict, then the worst finding with its nodes, ranks and remedy."""
    text = f"{PREFIX}: {verdict_line(findings)}"
    bad = [f for f in sort_findings(findings) if f.status is not Status.OK]
    if bad:
        first = bad[0]
        text += f": {first.summary}" + ("" if " rank " in f" {first.summary}" else where(first, gathered))
        if first.remedy:
            text += f"; fix: {first.remedy}"
        if len(bad) > 1:
            text += f" (and {len(bad) - 1} more finding{'s' * (len(bad) > 2)}: see the report)"
    return text


def publish(stages: List[Stage], run: RunResult, gathered: Gathered, options: InjobOptions,
            command: str) -> Verdict:
    """Push (when asked), write the report, print the findings: rank 0 alone calls this."""
    if options.pushgateway:
        push_run(options.pushgateway, stages, run, options.report_name)
    reports: Dict[str, str] = {}
    try:
        reports = write_preflight_report(stages, run, command, options.reports_dir, options.report_name)
    except OSError as exc:
        print(f"{PREFIX}: report NOT written: {exc.strerror or exc} ({options.reports_dir})", file=sys.stderr)
    findings = run.findings
    if not options.quiet:
        print("\n".join(findings_lines(findings)), file=sys.stderr)
        for kind, path in reports.items():
            print(f"{PREFIX}: {kind}: {path}", file=sys.stderr)
    status = worst(findings)
    return Verdict(status.name, status.exit_code, one_line(findings, gathered), reports)


def could_not_check(reason: str) -> Verdict:
    """A rank that could not hear the verdict (rank 0 gone, the store gone): never a pass."""
    return Verdict(Status.UNKNOWN.name, Status.UNKNOWN.exit_code,
                   f"{PREFIX}: {VERDICTS[Status.UNKNOWN]}: {reason}", own=True)


STOP_EXIT = EXIT_FAIL   # every rank stops with this one code: the launcher, Slurm or Kubernetes sees a failed start
