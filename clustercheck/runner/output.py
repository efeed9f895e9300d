"""The one output path of every check command: terminal or --json, --report, and the exit code.

A command builds a view of its result (one stage, or the readiness report of several) and
hands it to `finish`, which prints it, writes the report and exits with the code the
result implies.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from typing import Any, Dict, List, NoReturn, Sequence

import click

from clustercheck.display.findings import findings_lines, json_header
from clustercheck.display.report_files import new_report_path, write_report
from clustercheck.runner.options import ClusterOptions, OutputOptions, from_params, to_args
from clustercheck.runner.push import push_run
from clustercheck.runner.stage import RunResult, Stage, StageResult, run_stages


def invocation() -> str:
    return "clustercheck " + " ".join(sys.argv[1:])


def check(stages: Sequence[Stage], cluster: ClusterOptions, **kwargs) -> RunResult:
    """The runner over these stages, on the nodes and connections the options name."""
    nodes = cluster.nodes()   # bad input stops here, before anything is contacted
    return run_stages(stages, nodes, cluster.fanout_options(), to_args(cluster), **kwargs)


class StageView:
    """One stage's result, shown the stage's own way (env, net, bench, smoke)."""

    def __init__(self, stage: Stage, run: RunResult, name: str = "cluster"):
        self.stage, self.run, self.name = stage, run, name
        self.stages = [stage]
        self.result = run.stages[0]
        self.interrupted = run.interrupted

    @property
    def shown(self) -> StageResult:
        """The stage's result with the run's findings (the push's outcome, the word that nothing was checked):
        the verdict on the screen, in the JSON and the report is the one the exit code follows."""
        return replace(self.result, findings=self.run.findings)

    @property
    def exit_code(self) -> int:
        return self.run.exit_code

    @property
    def gathered(self) -> bool:
        """The stage's own views need its facts: a stage stopped half way shows its findings only."""
        return self.result.facts is not None

    def to_json(self, command: str) -> Dict:
        if not self.gathered:
            return {**json_header(self.stage.name, self.run.findings), "interrupted": self.interrupted}
        return self.stage.to_json(self.shown)

    def render_terminal(self, verbose: bool) -> str:
        if not self.gathered:
            return "\n".join(findings_lines(self.run.findings, verbose=True))
        return self.stage.render_terminal(self.shown, verbose)

    def write_report(self, out: OutputOptions, command: str) -> List[str]:
        if not out.report or not self.gathered:
            return []
        path = new_report_path(self.stage.name, out.reports_dir)
        images = self.stage.save_images(self.shown, path[:-3])
        write_report(self.stage.name, self.stage.render_markdown(self.shown, command, images), path=path)
        return [f"report: {path}"]


def finish(view, out: OutputOptions) -> NoReturn:
    command = invocation()
    if out.pushgateway:      # before the views: a push that failed is a finding of the run (run.after)
        push_run(out.pushgateway, view.stages, view.run, view.name)
    try:
        notes = view.write_report(out, command)
    except OSError as exc:   # the findings still reach the screen; the report's loss is said
        notes = [f"report NOT written: {exc.strerror or exc} ({getattr(exc, 'filename', None) or out.reports_dir})"]
    if out.as_json:
        click.echo(json.dumps(view.to_json(command), indent=1, default=str))
    else:
        click.echo(view.render_terminal(out.verbose))
    for note in notes:
        click.echo(note, err=out.as_json)
    stopped_by = getattr(view, "interrupted", "") or getattr(getattr(view, "run", None), "interrupted", "")
    if stopped_by:
        click.echo(f"Interrupted ({stopped_by}): remote commands were stopped; what was found so far is above.",
                   err=True)
    sys.exit(view.exit_code)


def run_one(stage: Stage, params: Dict[str, Any]) -> NoReturn:
    """A single command (env, net, bench, smoke): the runner over its one stage, shown its own way."""
    out = from_params(OutputOptions, params)
    out.validate()
    cluster = from_params(ClusterOptions, params)
    run = check([stage], cluster)
    finish(StageView(stage, run, cluster.report_name), out)
