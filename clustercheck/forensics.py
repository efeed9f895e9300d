"""Which rank is stuck where, from the stacks taken before a stalled run was stopped.

bench and smoke take every rank's stack (clustercheck/stacks.py) when their run stops moving
or reaches its deadline; this module turns them into one sentence and the folded blocks:
"rank 3 on n2 is stopped (SIGSTOP or a debugger); the other 7 wait in all_reduce #25 (step 6)".
Judging only: nothing here reaches a node.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from clustercheck.stacks import ProcessStack, fold_stacks, ranges, render_group, who


@dataclass
class Forensics:
    """What the stacks say about a hang: its sentence, the odd ranks, the folded blocks."""

    summary: str
    stacks: List[ProcessStack] = field(default_factory=list)
    odd: List[ProcessStack] = field(default_factory=list)
    blocks: List[str] = field(default_factory=list)        # the folded stacks, as printed
    unreached: Dict[str, str] = field(default_factory=dict)


REMEDY_HANG = ("the odd rank is where to look: its node (clustercheck env on it), its stack above; if none is odd, "
               "a blocked port or a very slow link (clustercheck net, bench); raise --timeout if the first DeepSpeed "
               "run compiles its ops")


def place(p: ProcessStack, plural: bool = False) -> str:
    """Where a rank stands (or ranks stand, alike), in words."""
    be = "are" if plural else "is"
    if p.stopped:
        return f"{be} {p.state_text}" + (f" at {p.where}" if p.known else "")
    collective = p.in_collective
    if collective:
        return f"{be} in {collective}"
    if p.known:
        return f"{be} in {p.where}"
    return f"did not answer ({p.problem or 'no stack'})"


def judge_stacks(stacks: Sequence[ProcessStack], unreached: Dict[str, str], expected_ranks: Optional[int] = None
                 ) -> Forensics:
    """The odd ranks and where the rest wait; `expected_ranks`: how many ranks the run had."""
    groups = fold_stacks(stacks)
    blocks = ["\n".join(render_group(g, frames_shown=8)) for g in groups]
    if not stacks:
        where = "; ".join(f"{n}: {why}" for n, why in unreached.items())
        return Forensics("no rank's stack could be taken" + (f" ({where})" if where else ""), [], [], blocks,
                         dict(unreached))
    majority = max(groups, key=lambda g: (len(g.members), not g.first.stopped, g.first.known))
    odd = [p for g in groups if g is not majority for p in g.members]
    parts = [f"{g.who} {place(g.first, len(g.members) > 1)}{step_text(g.members)}" for g in groups if g is not majority]
    others, first = majority.members, majority.first
    if len(others) == 1 and parts and first.in_collective and not first.stopped:
        tail = f"the other, {who(others)}, waits in {first.in_collective}{step_text(others)}"
    elif len(others) == 1:
        tail = f"{who(others)} {place(first)}{step_text(others)}"
    else:
        how = (f"are {first.state_text}" if first.stopped else f"wait in {first.in_collective}" if first.in_collective
               else f"are in {first.where}" if first.known else f"did not answer ({first.problem or 'no stack'})")
        tail = (f"the other {len(others)} " if parts else f"all {len(others)} ranks ") + how + step_text(others)
    if not parts and not first.stopped:
        tail += ": none is odd (a peer outside the job, the network or a very slow link holds them all)"
    missing = ""
    if expected_ranks and len(stacks) < expected_ranks:
        missing = f"; {expected_ranks - len(stacks)} rank(s) not found on their nodes (exited, or the node was not reached)"
    unreached_text = "".join(f"; {node}: could not look ({why})" for node, why in unreached.items())
    return Forensics("; ".join(parts + [tail]) + missing + unreached_text, list(stacks), odd, blocks,
                     dict(unreached))


def step_text(members: Sequence[ProcessStack]) -> str:
    steps = Counter(m.step for m in members if m.step is not None)
    if not steps:
        return ""
    return f" (step {ranges(list(steps))})"


def evidence_lines(forensics: Forensics, frames: int = 4) -> List[str]:
    """One line per folded group, the odd first: who, where, and the innermost frames."""
    lines = []
    for group in fold_stacks(forensics.stacks):
        first = group.first
        path = " < ".join(f"{func} ({where}:{line})" for func, where, line in first.frames[:frames])
        count = f" ({len(group.members)})" if len(group.members) > 1 else ""
        lines.append(f"{group.who}{count} {place(first, len(group.members) > 1)}{step_text(group.members)}"
                     + (f": {path}" if path else ""))
    return lines


def hang_report(stalled_s: Optional[float], forensics: Optional[Forensics], timeout_s: float
                ) -> Tuple[str, List[str], List[str], List[int]]:
    """(summary, evidence, odd nodes, odd ranks) of a run that stalled or reached its deadline."""
    when = (f"no progress for {stalled_s:.0f} s" if stalled_s is not None
            else f"still running after {timeout_s:g} s")
    if forensics is None:
        return when, [], [], []
    ranks = sorted(p.rank for p in forensics.odd if p.rank is not None)
    return (f"{when}: {forensics.summary}", evidence_lines(forensics), sorted({p.node for p in forensics.odd}), ranks)
