"""The bench's figures, computed once from what the ranks reported: each sweep row with its
algbw and busbw, the average bus bandwidth per collective, each pair's exchange speed, the
adaptive search replayed from its rounds, and where a budget cut a stage short.

The judges and every rendering (terminal, Markdown, plots, the readiness report) read these;
none of them recomputes a bandwidth.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from clustercheck.onnode.rounds import SLOW, Isolation, cpu_explains, cpu_wait, exchange_gbps, replay
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
    starved: List[Dict] = field(default_factory=list)  # pair exchanges not counted: a side's wait for a CPU explains
    # their slowness (cpu_explains)

    @property
    def rows(self) -> List[Dict]:
        return [row for rows in self.by_collective.values() for row in rows]


def sweep_rows(launch: RanksRun) -> List[Dict]:
    return [add_bandwidths(dict(row, **{p: dict(row[p]) for p in PLACEMENTS if row.get(p)}))
            for row in launch.events("row")]


def pair_speeds(launch: RanksRun, phase: str) -> Tuple[Dict[Tuple[str, str], float], List[Dict]]:
    """GB/s of each pair's exchange in one phase ("matrix": the round robin, "confirm": the re-pairing), and the
    exchanges not counted: slow (below SLOW x the phase's median) and explained by a side's wait for a CPU."""
    events = [e for e in launch.events("pair") if e.get("phase") == phase and e.get("time_us")]
    speeds = {(e["a"], e["b"]): exchange_gbps(e) for e in events}
    if not speeds:
        return {}, []
    limit = SLOW * statistics.median(speeds.values())
    uncounted = [e for e in events if cpu_explains(speeds[(e["a"], e["b"])], limit, cpu_wait(e))]
    for event in uncounted:
        speeds.pop((event["a"], event["b"]), None)
    return speeds, uncounted


def round_speeds(launch: RanksRun) -> Tuple[List[Dict[Tuple[str, str], float]], List[Dict[Tuple[str, str], float]]]:
    """The adaptive search's rounds in order (a round whose pairs all failed to report is empty), and each
    round's shares of time its pairs' sides waited for a CPU (the search leaves out a slow one they explain)."""
    rounds: List[Dict[Tuple[str, str], float]] = [{} for _ in launch.events("round")]
    waits: List[Dict[Tuple[str, str], float]] = [{} for _ in rounds]
    for event in launch.events("pair"):
        if event.get("time_us") and event["round"] < len(rounds):
            rounds[event["round"]][(event["a"], event["b"])] = exchange_gbps(event)
            waits[event["round"]][(event["a"], event["b"])] = cpu_wait(event)
    return rounds, waits


def compute_figures(launches: List[RanksRun]) -> BenchFigures:
    figures = BenchFigures()
    for launch in launches:
        for row in sweep_rows(launch):
            figures.by_collective.setdefault(row["collective"], []).append(row)
        figures.budget += launch.events("budget")
        figures.pair_mode = launch.config.get("pairwise")
        if figures.pair_mode == "full":
            for phase in ("matrix", "confirm"):
                figures.pairs[phase], uncounted = pair_speeds(launch, phase)
                figures.starved += uncounted
        elif figures.pair_mode == "adaptive":
            figures.rounds, waits = round_speeds(launch)
            figures.search = replay(launch.config["nodes"], figures.rounds, launch.config.get("max_rounds"), waits)
            left_out = {(r, a, b) for r, _, a, b, _ in figures.search.uncounted}
            figures.starved += [e for e in launch.events("pair") if (e.get("round"), e["a"], e["b"]) in left_out]
    for name, rows in figures.by_collective.items():
        average: Optional[float] = avg_busbw(rows)
        if average is not None:
            figures.avg_busbw[name] = average
    return figures
