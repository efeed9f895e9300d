"""Which rank is stuck where, from the stacks taken before a stalled run was stopped.

bench and smoke take every rank's stack (clustercheck/ranks/stacks.py) when their run stops moving
or reaches its deadline; this module turns them into one sentence and the folded blocks:
"rank 3 on n2 is stopped (SIGSTOP or a debugger); the other 7 wait in all_reduce #25 (step 6)".
Judging only: nothing here reaches a node.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Dict, List, Optional, Sequence, Tuple

from clustercheck.core.result import Finding, Status
from clustercheck.flight.findings import judge as judge_records
from clustercheck.flight.read import from_answers
from clustercheck.ranks.stacks import Group, ProcessStack, fold_stacks, ranges, who


@dataclass
class Forensics:
    """What the stacks say about a hang: its sentence, the ranks folded by where they stand, the odd ones."""

    summary: str
    groups: List[Group] = field(default_factory=list)      # odd first, as stacks.fold_stacks orders them
    odd: List[ProcessStack] = field(default_factory=list)
    ras: List = field(default_factory=list)     # what NCCL's RAS said of the job (nccl/ras_judge.py's findings)
    flight: List[Finding] = field(default_factory=list)   # the ranks' Flight Recorder records judged (flight/)

    @property
    def remedy(self) -> str:
        """What to do, by what the stacks show: the odd ranks' activity, else the one every rank shares."""
        looked = self.odd or [g.first for g in self.groups if g.first.known]
        activities = [p.activity for p in looked if p.activity]
        if activities:
            return REMEDY_BY_ACTIVITY[activities[0]]
        records = [f for f in self.flight if f.status is Status.FAIL]
        return records[0].remedy if records and not self.odd else REMEDY_HANG


REMEDY_HANG = ("the odd rank is where to look: its node (clustercheck env on it), its stack above; if none is odd, "
               "a blocked port or a very slow link (clustercheck net, bench)")
# What to do about ranks stuck in something other than a collective, by what their stacks show.
REMEDY_BY_ACTIVITY = {
    "build-lock": "a build stopped half way left torch's build lock (`lock` in the op's directory under "
                  "TORCH_EXTENSIONS_DIR, default ~/.cache/torch_extensions, often a shared home) and no build holds "
                  "it: clustercheck env names it; delete it once no node that shares the directory is compiling",
    "lock": "a file lock nobody releases: find who holds it (lsof / fuser on the lock file) or delete a stale one",
    "compile": "the ranks are compiling C++ ops (DeepSpeed builds them on first use, minutes): raise --timeout for "
               "this first run, or pre-build them (DS_BUILD_OPS=1 pip install deepspeed)",
    "import": "an import does not finish: a slow or hung filesystem under the Python environment or the code (an "
              "NFS / Lustre mount), or an import that waits on a lock; check the mount on that node",
    "filesystem": "the ranks are stuck reading or writing files: check the checkpoint / data filesystem on that node "
                  "(a hung network mount leaves processes in D state)",
}


def place(p: ProcessStack, plural: bool = False) -> str:
    """Where a rank stands (or ranks stand, alike), in words."""
    be = "are" if plural else "is"
    if p.stopped:
        return f"{be} {p.state_text}" + (f" at {p.where}" if p.known else "")
    if p.activity:
        return f"{be} {p.doing}"
    collective = p.in_collective
    if collective:
        return f"{be} in {collective}"
    if p.known:
        return f"{be} in {p.where}"
    return f"did not answer ({p.problem or 'no stack'})"


def _seq(group) -> int:
    """The flight recorder's sequence number the group's ranks stand at (-1: unknown)."""
    seq = (group.first.collective or {}).get("seq")
    return seq if isinstance(seq, int) else -1


def pick_majority(groups):
    """The group the others are judged against, or None when no group stands out.

    The largest group of ranks whose stack was taken; among equals, the ones waiting in a
    collective (a rank elsewhere is what they wait for), then the ones furthest on in the
    flight recorder (the laggard is odd). Equal on all counts: no majority, nobody is blamed."""
    known = [g for g in groups if g.first.known or g.first.stopped]
    if not known:
        return None
    def rank(g):
        return (len(g.members), not g.first.stopped, bool(g.first.in_collective), _seq(g))
    best = max(known, key=rank)
    if sum(1 for g in known if rank(g) == rank(best)) > 1:
        return None
    return best


def flight_of(stacks: Sequence[ProcessStack]) -> Optional[Tuple[Dict, List[Finding]]]:
    """The Flight Recorder records the ranks' hooks answered beside their stacks, judged across the ranks (the
    first collective some never entered, a desync, in which process group): (its document, its findings), None
    where no rank answered with one."""
    answered = [s for s in stacks if s.flight is not None and s.rank is not None]
    if not answered:
        return None
    jobs: Dict[str, List[ProcessStack]] = {}
    for stack in answered:     # two jobs on one node (two users', or two tests'): each judged on its own ranks
        jobs.setdefault(stack.job, []).append(stack)
    judged = {job: _judge_job(members) for job, members in sorted(jobs.items())}
    if len(judged) == 1:
        return next(iter(judged.values()))
    docs, findings = [], []
    for job, (doc, found) in judged.items():
        label = f"the job at {job}" if job else "ranks of no known job"
        docs.append({"job": job, **doc})
        findings += [replace(f, summary=f"{label}: {f.summary}") for f in found]
    return {"jobs": docs}, findings


def _judge_job(answered: Sequence[ProcessStack]) -> Tuple[Dict, List[Finding]]:
    answers = [(f"{s.node} pid {s.pid} (rank {s.rank})", s.rank, s.flight) for s in answered]
    return judge_records(from_answers(answers), {s.rank: s.node for s in answered})


def judge_stacks(stacks: Sequence[ProcessStack], unreached: Dict[str, str], expected_ranks: Optional[int] = None
                 ) -> Forensics:
    """The odd ranks and where the rest wait; `expected_ranks`: how many ranks the run had.

    Ranks whose stack could not be taken are never the odd ones: they are said, not blamed."""
    groups = fold_stacks(stacks)
    unanswered = [g for g in groups if not g.first.known and not g.first.stopped]
    judged = [g for g in groups if g not in unanswered]
    majority = pick_majority(judged)
    parts = [describe(g) for g in judged if g is not majority]
    odd = [p for g in judged if g is not majority for p in g.members] if majority else []
    if majority is None:
        text = "no rank's stack could be taken" if not judged else "no group of ranks stands out: " + "; ".join(parts)
    else:
        text = "; ".join(parts + [_majority_text(majority, bool(parts))])
    text += "".join(f"; {g.who} did not answer ({g.first.problem or 'no stack'})" for g in unanswered)
    if expected_ranks and len(stacks) < expected_ranks:
        text += f"; {expected_ranks - len(stacks)} rank(s) not found on their nodes (exited, or the node was not reached)"
    text += "".join(f"; {node}: could not look ({why})" for node, why in unreached.items())
    flight = flight_of(stacks)
    return Forensics(text, groups, odd, flight=flight[1] if flight else [])


def standing(group: Group) -> str:
    """"are in all_reduce #53 (step 30)": where the group's ranks stand."""
    return f"{place(group.first, len(group.members) > 1)}{step_text(group.members)}"


def describe(group: Group) -> str:
    """"ranks 0-2 on n[1-2] are in all_reduce #53 (step 30)"."""
    return f"{group.who} {standing(group)}"


def _majority_text(majority, others_named: bool) -> str:
    others, first = majority.members, majority.first
    if len(others) == 1 and others_named and first.in_collective and not first.stopped:
        return f"the other, {who(others)}, waits in {first.in_collective}{step_text(others)}"
    if len(others) == 1:
        return f"{who(others)} {place(first)}{step_text(others)}"
    how = (f"are {first.state_text}" if first.stopped else f"are {first.doing}" if first.activity
           else f"wait in {first.in_collective}" if first.in_collective else f"are in {first.where}")
    tail = (f"the other {len(others)} " if others_named else f"all {len(others)} ranks ") + how + step_text(others)
    if not others_named and not first.stopped and not first.activity:
        tail += ": none is odd (a peer outside the job, the network or a very slow link holds them all)"
    return tail


def step_text(members: Sequence[ProcessStack]) -> str:
    steps = [m.step for m in members if m.step is not None]
    return f" (step {ranges(steps)})" if steps else ""


def evidence_lines(forensics: Forensics, frames: int = 4) -> List[str]:
    """One line per folded group, the odd first: who, where, and the innermost frames."""
    lines = []
    for group in forensics.groups:
        path = " < ".join(f"{func} ({where}:{line})" for func, where, line in group.first.frames[:frames])
        count = f" ({len(group.members)})" if len(group.members) > 1 else ""
        lines.append(f"{group.who}{count} {standing(group)}" + (f": {path}" if path else ""))
    return lines


def hang_report(stalled_s: Optional[float], forensics: Optional[Forensics], timeout_s: float
                ) -> Tuple[str, List[str], List[str], List[int]]:
    """(summary, evidence, odd nodes, odd ranks) of a run that stalled or reached its deadline."""
    when = (f"no progress for {stalled_s:.0f} s" if stalled_s is not None
            else f"still running after {timeout_s:g} s")
    if forensics is None:
        return when, [], [], []
    ranks = sorted(p.rank for p in forensics.odd if p.rank is not None)
    ras = [f"NCCL RAS: {f.summary}" + (f" ({'; '.join(f.evidence[:4])})" if f.evidence else "")
           for f in forensics.ras if f.status.name != "UNKNOWN"]      # no NCCL job (Gloo): nothing to say
    # the records say which collective and which ranks, where the stacks say only where each rank stands
    records = [f"Flight Recorder: {f.summary}" + (f" ({'; '.join(f.evidence[:3])})" if f.evidence else "")
               for f in forensics.flight if f.status in (Status.FAIL, Status.WARN)]
    nodes = sorted({p.node for p in forensics.odd})
    if not nodes:     # no stack stands out: the ranks the records name as never entering the collective
        nodes = sorted({n for f in forensics.flight if f.check == "flight.missing" for n in f.nodes})
    return f"{when}: {forensics.summary}", evidence_lines(forensics) + records + ras, nodes, ranks
