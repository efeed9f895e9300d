"""Python stacks of processes on every node, folded: identical stacks under one compact list.

Gathering (stack_gather.py) runs clustercheck/onnode/stacks_probe.py on each node (py-spy, or the hang hook
of clustercheck's own ranks); folding groups processes whose main thread stands in the same
place (and, for ranks that answered, the same last collective); the odd ones, the smallest
groups, come first. Used by `clustercheck stacks` and by bench and smoke when a run stops
moving (clustercheck/ranks/forensics.py judges those).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from clustercheck.core.inventory import fold
from clustercheck.core.result import Finding, Status, worst
from clustercheck.display.findings import findings_lines, json_header

FRAMES_SHOWN = 12          # innermost frames printed per block
STOPPED = ("T", "t")
# What a main thread does, read from its frames innermost first: (activity, pattern on "path:function").
# py-spy names a method Class.method with a short path, faulthandler method with the full path.
ACTIVITIES = [
    ("lock", re.compile(r"file_baton\.py:.*wait|filelock.*:.*acquire|:(\w+\.)?(flock|lockf)$")),
    ("compile", re.compile(r"cpp_extension\.py:|op_builder.*:.*(jit_load|build|load)$|ninja")),
    ("import", re.compile(r"<frozen importlib|:_find_and_load|:(\w+\.)?import_module$")),
    ("filesystem", re.compile(r"torch/serialization\.py:|serialization\.py:.*(save|load|_open|write)|safetensors|"
                              r":(\w+\.)?(fsync|save_checkpoint|load_checkpoint|copyfile|copyfileobj)$")),
]
ACTIVITY_TEXT = {"lock": "waiting on a file lock", "compile": "compiling a C++ op", "import": "in an import",
                 "filesystem": "reading or writing files"}


@dataclass
class ProcessStack:
    """One process on one node: where its main thread stands, or why that is unknown."""

    node: str
    pid: int
    rank: Optional[int]
    state: str                         # /proc state letter: R S D T Z
    state_text: str
    frames: List[Tuple[str, str, int]]  # the main thread, innermost first (empty: unknown)
    threads: int = 0
    source: str = ""                   # py-spy or faulthandler
    problem: str = ""
    step: Optional[int] = None         # from the rank's hang hook
    phase: str = ""
    collective: Optional[Dict] = None  # the last one the flight recorder holds: name, seq, group, state
    command: str = ""
    flight: Optional[Dict] = None      # the rank's Flight Recorder record, as its hook answered (JSON shapes)
    job: str = ""                      # "MASTER_ADDR:MASTER_PORT (run ID)" of its job (nodelib.job_key), "" unknown

    @property
    def label(self) -> str:
        return f"rank {self.rank}" if self.rank is not None else f"pid {self.pid}"

    @property
    def stopped(self) -> bool:
        return self.state in STOPPED

    @property
    def known(self) -> bool:
        return bool(self.frames)

    @property
    def where(self) -> str:
        """The innermost frame of the main thread: "all_reduce (torch/distributed/distributed_c10d.py:2950)"."""
        if not self.frames:
            return ""
        func, path, line = self.frames[0]
        return f"{func} ({path}:{line})"

    @property
    def activity(self) -> str:
        """"lock", "compile", "import" or "filesystem": what the innermost telling frame does ("" for none).
        A lock taken inside a compile is torch's build lock ("build-lock")."""
        for index, (func, path, _) in enumerate(self.frames):
            for name, pattern in ACTIVITIES:
                if pattern.search(f"{path}:{func}"):
                    if name == "lock" and any(ACTIVITIES[1][1].search(f"{p}:{f}") for f, p, _ in self.frames[index:]):
                        return "build-lock"
                    return name
        return ""

    @property
    def doing(self) -> str:
        """The activity in words, with the frame that shows it:
        "waiting on a file lock at wait (torch/utils/file_baton.py:42)"."""
        activity = self.activity
        if not activity:
            return ""
        text = "waiting on torch's C++ extension build lock" if activity == "build-lock" else ACTIVITY_TEXT[activity]
        return f"{text} at {self.where}"

    @property
    def in_collective(self) -> str:
        """"all_reduce #12" from the flight recorder, else the innermost torch.distributed frame's function;
        "" for a rank whose frames show it doing something else (a lock, a compile, an import, files)."""
        if self.activity:
            return ""
        if self.collective and self.collective.get("name"):
            seq = self.collective.get("seq")
            return f"{self.collective['name']}" + (f" #{seq}" if seq is not None else "")
        for func, path, _ in self.frames:
            if "torch/distributed" in path and not func.startswith(("_", "wrapper")):
                return func.split(".")[-1]
        return ""


@dataclass
class Group:
    """Processes whose main threads stand in the same place."""

    members: List[ProcessStack] = field(default_factory=list)

    @property
    def first(self) -> ProcessStack:
        return self.members[0]

    @property
    def who(self) -> str:
        return who(self.members)


def ranges(numbers: Sequence[int]) -> str:
    """[0,1,2,5,7,8] -> '0-2,5,7-8'."""
    out: List[str] = []
    for n in sorted(set(numbers)):
        if out and re.match(rf"^(\d+-)?{n - 1}$", out[-1]):
            out[-1] = f"{out[-1].split('-')[0]}-{n}"
        else:
            out.append(str(n))
    return ",".join(out)


def who(members: Sequence[ProcessStack]) -> str:
    """'rank 5 on n3', or 'ranks 0-2,4-7 on n[1-4]' (pids where there are no ranks)."""
    nodes = fold(sorted({m.node for m in members}, key=_natural))
    ranked = [m.rank for m in members if m.rank is not None]
    if len(members) == 1:
        return f"{members[0].label} on {nodes}"
    if len(ranked) == len(members):
        return f"ranks {ranges(ranked)} on {nodes}"
    return f"{len(members)} processes on {nodes}"


def _natural(text: str):
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def key_of(p: ProcessStack) -> Tuple:
    """Alike processes share a key, whichever tool took their stacks: py-spy names a method
    Class.method and shortens paths, faulthandler names it method and gives full paths."""
    collective = (p.collective or {}).get("name"), (p.collective or {}).get("seq")
    frames = tuple((func.split(".")[-1], path.rsplit("/", 1)[-1], line) for func, path, line in p.frames)
    return (p.stopped, not p.known, frames, collective if p.collective else None)


def fold_stacks(stacks: Sequence[ProcessStack]) -> List[Group]:
    """Groups of processes alike, the odd ones (smallest groups) first."""
    groups: Dict[Tuple, Group] = {}
    for p in sorted(stacks, key=lambda p: (_natural(p.node), p.rank if p.rank is not None else p.pid)):
        groups.setdefault(key_of(p), Group()).members.append(p)
    return sorted(groups.values(), key=lambda g: (len(g.members), not g.first.stopped, _natural(g.first.node)))


def render_group(group: Group, frames_shown: int = FRAMES_SHOWN) -> List[str]:
    """A block: who, their state and collective, then the main thread's frames (innermost first)."""
    first = group.first
    title = group.who if group.who[0].isdigit() else f"{group.who} ({len(group.members)})"
    detail = []
    if first.stopped:
        detail.append(first.state_text)
    if first.collective:
        detail.append(f"last collective {first.in_collective} ({first.collective.get('state', '?')})")
    steps = sorted({m.step for m in group.members if m.step is not None})
    if steps:
        detail.append(f"step {ranges(steps)}")
    lines = ["-" * max(15, len(title)), title + (f": {'; '.join(detail)}" if detail else ""), "-" * max(15, len(title))]
    if not first.known:
        problems = sorted({m.problem for m in group.members if m.problem})
        lines += [f"  (no stack: {p})" for p in problems] or ["  (no stack)"]
        return lines
    for func, path, line in first.frames[:frames_shown]:
        lines.append(f"  {func} ({path}:{line})")
    if len(first.frames) > frames_shown:
        lines.append(f"  ... {len(first.frames) - frames_shown} outer frames")
    return lines


def render_stacks(groups: Sequence[Group], problems: Dict[str, str], frames_shown: int = FRAMES_SHOWN) -> str:
    lines: List[str] = []
    for group in groups:
        lines += render_group(group, frames_shown)
    total = sum(len(g.members) for g in groups)
    lines.append("")
    lines.append(f"{total} process{'es' * (total != 1)} in {len(groups)} distinct stack{'s' * (len(groups) != 1)}"
                 + ("; odd first" if len(groups) > 1 else ""))
    by_problem: Dict[str, List[str]] = {}
    for node, problem in problems.items():
        by_problem.setdefault(problem, []).append(node)
    for problem, names in by_problem.items():
        lines.append(f"could not look at {fold(sorted(names, key=_natural))}: {problem}")
    return "\n".join(lines)


def stacks_json(groups: Sequence[Group], problems: Dict[str, str], pattern: str,
                findings: Sequence[Finding] = ()) -> Dict:
    return {**json_header("stacks", findings), "match": pattern, "problems": problems,
            "groups": [{"count": len(g.members), "who": g.who, "state": g.first.state_text, "source": g.first.source,
                        "frames": [list(f) for f in g.first.frames],
                        "processes": [{"node": m.node, "pid": m.pid, "rank": m.rank, "state": m.state, "step": m.step,
                                       "problem": m.problem} for m in g.members]}
                       for g in groups]}


def stacks_findings(found: Sequence[ProcessStack], problems: Dict[str, str], pattern: str,
                    num_nodes: int) -> List[Finding]:
    """The verdict's findings: a node not looked at is UNKNOWN, nothing matched or a process without its stack is
    a FAIL, and only processes really dumped are a pass (nothing dumped is never one)."""
    findings: List[Finding] = []
    by_problem: Dict[str, List[str]] = {}
    for node, problem in problems.items():
        by_problem.setdefault(problem, []).append(node)
    for problem, names in by_problem.items():
        names = sorted(names, key=_natural)
        findings.append(Finding("stacks.reach", Status.UNKNOWN, f"could not look at {fold(names)}: {problem}", [],
                                "make the node reachable (clustercheck run NODES -- true says why not)", names))
    looked = num_nodes - len(problems)
    if not found and looked:
        findings.append(Finding("stacks.match", Status.FAIL, f"no Python process matches {pattern!r} on any of the "
                                                             f"{looked} node(s) looked at", [],
                                "check --match against the processes' command lines (ps -eo args on a node)"))
    missing = [p for p in found if not p.known]
    if missing:
        findings.append(Finding("stacks.dumped", Status.FAIL, f"{len(missing)} of {len(found)} matching process(es) "
                                                              f"could not be dumped",
                                sorted({f"{p.node}: {p.label}: {p.problem or 'no stack'}" for p in missing})[:8],
                                "py-spy needs ptrace rights over the processes: root, or their user with "
                                "kernel.yama.ptrace_scope=0 (pip install py-spy on the nodes)",
                                sorted({p.node for p in missing}, key=_natural)))
    dumped = [p for p in found if p.known]
    if dumped:
        findings.append(Finding("stacks.dumped", Status.OK, f"{len(dumped)} matching process(es) dumped on "
                                                            f"{fold(sorted({p.node for p in dumped}, key=_natural))}"))
    return findings


def stacks_result(found: Sequence[ProcessStack], problems: Dict[str, str], ras: Sequence[Finding], pattern: str,
                  frames_shown: int, num_nodes: int, as_json: bool,
                  flight: Optional[Tuple[Dict, List[Finding]]] = None) -> Tuple[str, int]:
    """What `clustercheck stacks` prints and its exit code, the worst of the stacks' findings. NCCL's RAS and the
    judge of the ranks' Flight Recorder records (where their hooks answered with one) are shown beside them,
    outside the verdict: most jobs run no RAS to ask and no hook, and a dump is no less complete for it."""
    findings = stacks_findings(found, problems, pattern, num_nodes)
    groups = fold_stacks(found)
    if as_json:
        doc = {**stacks_json(groups, problems, pattern, findings), "nccl_ras": [f.to_dict() for f in ras]}
        if flight:
            doc["flight_recorder"] = {**flight[0], "findings": [f.to_dict() for f in flight[1]]}
        return json.dumps(doc, indent=1), worst(findings).exit_code
    lines = [render_stacks(groups, problems, frames_shown), ""] if found or problems else []
    if flight:
        lines += ["The ranks' Flight Recorder records:", *findings_lines(flight[1], verbose=True, verdict=False), ""]
    lines += ["NCCL's RAS:", *findings_lines(ras, verbose=True, verdict=False), "", *findings_lines(findings)]
    return "\n".join(lines), worst(findings).exit_code
