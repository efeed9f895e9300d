"""The one result type every check yields, and the verdict over many.

A Finding says what is wrong (or right), on which nodes, with the evidence and a
remedy a person can act on. The verdict of a run is the worst status among them,
and the exit code follows it (Nagios codes: OK 0, WARN 1, FAIL 2, UNKNOWN 3).

UNKNOWN is "could not check": a probe section that could not be read, a counter the
driver would not give. It is never OK: it outranks WARN, so a run with one is not READY;
a FAIL outranks it (a cluster known to be broken is NOT READY whatever else is unknown).

READY is earned, never the default: a verdict over findings none of which checked anything (no finding
at all, or notes only: "3 files skipped", "a line was read cut") is UNKNOWN, whatever command made them.
A note is a Finding with checked=False: shown, never counted as a check that passed.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Sequence

from clustercheck.core.errors import EXIT_FAIL, EXIT_OK, EXIT_UNKNOWN, EXIT_WARN


class Status(enum.IntEnum):
    """Ordered by how bad: worst() is max(). The exit codes are Nagios's."""

    OK = 0
    WARN = 1
    UNKNOWN = 2
    FAIL = 3

    @property
    def exit_code(self) -> int:
        return {Status.OK: EXIT_OK, Status.WARN: EXIT_WARN, Status.UNKNOWN: EXIT_UNKNOWN,
                Status.FAIL: EXIT_FAIL}[self]

    @property
    def label(self) -> str:
        return self.name


VERDICTS = {Status.OK: "READY", Status.WARN: "READY, WITH WARNINGS",
            Status.UNKNOWN: "UNKNOWN: NOT EVERYTHING COULD BE CHECKED", Status.FAIL: "NOT READY"}
NOTHING_CHECKED = "nothing was checked"        # a run's finding says it; the verdict heads with it
NOTHING_CHECKED_VERDICT = "UNKNOWN: " + NOTHING_CHECKED.upper()


@dataclass
class Finding:
    check: str                 # stable id, e.g. "versions.torch", for diffs between reports
    status: Status
    summary: str               # one line
    evidence: List[str] = field(default_factory=list)   # e.g. "node[01-03]: 2.3.1", "node04: not installed"
    remedy: str = ""
    nodes: List[str] = field(default_factory=list)      # the nodes at fault
    answers: str = ""          # the flag whose question it answers ("--params 1B"): shown whatever its status
    checked: bool = True       # False: a note about the reading (a file skipped), not a check; never a pass

    def __post_init__(self) -> None:
        if not self.checked and self.status is not Status.OK:
            raise ValueError(f"finding {self.check!r}: a note (checked=False) is OK; a {self.status.name} checked something")

    def to_dict(self) -> Dict:
        data = asdict(self)
        data["status"] = self.status.name
        if not self.answers:
            del data["answers"]
        if self.checked:
            del data["checked"]
        return data


def note(check: str, summary: str, evidence: Sequence[str] = ()) -> Finding:
    """A note about what was read (a file skipped, a line read cut): shown, never a check that passed."""
    return Finding(check, Status.OK, summary, list(evidence), checked=False)


def nothing_checked(findings: Sequence[Finding]) -> bool:
    """No finding checked anything: the verdict is UNKNOWN, never READY."""
    return not any(f.checked for f in findings)


def run_judges(judges: Sequence[Callable[[Any], List[Finding]]], facts: Any) -> List[Finding]:
    """Every judge of a list over the same facts, their findings in the list's order: how every stage
    and the node layer keep their judges (a module-level JUDGES list)."""
    findings: List[Finding] = []
    for judge in judges:
        findings += judge(facts)
    return findings


def worst(findings: Sequence[Finding]) -> Status:
    """The worst status among the findings; UNKNOWN where none of them checked anything (READY is earned)."""
    status = max((f.status for f in findings), default=Status.UNKNOWN)
    return max(status, Status.UNKNOWN) if nothing_checked(findings) else status


def sort_findings(findings: Sequence[Finding]) -> List[Finding]:
    """Worst first; otherwise in the order the checks ran."""
    return sorted(findings, key=lambda f: -f.status)


def verdict_line(findings: Sequence[Finding]) -> str:
    counts = {s: sum(1 for f in findings if f.status is s) for s in Status}
    parts = [f"{counts[Status.FAIL]} failed"] if counts[Status.FAIL] else []
    if counts[Status.UNKNOWN]:
        parts.append(f"{counts[Status.UNKNOWN]} could not be checked")
    if counts[Status.WARN]:
        parts.append(f"{counts[Status.WARN]} warning{'s' if counts[Status.WARN] != 1 else ''}")
    passed = sum(1 for f in findings if f.status is Status.OK and f.checked)
    parts.append(f"{passed} passed")
    notes = len(findings) - sum(1 for f in findings if f.checked)
    if notes:
        parts.append(f"{notes} note{'s' if notes != 1 else ''}")
    status = worst(findings)
    # no finding said OK, WARN or FAIL: every check that ran could not check (no node answered, every stage skipped)
    seen = any(f.checked and f.status is not Status.UNKNOWN for f in findings)
    head = NOTHING_CHECKED_VERDICT if status is Status.UNKNOWN and not seen else VERDICTS[status]
    return f"{head} ({', '.join(parts)})"

