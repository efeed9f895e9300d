"""Why a job failed, and where: judged from the facts alone, every node's lines (what its ranks and its
launcher wrote) and how each node's launcher ended (NodeLines); smoke and explain both call it.

Every line of every node is read, not a tail: with several ranks per node, torchrun's own
report and the peers' echoes fill the end. torchrun's failure summary ("Root Cause (first
observed failure)": host, rank, exit code, signal, the rank's traceback from its error file)
is parsed. What a line says is the vocabulary's (clustercheck/vocabulary), read through lines.py.

A node (a rank, where its lines say which) is blamed only on its own evidence. Each rank's
lines give it a cause: a known one, else an error of its own that no cause names, else what
it said about the others (a failure between ranks, a peer gone). Across ranks, a known cause
outranks an error nobody can name, which outranks the others' view of it: a peer's "connection
closed" is the echo of a failure elsewhere and never names the node that printed it. An error
no cause names is "could not classify", naming the rank that failed first and its last lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from clustercheck.vocabulary.lookup import refine_by_lines
from clustercheck.failure.lines import (
    ECHO,
    FAILED,
    LINK,
    OWN,
    ROOT,
    Meaning,
    is_error,
    is_warning,
    is_wrapper,
    rank,
    ranks_of,
    signature_of,
)

__all__ = ["Cause", "NodeLines", "classify", "is_warning", "torchrun_failures"]
UNCLASSIFIED = "unclassified"
REMEDY_UNCLASSIFIED = ("read that rank's error above and its traceback (--json has every node's stderr): clustercheck "
                       "does not know this failure; the node and rank are where it happened first")


@dataclass
class Cause:
    kind: str
    nodes: List[str]
    ranks: List[int]
    evidence: List[str]
    summary: str
    remedy: str
    local_ranks: List[int] = field(default_factory=list)   # where only the node's launcher numbering is known
    seen: List[str] = field(default_factory=list)           # nodes that only reported it (an echo)


@dataclass
class NodeLines:
    """What one node's job said and how its launcher ended: the facts classify judges."""

    lines: List[str]
    exit_code: Optional[int] = 1            # None: still running when it was stopped
    lost: bool = False                      # the connection to the node dropped while the job ran
    cut_short: bool = False                 # stopped by us after another node failed
    ended_s: Optional[float] = None         # when it ended, where known (the first to end failed first)


@dataclass
class Hit:
    """One line that says something about a failure, and who printed it."""

    node: str
    line: str
    signature: Optional[Meaning]       # None: an error of its own that no cause names
    rank: Optional[int] = None
    local_rank: Optional[int] = None
    said_nothing: bool = False           # only its launcher says it failed

    @property
    def tier(self) -> int:
        return self.signature.tier if self.signature else FAILED if self.said_nothing else OWN


def torchrun_failures(text: str) -> List[Dict[str, str]]:
    """The entries of torchrun's failure summary ("Failures:" and "Root Cause"), root cause first."""
    entries: List[Dict[str, str]] = []
    for section in re.split(r"^\s*(?=Root Cause \(first observed failure\):|Failures:)", text, flags=re.M):
        root = section.startswith("Root Cause")
        for block in re.split(r"^\s*\[\d+\]:\s*$", section, flags=re.M)[1:]:
            entry = {}
            for key, value in re.findall(r"^\s*(time|host|rank|exitcode|error_file|traceback)\s*:\s*(.*)$",
                                         block.split("=====")[0], flags=re.M):    # indented, or pasted flush left
                entry.setdefault(key, value.strip())
            if entry:
                entry["root"] = "yes" if root else ""
                entries.append(entry)
    return sorted(entries, key=lambda e: not e["root"])


def _entry_ranks(entry: Dict[str, str]) -> Tuple[Optional[int], Optional[int]]:
    rank = re.match(r"\d+", entry.get("rank", ""))
    local = re.search(r"local_rank:\s*(\d+)", entry.get("rank", ""))
    return (int(rank.group(0)) if rank else None), (int(local.group(1)) if local else None)


def _signal(entry: Dict[str, str]) -> str:
    code = entry.get("exitcode", "")
    named = re.search(r"Signal (\d+) \((SIG\w+)\)", entry.get("traceback", ""))
    if named:
        return f"signal {named.group(1)} ({named.group(2)})"
    return f"exit code {code.split()[0]}" if code else ""


def node_hits(node: str, run: NodeLines, entries: List[Dict[str, str]]) -> List[Hit]:
    """Every line of the node that shows a cause or is an error of its own, torchrun's summary first."""
    hits = []
    for entry in entries:
        line = (f"rank {entry.get('rank', '?')} on {entry.get('host', node)}: {_signal(entry)}: "
                f"{entry.get('traceback', '')}")
        signature = signature_of(line)
        if signature:
            hits.append(Hit(node, line, signature, *_entry_ranks(entry)))
    for line in run.lines:
        if not line.strip() or is_warning(line):
            continue
        signature = signature_of(line)
        if signature is None and (is_wrapper(line) or not is_error(line)):
            continue
        hits.append(Hit(node, line.strip(), signature, *ranks_of(line)))
    return hits


# The launcher's own report that a child failed, naming no rank: torchrun's ChildFailedError raised at its end
# (torch/distributed/elastic/multiprocessing/errors/__init__.py; its summary, where printed, names the rank),
# DeepSpeed's launch.py "exits with return code = 1", subprocess's "returned non-zero exit status 1".
_CHILD_FAILED = re.compile(r"^\s*(?:\[\w+\]:\s*)?(?:[\w.]+\.)?ChildFailedError\b|exits with return code = [1-9]|"
                           r"returned non-zero exit status [1-9]")


def launcher_failures(lines: List[str]) -> List[str]:
    """The node's launcher lines that say a local rank failed ("failed (exitcode: 1) local_rank: 0", a
    CalledProcessError or "exits with return code" naming --local_rank=1, or its ChildFailedError naming none),
    not those it stopped (SIGTERM)."""
    return [line for line in lines if is_wrapper(line) and (ranks_of(line)[1] is not None or _CHILD_FAILED.search(line))
            and not re.search(r"SIGTERM|exitcode: -15|code = -15", line)]


def launcher_local_ranks(run: NodeLines) -> List[int]:
    """The local ranks the node's launcher says failed, in the order it says so."""
    return list(dict.fromkeys(local for local in (ranks_of(line)[1] for line in launcher_failures(run.lines))
                              if local is not None))


_LAUNCHER_FRAMES = re.compile(r"torch/distributed/run\.py|launcher/api\.py|deepspeed/launcher/|accelerate/commands/")


def tracebacks(lines: List[str]) -> List[List[str]]:
    """Each Python traceback in the lines: its frames and the line that ends it (the exception, or the last
    frame where the log was cut), a rank's prefix ("[rank0]: ") kept apart."""
    blocks = []
    for i, line in enumerate(lines):
        start = re.match(r"\s*(\[\w+\]:\s?)?Traceback \(most recent call last\)", line)
        if not start:
            continue
        prefix, block = start.group(1) or "", []
        for following in lines[i + 1:i + 400]:
            if prefix and not following.startswith(prefix.rstrip()):
                break
            body = following[len(prefix):]
            if not body.strip():
                break
            block.append(following)
            if not body.startswith((" ", "\t")):
                break    # the exception line ends it
        blocks.append(block)
    return [b for b in blocks if b]


def failed_silently(node: str, run: NodeLines) -> Optional[Hit]:
    """The node's launcher says a rank failed, though nothing it printed says why: the last line of the rank's
    own traceback (its error line may be cut from the log), else the launcher's line."""
    lines = run.lines
    failed = launcher_failures(lines)
    if not failed:
        return None
    own = [b for b in tracebacks(lines) if not is_wrapper(b[-1]) and not any(_LAUNCHER_FRAMES.search(x) for x in b)]
    last = own[-1][-1] if own else failed[-1]
    rank, local = ranks_of(last)
    return Hit(node, last.strip(), None, rank, local if local is not None else ranks_of(failed[-1])[1],
               said_nothing=True)


def _unit_cause(hits: List[Hit]) -> List[Hit]:
    """The hits that give one rank (or a node's unnumbered lines) its cause: a known cause of its own,
    else a failure between ranks, else an error nobody names, else an echo."""
    for tier in (ROOT, LINK, OWN, FAILED, ECHO):
        tiered = [h for h in hits if h.tier == tier and (tier != FAILED or h.signature)]
        if tier == OWN or not tiered:
            if tiered:
                return tiered
            continue
        first = min(rank(h.signature) for h in tiered)
        return [h for h in tiered if rank(h.signature) == first]
    return []


def _units(runs: Dict[str, NodeLines], failures: Dict[str, List[Dict[str, str]]]) -> List[List[Hit]]:
    """Each rank's cause (the lines naming a rank), and each node's lines that name none."""
    units: List[List[Hit]] = []
    for node, run in runs.items():
        groups: Dict[Tuple[str, Optional[int]], List[Hit]] = {}
        for hit in node_hits(node, run, failures[node]):
            printed_by = (("rank", hit.rank) if hit.rank is not None else
                          ("local", hit.local_rank) if hit.line.startswith("[default") else ("node", None))
            groups.setdefault(printed_by, []).append(hit)
        found = [found for found in map(_unit_cause, groups.values()) if found]
        silent = None if any(u[0].tier < FAILED for u in found) else failed_silently(node, run)
        units += found + ([[silent]] if silent else [])
    return units


def classify(runs: Dict[str, NodeLines]) -> Optional[Cause]:
    """The most telling cause of a failed job, and the nodes (and ranks) it points at; None where the lines
    name nothing and a node was still running when it was stopped (a hang: its judge is the caller's, who
    knows how long it waited and what the ranks' stacks said)."""
    lost = [n for n, r in runs.items() if r.lost]
    failures = {n: torchrun_failures("\n".join(r.lines)) for n, r in runs.items()}
    units = _units(runs, failures)
    roots = [(n, e) for n, entries in failures.items() for e in entries if e["root"]]
    for tier in (ROOT, OWN, LINK, FAILED, ECHO):
        if lost and tier != ROOT:
            break  # a node went down: the others' errors are its echo
        tiered = [unit for unit in units if unit[0].tier == tier]
        if not tiered:
            continue
        named = [unit for unit in tiered if unit[0].signature]
        if tier == FAILED and named:   # a rank that said nothing more than how it ended (SIGABRT, a bare cancel)
            return _known(named, tier, runs, roots)
        if tier in (OWN, FAILED):
            return _unclassified(tiered, runs, roots)
        if tier == ECHO and roots:
            return _first_failure(*roots[0])   # torchrun's first failed rank says more than a peer's echo
        return _known(tiered, tier, runs, roots)
    if lost:
        return Cause("node-down", lost, [], [f"{n}: the connection dropped while training ran" for n in lost],
                     "a node went down mid-run", "check the node (power, kernel log, OOM killer); drain it if it "
                                                  "does not come back")
    if any(r.exit_code is None and not r.cut_short for r in runs.values()):
        return None
    if roots:   # torchrun names the first rank that failed, even when nothing says why
        return _first_failure(*roots[0])
    failed = {n: r for n, r in runs.items() if r.exit_code not in (0, None)}
    return Cause(UNCLASSIFIED, list(failed), [],
                 [f"{n}: exit {r.exit_code}: {(r.lines or ['no error line'])[-1][:200]}" for n, r in failed.items()],
                 "could not classify: the trainer failed and said nothing telling", REMEDY_UNCLASSIFIED,
                 local_ranks=sorted({lr for r in failed.values() for lr in launcher_local_ranks(r)}))


def _known(units: List[List[Hit]], tier: int, runs: Dict[str, NodeLines], roots=()) -> Cause:
    signature = min((u[0].signature for u in units), key=rank)
    hits = [h for u in units if u[0].signature.kind == signature.kind for h in u]
    signature = refine_by_lines(signature, [line for n in dict.fromkeys(h.node for h in hits) for line in runs[n].lines])
    nodes = list(dict.fromkeys(h.node for h in hits))
    evidence = [f"{node}: {line[:300]}" for node in nodes for line in _telling_lines([h for h in hits if h.node == node])]
    ranks = sorted({h.rank for h in hits if h.rank is not None})
    if signature.kind == "crashed":
        evidence += [f"{node}: {line[:300]}" for node in nodes for line in crash_frames(runs[node].lines)]
    first = _root_rank(roots, nodes)
    if len(ranks) > 1 and first in ranks:
        # several ranks of one node failed alike: torchrun's "Root Cause (first observed failure)" says which
        # was first; the others are said, not named as failing first
        evidence.append(f"rank {first} failed first (torchrun's first observed failure); rank(s) "
                        f"{', '.join(str(r) for r in ranks if r != first)} failed the same way")
        ranks = [first]
    local = [] if ranks else sorted({h.local_rank for h in hits if h.local_rank is not None}
                                    or {lr for n in nodes for lr in launcher_local_ranks(runs[n])})
    if tier == ECHO:   # the nodes that printed it are witnesses: the failure was elsewhere
        return Cause(signature.kind, [], [], evidence,
                     f"{signature.summary}; seen from {', '.join(nodes)}, which node failed first is not in the logs",
                     signature.remedy, seen=nodes)
    return Cause(signature.kind, nodes, ranks, evidence, signature.summary, signature.remedy, local)


def crash_frames(lines: List[str], most: int = 4) -> List[str]:
    """Where a rank crashed: the innermost frames faulthandler printed under its first "Fatal Python error", of the
    thread it marks "Current thread" (the one that crashed), else of the first it lists; most recent call first."""
    for index, line in enumerate(lines):
        if "Fatal Python error" in line:
            after = lines[index + 1:index + 200]
            current = next((i for i, ln in enumerate(after) if ln.strip().startswith("Current thread")), 0)
            frames = []
            for ln in after[current + 1 if current else 0:]:
                if ln.strip().startswith('File "'):
                    frames.append(ln.strip())
                elif frames and not ln.strip():
                    break       # the end of that thread's frames
            return frames[:most]
    return []


def _root_rank(roots, nodes: List[str]) -> Optional[int]:
    """The rank torchrun's summary names as the first observed failure, where every node of the cause is its node
    (several nodes failing alike are named alike: one node's torchrun does not see another's ranks)."""
    for node, entry in roots:
        number, _ = _entry_ranks(entry)
        if number is not None and set(nodes) == {node}:
            return number
    return None


def _telling_lines(hits: List[Hit]) -> List[str]:
    """A node's evidence for its cause: its first line, and the first that says it in another space's words (torch's
    writer's "unexpected pos" and the errno "No space left on device" beside it): a user reads the plainer one."""
    first = hits[0]
    other = next((h for h in hits[1:] if h.signature and first.signature and h.signature.space != first.signature.space
                  and h.line != first.line), None)
    return [first.line] + ([other.line] if other else [])


def _unclassified(units: List[List[Hit]], runs: Dict[str, NodeLines], roots) -> Cause:
    """Errors no cause names: the rank that failed first, where it can be told, with its last lines."""
    nodes = list(dict.fromkeys(u[0].node for u in units))
    first_root = next((n for n, _ in roots if n in nodes), None)
    if first_root:
        nodes = [first_root]
    elif all(runs[n].ended_s is not None for n in nodes):
        nodes = [min(nodes, key=lambda n: runs[n].ended_s)]
    hits = [h for u in units if u[0].node in nodes for h in u]
    ranks = sorted({h.rank for h in hits if h.rank is not None})
    entry = next((e for n, e in roots if n in nodes), None)
    if not ranks and entry and _entry_ranks(entry)[0] is not None:
        ranks = [_entry_ranks(entry)[0]]
    local = [] if ranks else sorted({h.local_rank for h in hits if h.local_rank is not None}
                                    or {lr for n in nodes for lr in launcher_local_ranks(runs[n])})
    lines = list(dict.fromkeys(h.line for h in hits))
    root = root_exception(lines)
    shown = [root] + [line for line in lines[-2:] if line != root]
    return Cause(UNCLASSIFIED, nodes, ranks, [f"{next(h.node for h in hits if h.line == line)}: {line[:300]}"
                                              for line in shown],
                 f"could not classify the failure; its first error: {root[:160]}", REMEDY_UNCLASSIFIED, local)


_SECONDARY = re.compile(r"Exception ignored in|__del__|during handling of the above exception|"
                        r"direct cause of the following exception", re.I)


def root_exception(lines: List[str]) -> str:
    """The exception raised first (not the last printed, not one raised while handling it, not a destructor's):
    the first error line that is not a launcher's wrapper."""
    errors = [line for line in lines if is_error(line) and not is_wrapper(line) and not _SECONDARY.search(line)]
    return errors[0] if errors else lines[-1]


def _first_failure(node: str, entry: Dict[str, str]) -> Cause:
    rank, local = _entry_ranks(entry)
    return Cause(UNCLASSIFIED, [node], [rank] if rank is not None else [],
                 [f"{node}: rank {entry.get('rank', '?')} on {entry.get('host', node)} ended with {_signal(entry)}",
                  f"{node}: {entry.get('traceback', '')}"],
                 f"could not classify: rank {entry.get('rank', '?').split()[0]} failed first ({_signal(entry)})",
                 REMEDY_UNCLASSIFIED, [local] if rank is None and local is not None else [])

