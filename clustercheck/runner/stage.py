"""One shape for every check (env, net, bench, smoke) and the one runner that runs a list of them.

A Stage gathers facts over the run's connections (the node layer gives it the probed
nodes), judges them into Findings, says which later stages its result makes pointless,
and shows itself (terminal, JSON, Markdown, its part of the readiness report). The runner
knows stages only through this interface: a new stage is a new class, not an edit here.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from clustercheck.core.errors import EXIT_INTERRUPTED
from clustercheck.core.inventory import Node
from clustercheck.core.result import NOTHING_CHECKED, Finding, Status, nothing_checked, worst
from clustercheck.display import progress as progress_display
from clustercheck.node.layer import NodeLayer
from clustercheck.runner import interrupt
from clustercheck.runner.options import given_flags, to_args
from clustercheck.transport.fanout import Cluster, FanoutOptions


@dataclass
class StageResult:
    name: str
    findings: List[Finding] = field(default_factory=list)
    facts: Any = None
    skipped: str = ""            # why it did not run
    wall_s: float = 0.0
    command: str = ""            # the single command that reproduces this stage

    @property
    def status(self) -> Status:
        return worst(self.findings)

    @property
    def ran(self) -> bool:
        return not self.skipped


@dataclass
class RunResult:
    nodes: List[Node]
    stages: List[StageResult]
    interrupted: str = ""      # the signal that stopped the run ("" when it ran to its end)
    after: List[Finding] = field(default_factory=list)   # what happened to the results (a push that failed)

    @property
    def findings(self) -> List[Finding]:
        """Every stage's findings; a run that checked nothing says so as UNKNOWN, never as a pass."""
        found = [f for stage in self.stages for f in stage.findings]
        if not any(stage.ran for stage in self.stages):
            skipped = "; ".join(f"{s.name}: {s.skipped}" for s in self.stages) or "no stage was given"
            found.append(Finding("run.nothing", Status.UNKNOWN, f"{NOTHING_CHECKED}: every stage was skipped",
                                 [skipped], "run at least one stage (see --only / --skip)"))
        elif nothing_checked(found):   # only notes, or nothing at all: what happened after (a push) checks nothing
            found.append(Finding("run.nothing", Status.UNKNOWN, f"{NOTHING_CHECKED}: the stages reported no result "
                                                                f"that checked anything", [],
                                 "run the stage alone with -v and report this as a bug of clustercheck"))
        return found + self.after

    @property
    def checked_anything(self) -> bool:
        """Some stage's finding checked something: else no node can be called healthy."""
        return not nothing_checked([f for stage in self.stages for f in stage.findings])

    @property
    def exit_code(self) -> int:
        return EXIT_INTERRUPTED if self.interrupted else worst(self.findings).exit_code


class Stage:
    """What env, net, bench and smoke each implement. `options` is the stage's options dataclass,
    whose fields are also the single command's flags (clustercheck.runner.options)."""

    name = ""
    launches_ranks = False    # starts torchrun on every node: a node or link that cannot carry it makes it pointless
    # option field -> the checks whose figure is the answer to that flag's question (a check id, or a prefix
    # before a "."): given on the command line, they are shown whatever their status (mark_answers)
    answers: Dict[str, Tuple[str, ...]] = {}

    def __init__(self, options: Any):
        self.options = options
        self.asked: Optional[Dict[str, str]] = None   # option field -> the flag the user gave; None: the options'

    def gather(self, layer: NodeLayer) -> Any:
        raise NotImplementedError

    def judge(self, facts: Any) -> List[Finding]:
        raise NotImplementedError

    def write(self, result: StageResult) -> List[Finding]:
        """What the stage writes once it is judged (env's --save-baseline), said as findings; judges write
        nothing."""
        return []

    def blocks(self, result: StageResult, later: "Stage") -> str:
        """Why `later` is pointless after this result ("" when it is not)."""
        return ""

    def command(self, cluster_args: Sequence[str]) -> str:
        """The single command that reproduces this stage with these options."""
        return " ".join(["clustercheck", self.name, *map(shlex.quote, [*cluster_args, *to_args(self.options)])])

    # ---- showing the result -----------------------------------------------------------
    def to_json(self, result: StageResult) -> Dict:
        raise NotImplementedError

    def render_terminal(self, result: StageResult, verbose: bool) -> str:
        raise NotImplementedError

    def save_images(self, result: StageResult, stem: str) -> List[str]:
        """PNG files written beside a report whose path is stem + ".md"; their names."""
        return []

    def render_markdown(self, result: StageResult, command: str, images: Sequence[str]) -> str:
        raise NotImplementedError

    def report_section(self, result: StageResult, images: Sequence[str]) -> List[str]:
        """This stage's part of the readiness report (Markdown lines)."""
        return []

    def report_json(self, result: StageResult) -> Dict:
        """Keys this stage adds to the readiness report's JSON."""
        return {}

    def samples(self, result: StageResult) -> List[Tuple[str, Dict[str, str], float]]:
        """The figures this stage measured, as metric samples (clustercheck/metrics/schema.py); statuses come
        from the findings, for every stage alike."""
        return []


class RenderedStage(Stage):
    """A stage whose render module shows its facts and findings the usual way: to_json(facts, findings),
    render_terminal(facts, findings, verbose) and render_markdown(facts, findings, command); the three views
    delegate to it, and the readiness report's JSON holds to_json under the stage's name."""

    render: ModuleType

    def to_json(self, result: StageResult) -> Dict:
        return self.render.to_json(result.facts, result.findings)

    def render_terminal(self, result: StageResult, verbose: bool) -> str:
        return self.render.render_terminal(result.facts, result.findings, verbose)

    def render_markdown(self, result: StageResult, command: str, images: Sequence[str]) -> str:
        return self.render.render_markdown(result.facts, result.findings, command)

    def report_json(self, result: StageResult) -> Dict:
        return {self.name: self.to_json(result)}


def run_stages(stages: Sequence[Stage], nodes: Sequence[Node], fanout: FanoutOptions,
               cluster_args: Sequence[str] = (), selected: Optional[Sequence[str]] = None,
               progress: Optional[Callable[[str, str], None]] = None) -> RunResult:
    """Each selected stage in order over one set of connections; a stage an earlier result makes
    pointless is skipped with the reason. The node layer's shared findings go with the first stage
    that needed the nodes."""
    say = progress or (lambda stage, text: None)
    results = [StageResult(stage.name, command=stage.command(cluster_args)) for stage in stages]
    run = RunResult(list(nodes), results)
    with Cluster(nodes, fanout) as cluster, progress_display.running() as beat:   # the fan-out and torchrun tell it
        layer = NodeLayer(cluster, nodes)
        done: List[tuple] = []
        for stage, result in zip(stages, results):
            if selected is not None and stage.name not in selected:
                result.skipped = "not selected"
                continue
            reason = next((r for r in (s.blocks(res, stage) for s, res in done) if r), "")
            if reason:
                result.skipped = reason
                say(stage.name, f"skipped: {reason}")
                continue
            say(stage.name, "running")
            start = time.monotonic()
            beat.begin(stage.name)
            try:
                result.facts = stage.gather(layer)
            except KeyboardInterrupt:   # Ctrl-C, or SIGTERM from `timeout`, Slurm or systemd: keep what was found
                beat.end(f"[{stage.name}] stopped")
                run.interrupted = interrupt.reason() or "Ctrl-C"
                stopped(run, stage, result, layer, start, selected)
                break
            finally:
                beat.stop()     # gathering is over, however it ended: no more progress lines of its own
            result.findings = only_what_was_checked(layer, layer.take_findings() + stage.judge(result.facts))
            result.findings += stage.write(result)
            mark_answers(stage, result.findings)
            result.wall_s = time.monotonic() - start
            beat.end(f"[{stage.name}] done: {result.status.name}")
            done.append((stage, result))
            say(stage.name, f"{result.status.name} in {result.wall_s:.1f} s")
    return run


def stopped(run: RunResult, stage: Stage, result: StageResult, layer: NodeLayer, start: float,
            selected: Optional[Sequence[str]]) -> None:
    """The stage that was running when the run was stopped is UNKNOWN, and every later one not run: what
    the earlier stages found stands."""
    result.findings = layer.take_findings() + [Finding(
        f"{stage.name}.interrupted", Status.UNKNOWN, f"{stage.name} was stopped ({run.interrupted}) before it "
                                                     f"finished: nothing of it was judged", [],
        f"run `{result.command}` again")]
    result.wall_s = time.monotonic() - start
    for later in run.stages[run.stages.index(result) + 1:]:
        if selected is not None and later.name not in selected:
            later.skipped = "not selected"
            continue
        later.skipped = f"the run was stopped ({run.interrupted})"
        later.findings = [Finding(f"{later.name}.interrupted", Status.UNKNOWN,
                                  f"{later.name} was not run: the run was stopped ({run.interrupted})", [],
                                  f"run `{later.command}`")]


def mark_answers(stage: Stage, findings: List[Finding]) -> None:
    """A finding that answers a flag the user gave (the stage's `answers` table) names the flag: it is shown
    on the first screen whatever its status, never folded into "N checks passed"."""
    given = stage.asked if stage.asked is not None else given_flags(stage.options)
    for finding in findings:
        asked = [given[name] for name, checks in stage.answers.items() if name in given and any(
            finding.check == check or finding.check.startswith(check + ".") for check in checks)]
        if asked:
            finding.answers = ", ".join(asked)


def only_what_was_checked(layer: NodeLayer, findings: List[Finding]) -> List[Finding]:
    """Where not one node answered, no rule held on any node: its OK lines ("hostnames are unique on 0 nodes")
    are dropped and the stage says, as UNKNOWN, that it checked no node. The reach findings say why."""
    known = layer.known
    if known is None or any(p.facts is not None for p in known):
        return findings
    return [f for f in findings if f.status is not Status.OK] + [
        Finding("run.no_node", Status.UNKNOWN, f"{NOTHING_CHECKED} on any node: none of the {len(known)} "
                                               f"answered", [], "make the nodes reachable (see the reach findings)",
                [p.name for p in known])]
