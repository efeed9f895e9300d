"""The readiness report of a preflight run as the runner shows it: terminal, JSON, the report files, and what
changed against --baseline."""

from __future__ import annotations

from dataclasses import asdict
from typing import Dict, List, Optional, Sequence

from clustercheck.core.result import worst
from clustercheck.display.findings import findings_lines
from clustercheck.preflight.diff import Changes, diff_reports, load_report, render_changes
from clustercheck.preflight.options import PreflightOptions
from clustercheck.preflight.report import to_json, write_preflight_report
from clustercheck.runner.options import OutputOptions
from clustercheck.runner.stage import RunResult, Stage


class PreflightView:
    """The readiness report of a preflight run, and what changed against --baseline."""

    def __init__(self, stages: Sequence[Stage], run: RunResult, options: PreflightOptions, default_name: str,
                 baseline: Optional[Dict]):
        self.stages, self.run, self.options = list(stages), run, options
        self.name = options.name or default_name
        self.baseline = baseline
        self.changes: Optional[Changes] = None
        if baseline is not None:
            self.changes = diff_reports(baseline, to_json(self.stages, run, ""), options.threshold)

    @property
    def exit_code(self) -> int:
        """The run's verdict and the baseline's, each earned on its own, the worse one in Nagios's order (a FAIL
        outranks an UNKNOWN, whose exit code is larger)."""
        if self.run.interrupted or self.changes is None:
            return self.run.exit_code
        return max(worst(self.run.findings), self.changes.status).exit_code

    def to_json(self, command: str) -> Dict:
        doc = to_json(self.stages, self.run, command)
        if self.changes is not None:
            doc["changes"] = dict(asdict(self.changes), baseline=self.options.baseline, worse=self.changes.worse)
            doc["exit_code"] = self.exit_code
        return doc

    def render_terminal(self, verbose: bool) -> str:
        lines = findings_lines(self.run.findings, verbose)
        if self.changes is not None:
            lines += ["", render_changes(self.changes, self.options.baseline, "this run")]
        return "\n".join(lines)

    def write_report(self, out: OutputOptions, command: str) -> List[str]:
        paths = write_preflight_report(self.stages, self.run, command, out.reports_dir, self.name)
        notes = [f"report: {paths['markdown']} (and {paths['json'].rsplit('/', 1)[-1]})"]
        if "healthy-nodes.txt" in paths:
            notes.append(f"healthy nodes: {paths['healthy-nodes.txt']}, {paths['healthy-hostfile']}; Slurm: "
                         f"{paths['exclude.txt']}; launch on them: clustercheck launch --from {paths['json']}")
        return notes


def load_baseline(options: PreflightOptions) -> Optional[Dict]:
    return load_report(options.baseline) if options.baseline else None
