"""What changed between two preflight reports (their .json): versions, nodes, bandwidth, findings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Tuple

from clustercheck.core.errors import EXIT_FAIL, EXIT_OK, InputError
from clustercheck.core.inventory import fold
from clustercheck.display.report_files import read_document
from clustercheck.stages.bench.baseline import busbw_of, compare, read_nccl_tests

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

    @property
    def worse(self) -> bool:
        return bool(self.nodes_gone or any(f["status"] in ("FAIL", "UNKNOWN") for f in self.new_findings)
                    or any(ratio < 1 - self.threshold for _, _, _, ratio in self.bandwidth))

    @property
    def exit_code(self) -> int:
        return EXIT_FAIL if self.worse else EXIT_OK


def load_report(path: str) -> Dict:
    """A preflight report (.json), or nccl-tests output: then only bandwidth is compared."""
    what = "a preflight report (.json) or nccl-tests output"
    doc, text = read_document(path, what)
    if doc is None:
        return {"command": "nccl-tests", "busbw": read_nccl_tests(text, path).busbw}
    if doc.get("command") != "preflight":
        raise InputError(f"not {what}", path)
    return doc


def busbw_by_size(doc: Dict) -> Dict[str, Dict[int, float]]:
    if doc.get("command") == "nccl-tests":
        return doc["busbw"]
    return busbw_of(doc.get("bench") or {})


def bandwidth_changes(old: Dict, new: Dict, threshold: float) -> List[Tuple[str, float, float, float]]:
    """busbw at the largest size both measured (averages over different sizes are not comparable);
    the average bus bandwidth only where neither report has its rows."""
    changes = []
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
        ratio = after / before
        if abs(ratio - 1) > threshold:
            changes.append((label, before, after, ratio))
    return changes


def _key(finding: Dict) -> Tuple:
    return (finding.get("stage"), finding["check"], tuple(sorted(finding.get("nodes") or [])))


def diff_reports(old: Dict, new: Dict, threshold: float = DEFAULT_THRESHOLD) -> Changes:
    changes = Changes(threshold=threshold)
    if "nccl-tests" in (old.get("command"), new.get("command")):
        changes.bandwidth = bandwidth_changes(old, new, threshold)
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
    changes.bandwidth = bandwidth_changes(old, new, threshold)
    problems = [f for f in new.get("findings", []) if f["status"] != "OK"]
    old_problems = [f for f in old.get("findings", []) if f["status"] != "OK"]
    old_keys, new_keys = {_key(f) for f in old_problems}, {_key(f) for f in problems}
    changes.new_findings = [f for f in problems if _key(f) not in old_keys]
    changes.fixed_findings = [f for f in old_problems if _key(f) not in new_keys]
    return changes


def render_changes(changes: Changes, old_path: str, new_path: str) -> str:
    lines = [f"clustercheck diff: {old_path} -> {new_path}", ""]
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
    lines += ["", "Verdict: WORSE" if changes.worse else "Verdict: not worse"]
    return "\n".join(lines)
