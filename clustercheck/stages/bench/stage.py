"""The bench stage: the worker launched and followed (gather.py), judged (rules.py), shown (render.py, plots.py)."""

from __future__ import annotations

from typing import Dict, List, Sequence

from clustercheck.core.errors import InputError
from clustercheck.core.inventory import fold
from clustercheck.core.result import Finding
from clustercheck.core.thresholds import load_config
from clustercheck.node.layer import NodeLayer
from clustercheck.runner.stage import Stage, StageResult
from clustercheck.stages.bench import plots, render
from clustercheck.stages.bench.baseline import read_baseline
from clustercheck.stages.bench.facts import BenchFacts
from clustercheck.stages.bench.gather import gather_bench, print_progress
from clustercheck.stages.bench.options import BenchOptions
from clustercheck.stages.bench.rules import Expectations, judge_bench


def expectations(options: BenchOptions) -> Expectations:
    """What the bandwidth is judged against; a bad --baseline or --config file is bad input, before anything runs."""
    thresholds = load_config(options.config_path).bench
    baseline = read_baseline(options.baseline, options.baseline_collective) if options.baseline else None
    return Expectations(baseline=baseline,
                        fraction=thresholds.expected_fraction, configured_busbw=thresholds.expected_busbw)


class BenchStage(Stage):
    name = "bench"
    answers = {"expect_busbw": ("bench.expected",), "baseline": ("bench.baseline",), "pairwise": ("bench.pairwise",),
               **{size: ("bench.bandwidth", "bench.expected") for size in
                  ("collectives", "min_bytes", "max_bytes", "dtype", "op")}}
    launches_ranks = True

    def __init__(self, options: BenchOptions):
        super().__init__(options)
        if options.min_bytes is not None and options.max_bytes is not None and options.min_bytes > options.max_bytes:
            raise InputError("--min-bytes is above --max-bytes", "command line",
                             value=f"{options.min_bytes} > {options.max_bytes}")
        self.expect = expectations(options)

    def gather(self, layer: NodeLayer) -> BenchFacts:
        return gather_bench(layer.cluster, layer.nodes, layer.probed(), self.options, print_progress(),
                            self.expect.configured_busbw)

    def judge(self, facts: BenchFacts) -> List[Finding]:
        return judge_bench(facts, self.expect, self.options.timeout_s)

    def blocks(self, result: StageResult, later: Stage) -> str:
        """A later torchrun stage would fail the same way the bench's ranks did."""
        facts: BenchFacts = result.facts
        if not later.launches_ranks:
            return ""
        if facts.problems:
            return f"the bench could not start on {fold(list(facts.problems))}"
        failed = facts.failed_launches()
        if failed:
            nodes = [n for n, run in failed[0].runs.items() if run.exit_code != 0]
            return f"the bench's ranks failed: the {failed[0].name} launch on {fold(nodes)}"
        return ""

    def to_json(self, result: StageResult) -> Dict:
        return render.to_json(result.facts, result.findings)

    def render_terminal(self, result: StageResult, verbose: bool) -> str:
        return render.render_terminal(result.facts, result.findings, verbose)

    def save_images(self, result: StageResult, stem: str) -> List[str]:
        return plots.save_plots(result.facts, stem)

    def render_markdown(self, result: StageResult, command: str, images: Sequence[str]) -> str:
        return render.render_markdown(result.facts, result.findings, command, images)

    def report_section(self, result: StageResult, images: Sequence[str]) -> List[str]:
        out = []
        tables = render.sweep_tables(result.facts)
        if tables:
            out += ["## Bandwidth (nccl-tests format)", "", "```text", *tables, "```", ""]
        pairs = render.pair_matrix(result.facts, "github")
        if pairs:
            out += ["### Pairwise exchange (GB/s)", "", pairs, ""]
        rounds = render.search_rounds(result.facts, "github")
        if rounds:
            out += ["### Pair rounds (adaptive search)", "", rounds, ""]
        paths = render.nccl_path_table(result.facts, "github")
        if paths:
            out += ["### The path NCCL took, per node", "", paths, ""]
        return out + [f"![{image}]({image})" for image in images] + [""]

    def report_json(self, result: StageResult) -> Dict:
        return {"bench": render.to_json(result.facts, result.findings)}

    def samples(self, result: StageResult):
        """The sweep's bus bandwidth per collective and size, and what all_reduce should reach."""
        facts = result.facts
        if facts is None:
            return []
        found = []
        for collective, rows in facts.figures.by_collective.items():
            for row in rows:
                busbw = max((row[p]["busbw"] for p in ("out_of_place", "in_place") if isinstance(row.get(p), dict)
                             and row[p].get("busbw") is not None), default=None)
                if busbw is not None:
                    found.append(("clustercheck_bench_busbw_bytes_per_second",
                                  {"collective": collective, "size_bytes": str(row["size"])}, busbw * 1e9))
        if facts.expected is not None:
            sizes = [row["size"] for row in facts.figures.by_collective.get("all_reduce", [])]
            gbps, _ = facts.expected.at_largest(max(sizes)) if sizes else (facts.expected.gbps, "")
            found.append(("clustercheck_bench_busbw_expected_bytes_per_second", {}, gbps * 1e9))
        return found
