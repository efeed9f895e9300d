"""The bench's figures, computed once from what the ranks reported: each sweep row with its
algbw and busbw, the average bus bandwidth per collective, each pair's exchange speed, the
adaptive search replayed from its rounds, and where a budget cut a stage short.

The judges and every rendering (terminal, Markdown, plots, the readiness report) read these;
none of them recomputes a bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from clustercheck.onnode.rounds import Isolation, counted, exchange_gbps, replay
from clustercheck.ranks.runs import RanksRun
from clustercheck.outputs.nccl_tests import PLACEMENTS, add_bandwidths, avg_busbw


@dataclass
class BenchFigures:
    by_collective: Dict[str, List[Dict]] = field(default_factory=dict)  # sweep rows with algbw / busbw
    avg_busbw: Dict[str, float] = field(default_factory=dict)
    pair_mode: Optional[str] = None       # "full" (every pair), "adaptive" (the search), None (no pair rounds)
    pairs: Dict[str, Dict[Tuple[str, str], float]] = field(default_factory=dict)   # full: phase -> (a, b) -> GB/s
    rounds: List[Dict[Tuple[str, str], float]] = field(default_factory=list)      # adaptive: each round's pairs
    search: Optional[Isolation] = None    # adaptive: the worker's search replayed from its rounds
    budget: List[Dict] = field(default_factory=list)   # where a stage stopped early, and why
    starved: List[Dict] = field(default_factory=list)  # pair exchanges not counted: a side waited for a CPU

    @property
    def rows(self) -> List[Dict]:
        return [row for rows in self.by_collective.values() for row in rows]


def sweep_rows(launch: RanksRun) -> List[Dict]:
    return [add_bandwidths(dict(row, **{p: dict(row[p]) for p in PLACEMENTS if row.get(p)}))
            for row in launch.events("row")]


def pair_speeds(launch: RanksRun, phase: str) -> Dict[Tuple[str, str], float]:
    """GB/s of each pair's exchange in one phase ("matrix": the round robin, "confirm": the re-pairing)."""
    return {(e["a"], e["b"]): exchange_gbps(e) for e in launch.events("pair")
            if e.get("phase") == phase and counted(e)}


def round_speeds(launch: RanksRun) -> List[Dict[Tuple[str, str], float]]:
    """The adaptive search's rounds in order (a round whose pairs all failed to report is empty)."""
    rounds: List[Dict[Tuple[str, str], float]] = [{} for _ in launch.events("round")]
    for event in launch.events("pair"):
        if counted(event) and event["round"] < len(rounds):
            rounds[event["round"]][(event["a"], event["b"])] = exchange_gbps(event)
    return rounds


def compute_figures(launches: List[RanksRun]) -> BenchFigures:
    figures = BenchFigures()
    for launch in launches:
        for row in sweep_rows(launch):
            figures.by_collective.setdefault(row["collective"], []).append(row)
        figures.budget += launch.events("budget")
        figures.starved += [e for e in launch.events("pair") if e.get("starved")]
        figures.pair_mode = launch.config.get("pairwise")
        if figures.pair_mode == "full":
            figures.pairs = {phase: pair_speeds(launch, phase) for phase in ("matrix", "confirm")}
        elif figures.pair_mode == "adaptive":
            figures.rounds = round_speeds(launch)
            figures.search = replay(launch.config["nodes"], figures.rounds, launch.config.get("max_rounds"))
    for name, rows in figures.by_collective.items():
        average: Optional[float] = avg_busbw(rows)
        if average is not None:
            figures.avg_busbw[name] = average
    return figures
