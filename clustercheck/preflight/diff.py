"""What changed between two preflight reports (their .json): versions, nodes, bandwidth, findings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from clustercheck.core.errors import InputError
from clustercheck.core.inventory import fold
from clustercheck.core.result import Finding, Status, note, worst
from clustercheck.display.report_files import read_document
from clustercheck.runner.options import borrow
from clustercheck.stages.bench.baseline import busbw_of, compare, read_nccl_tests
from clustercheck.stages.bench.options import BenchOptions

DEFAULT_THRESHOLD = 0.10


@dataclass
class Changes:
    versions: List[str] = field(default_factory=list)
    nodes_added: List[str] = field(default_factory=list)
    nodes_gone: List[str] = field(default_factory=list)
    bandwidth: List[Tuple[str, float, float, float]] = field(default_factory=list)   # (collective, old, new, ratio)
    new_findings: List[Dict] = field(default_factory=list)
    fixed_findings: List[Dict] = field(default_factory=list)
    threshold: float = DEFAULT_THRESHOLD
    compared: List[str] = field(default_factory=list)       # what was compared at all
    not_compared: List[str] = field(default_factory=list)   # what could not be, and why
    read_as: List[str] = field(default_factory=list)        # which collective nccl-tests output held, and who said

    @property
    def findings(self) -> List[Finding]:
        """The diff as findings: what is worse a FAIL, each thing compared an OK, what could not be compared a
        note; so nothing compared is UNKNOWN (worst), never "not worse"."""
        found = [Finding("diff.nodes", Status.FAIL, f"nodes gone: {fold(self.nodes_gone)}", [], "", self.nodes_gone)
                 ] if self.nodes_gone else []
        found += [Finding("diff.findings", Status.FAIL, f"new {f['status']}: [{f.get('stage')}] {f['summary']}", [],
                          f.get("remedy") or "", list(f.get("nodes") or []))
                  for f in self.new_findings if f["status"] in ("FAIL", "UNKNOWN")]
        found += [Finding("diff.bandwidth", Status.FAIL, f"bandwidth {name}: busbw {old:.3f} -> {new:.3f} GB/s "
                                                         f"({ratio - 1:+.0%}, threshold {self.threshold:.0%})")
                  for name, old, new, ratio in self.bandwidth if ratio < 1 - self.threshold]
        found += [Finding("diff.compared", Status.OK, f"compared: {what}") for what in self.compared]
        return found + [note("diff.not-compared", f"not compared: {what}") for what in self.not_compared]

    @property
    def status(self) -> Status:
        return worst(self.findings)

    @property
    def worse(self) -> bool:
        return self.status is Status.FAIL

    @property
    def exit_code(self) -> int:
        return self.status.exit_code


@dataclass
class DiffOptions:
    """diff's flag beside --threshold: bench's --baseline-collective, for either side."""
    collective: Optional[str] = borrow(BenchOptions, "baseline_collective", "--collective",
                                       help="The collective of nccl-tests output (OLD or NEW) whose table does not "
                                            "tell (all_gather and alltoall tables read alike, and all_reduce and "
                                            "sendrecv ones on 2 ranks) and that names it neither in a \"Collective "
                                            "test starting\" line nor in its file name.")


def load_report(path: str, collective: Optional[str] = None) -> Dict:
    """A preflight report (.json), or nccl-tests output: then only bandwidth is compared. collective: what an
    nccl-tests table holds where it cannot be told otherwise (--collective)."""
    what = "a preflight report (.json) or nccl-tests output"
    doc, text = read_document(path, what)
    if doc is None:
        baseline = read_nccl_tests(text, path, collective)
        return {"command": "nccl-tests", "busbw": baseline.busbw, "told": baseline.told}
    if doc.get("command") != "preflight":
        raise InputError(f"not {what}", path)
    check_report_shape(doc, path)
    return doc


# The parts of a preflight report that diff reads, and the type each must have.
REPORT_SHAPE = {"nodes": list, "findings": list, "versions": dict, "bench": dict}


def check_report_shape(doc: Dict, path: str) -> None:
    """A report whose parts are not what a preflight writes is bad input now, not a crash after the run."""
    for key, kind in REPORT_SHAPE.items():
        if doc.get(key) is not None and not isinstance(doc[key], kind):
            raise InputError(f"not a preflight report: {key} is not a JSON {'array' if kind is list else 'object'}",
                             path)
    if not all(isinstance(n, str) for n in doc.get("nodes") or []):
        raise InputError("not a preflight report: nodes must be names", path)
    for finding in doc.get("findings") or []:
        if not isinstance(finding, dict) or not isinstance(finding.get("check"), str) or \
                finding.get("status") not in ("OK", "WARN", "UNKNOWN", "FAIL"):
            raise InputError("not a preflight report: a finding without its check and status", path,
                             value=str(finding)[:80])
    for node, values in (doc.get("versions") or {}).items():
        if not isinstance(values, dict):
            raise InputError(f"not a preflight report: versions of {node} are not an object", path)


def busbw_by_size(doc: Dict) -> Dict[str, Dict[int, float]]:
    if doc.get("command") == "nccl-tests":
        return doc["busbw"]
    return busbw_of(doc.get("bench") or {})


def bandwidth_changes(old: Dict, new: Dict, threshold: float,
                      compared: Optional[List[str]] = None) -> List[Tuple[str, float, float, float]]:
    """busbw at the largest size both measured (averages over different sizes are not comparable);
    the average bus bandwidth only where neither report has its rows. What was compared goes into
    `compared`, changes beyond the threshold or not."""
    changes = []
    compared = compared if compared is not None else []
    old_sizes, new_sizes = busbw_by_size(old), busbw_by_size(new)
    old_avg = (old.get("bench") or {}).get("avg_busbw") or {}
    new_avg = (new.get("bench") or {}).get("avg_busbw") or {}
    for name in sorted((set(old_sizes) | set(old_avg)) & (set(new_sizes) | set(new_avg))):
        pairs = compare(old_sizes.get(name, {}), new_sizes.get(name, {}))
        if pairs:
            size, before, after = pairs[-1]
            label = f"{name} at {size} B"
        elif old_avg.get(name) and new_avg.get(name):
            before, after, label = old_avg[name], new_avg[name], f"{name} avg"
        else:
            continue
        if not before or not after:   # a zero figure compares with nothing
            continue
        compared.append(label)
        ratio = after / before
        if abs(ratio - 1) > threshold:
            changes.append((label, before, after, ratio))
    return changes


def _say_bandwidth(changes: Changes, compared: List[str], old: Dict, new: Dict) -> None:
    if compared:
        changes.compared.append(f"bus bandwidth ({', '.join(compared)})")
        return
    missing = [which for which, doc in (("the old report", old), ("the new report", new)) if not busbw_by_size(doc)
               and not (doc.get("bench") or {}).get("avg_busbw")]
    changes.not_compared.append("bandwidth: " + (f"{' and '.join(missing)} measured none" if missing else
                                                 "no collective and message size measured in both"))


def _key(finding: Dict) -> Tuple:
    return (finding.get("stage"), finding["check"], tuple(sorted(finding.get("nodes") or [])))


def diff_reports(old: Dict, new: Dict, threshold: float = DEFAULT_THRESHOLD) -> Changes:
    changes = Changes(threshold=threshold)
    bandwidth: List[str] = []
    changes.read_as = [f"{side}: nccl-tests output of {name}, from {how}" for side, doc in (("old", old), ("new", new))
                       for name, how in (doc.get("told") or {}).items()]
    if "nccl-tests" in (old.get("command"), new.get("command")):
        changes.bandwidth = bandwidth_changes(old, new, threshold, bandwidth)
        _say_bandwidth(changes, bandwidth, old, new)
        return changes
    old_nodes, new_nodes = old.get("nodes", []), new.get("nodes", [])
    changes.nodes_added = [n for n in new_nodes if n not in old_nodes]
    changes.nodes_gone = [n for n in old_nodes if n not in new_nodes]
    moved: Dict[Tuple[str, str, str], List[str]] = {}
    old_versions, new_versions = old.get("versions") or {}, new.get("versions") or {}
    for node in new_nodes:
        before, after = old_versions.get(node) or {}, new_versions.get(node) or {}
        for label in sorted(set(before) | set(after)):
            if before.get(label) != after.get(label) and node in old_versions and node in new_versions:
                moved.setdefault((label, before.get(label, "(none)"), after.get(label, "(none)")), []).append(node)
    changes.versions = [f"{label} on {fold(nodes)}: {a} -> {b}" for (label, a, b), nodes in sorted(moved.items())]
    changes.bandwidth = bandwidth_changes(old, new, threshold, bandwidth)
    _say_bandwidth(changes, bandwidth, old, new)
    unchecked = [which for which, doc in (("the old report", old), ("the new report", new)) if not checked_any(doc)]
    if old_nodes and new_nodes and not unchecked:
        changes.compared.append("nodes, versions and findings")
    elif unchecked:
        changes.not_compared.append(f"findings: {' and '.join(unchecked)} checked nothing (no finding that said OK, "
                                    f"WARN or FAIL)")
    problems = [f for f in new.get("findings") or [] if f["status"] != "OK"]
    old_problems = [f for f in old.get("findings") or [] if f["status"] != "OK"]
    old_keys, new_keys = {_key(f) for f in old_problems}, {_key(f) for f in problems}
    changes.new_findings = [f for f in problems if _key(f) not in old_keys]
    # a problem the new report does not hold is fixed only where the new report looked at all
    changes.fixed_findings = [f for f in old_problems if _key(f) not in new_keys] if checked_any(new) else []
    return changes


def checked_any(doc: Dict) -> bool:
    """Whether a report's findings checked anything: one that said OK, WARN or FAIL (a note, or UNKNOWN alone, is a
    run that could not check; result.worst's rule, read back from the JSON)."""
    return any(f.get("checked", True) and f["status"] != "UNKNOWN" for f in doc.get("findings") or [])


def render_changes(changes: Changes, old_path: str, new_path: str) -> str:
    lines = [f"clustercheck diff: {old_path} -> {new_path}", *changes.read_as, ""]
    if changes.nodes_added or changes.nodes_gone:
        lines += [f"nodes added: {fold(changes.nodes_added)}" if changes.nodes_added else "",
                  f"nodes gone: {fold(changes.nodes_gone)}" if changes.nodes_gone else ""]
    if changes.versions:
        lines += ["versions and settings that changed:"] + [f"  {v}" for v in changes.versions]
    for name, old, new, ratio in changes.bandwidth:
        lines.append(f"bandwidth {name}: busbw {old:.3f} -> {new:.3f} GB/s ({ratio - 1:+.0%}, threshold "
                     f"{changes.threshold:.0%})")
    for finding in changes.new_findings:
        lines.append(f"new {finding['status']}: [{finding.get('stage')}] {finding['summary']}")
    for finding in changes.fixed_findings:
        lines.append(f"fixed: [{finding.get('stage')}] {finding['summary']}")
    lines = [line for line in lines if line != ""] or ["no changes"]
    lines += [f"not compared: {text}" for text in changes.not_compared]
    status = changes.status
    if status is Status.FAIL:
        verdict = "Verdict: WORSE"
    elif status is Status.UNKNOWN:
        verdict = "Verdict: UNKNOWN: nothing was compared"
    else:
        verdict = f"Verdict: not worse (compared: {'; '.join(changes.compared)})"
    lines += ["", verdict]
    return "\n".join(lines)
