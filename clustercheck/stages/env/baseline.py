"""A known-good environment: saved from a run that was READY (`env --save-baseline FILE`), and every node held to
it later (`env --baseline FILE`, preflight's `--env-baseline`). A cluster that drifted all together since the
last good run (an image upgrade on every node) is named, which a majority vote can never see.

A baseline is clustercheck's own JSON (every package, the CUDA build, NCCL, the driver, the variables), or what
users already have, read by core/reqfile.py: a `pip freeze` / `uv pip freeze` output, a pip-compile locked file
(hashes, `-r` and `-c`), `pip list --format=json`, `conda list --export` or an environment.yml's pip section (`==`
pins compared exactly, other ranges held as ranges, markers where they hold on the node's Python; `-e` and
`name @ url` lines need the package, any version). Anything else is bad input naming the file, the line and the value.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from clustercheck.core.compare import group_by_value
from clustercheck.core.errors import InputError
from clustercheck.core.inputs import read_text_file
from clustercheck.core.inventory import fold
from clustercheck.core.reqfile import read_requirements_file
from clustercheck.core.requirements import Wanted
from clustercheck.core.result import Finding, Status
from clustercheck.node.facts import NOT_INSTALLED
from clustercheck.stages.env.packages import PackagePolicy, PackageView, canonical

KIND = "clustercheck env baseline"
SCHEMA = 1
# The facts of the version table a baseline keeps beside the packages (env/facts.py's labels); and every $VARIABLE.
FACTS = ("python", "torch CUDA build", "NCCL wheel", "NCCL (loaded)", "libnccl", "libcudart", "NVIDIA driver",
         "CUDA (driver)", "GPU model", "GPUs")
FACT_FAILS = ("torch CUDA build", "NCCL wheel", "NCCL (loaded)", "libnccl", "NVIDIA driver", "GPU model", "GPUs")


@dataclass
class Baseline:
    source: str
    packages: Dict[str, Wanted] = field(default_factory=dict)
    facts: Dict[str, str] = field(default_factory=dict)
    complete: bool = False      # it lists every package (clustercheck's own): one it lacks is new since
    skipped: List[str] = field(default_factory=list)    # lines that name no package (an editable local directory)


def majority(values: Dict[str, str], order: Sequence[str]) -> Optional[str]:
    if not values:
        return None
    return group_by_value(values, order).baseline


def baseline_document(view: PackageView, values: Dict[str, Dict[str, str]], order: Sequence[str]) -> Dict:
    """What a run saw, as a baseline: each package's and each fact's majority value."""
    names = sorted({n for dists in view.dists.values() for n in dists})
    packages = {}
    for name in names:
        version = majority({node: (dists.get(name) or {}).get("version") or NOT_INSTALLED
                            for node, dists in view.dists.items()}, order)
        if version and version != NOT_INSTALLED:
            packages[name] = version
    labels = [f for f in FACTS] + sorted({k for v in values.values() for k in v if k.startswith("$")})
    facts = {}
    for label in labels:
        value = majority({n: v[label] for n, v in values.items() if label in v}, order)
        if value is not None:
            facts[label] = value
    return {"kind": KIND, "schema": SCHEMA, "saved": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "nodes": len(view.dists), "packages": packages, "facts": facts}


def write_baseline(path: str, document: Dict) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=1, sort_keys=True)
        handle.write("\n")


def read_baseline(path: str) -> Baseline:
    """A baseline file: clustercheck's JSON, or a pip freeze / requirements file. Bad input names file and line."""
    text = read_text_file(path, "baseline (clustercheck env --save-baseline's JSON, or pip freeze output)")
    if text.lstrip().startswith("{"):
        return _from_json(text, path)
    return _from_requirements(path)


def _from_json(text: str, path: str) -> Baseline:
    try:
        doc = json.loads(text)
    except ValueError as exc:
        line = getattr(exc, "lineno", 0)
        raise InputError(f"not a baseline: broken JSON ({str(exc).split(':')[0]})", path, line) from None
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        what = f"a JSON {'object' if isinstance(doc, dict) else type(doc).__name__}"
        raise InputError(f"not a clustercheck env baseline: {what} without \"kind\": \"{KIND}\" (another tool's "
                         f"JSON? save one with clustercheck env --save-baseline)", path)
    packages, facts = doc.get("packages"), doc.get("facts")
    if not isinstance(packages, dict) or not isinstance(facts, dict) or doc.get("schema") != SCHEMA:
        raise InputError(f"not a usable baseline: schema {doc.get('schema')!r}, packages and facts must be objects",
                         path)
    baseline = Baseline(path, complete=True)
    for name, version in packages.items():
        if not isinstance(name, str) or not isinstance(version, str):
            raise InputError("a package's version must be a string", path, value=f"{name}: {version!r}")
        baseline.packages[canonical(name)] = Wanted(canonical(name), f"=={version}", f"{name}=={version}")
    baseline.facts = {str(k): str(v) for k, v in facts.items()}
    return baseline


def _from_requirements(path: str) -> Baseline:
    read = read_requirements_file(path, "baseline (clustercheck env --save-baseline's JSON, a pip freeze, a "
                                        "pip-compile file, pip list --format=json, conda list --export, "
                                        "environment.yml)")
    return Baseline(path, dict(read.wanted), skipped=read.skipped)


def against_baseline(baseline: Baseline, view: PackageView, values: Dict[str, Dict[str, str]],
                     policy: PackagePolicy) -> List[Finding]:
    """Every node held to the baseline: per package and fact, the nodes that changed since, with both values;
    a change on every node is said as the whole cluster's."""
    changes: List[Tuple[str, Status, List[Tuple[str, List[str]]], str]] = []   # (name, status, groups, then)
    for name, wanted in sorted(baseline.packages.items()):
        now = {node: (dists.get(name) or {}).get("version") for node, dists in view.dists.items()
               if wanted.applies(values.get(node, {}).get("python"))}
        moved = {node: v or NOT_INSTALLED for node, v in now.items() if not wanted.allows(v)}
        if moved:
            changes.append((name, policy.status(name), group_by_value(moved, view.order).groups,
                            wanted.pinned or wanted.specifier or "installed"))
    if baseline.complete:
        for name in sorted({n for dists in view.dists.values() for n in dists} - set(baseline.packages)):
            new = {node: dists[name].get("version") or "?" for node, dists in view.dists.items() if name in dists}
            changes.append((name, policy.status(name), group_by_value(new, view.order).groups, NOT_INSTALLED))
    for label, then in sorted(baseline.facts.items()):
        now = {node: v.get(label, "(unset)" if label.startswith("$") else None) for node, v in values.items()}
        moved = {node: v for node, v in now.items() if v is not None and v != then}
        if moved:
            status = Status.FAIL if label in FACT_FAILS else Status.WARN
            changes.append((label, status, group_by_value(moved, view.order).groups, then))
    if not changes:
        return [Finding("baseline", Status.OK, f"every node matches the baseline {baseline.source} "
                                               f"({len(baseline.packages)} packages, {len(baseline.facts)} facts)"
                                               + (f"; {len(baseline.skipped)} line(s) name no package, not held"
                                                  if baseline.skipped else ""), baseline.skipped[:10])]
    everyone = set(view.dists)
    by_nodes: Dict[Tuple[Status, Tuple[str, ...]], List[str]] = {}
    for name, status, groups, then in changes:
        nodes = tuple(sorted({n for _, ns in groups for n in ns}, key=view.order.index))
        lines = "; ".join(f"{value} on {'every node' if set(ns) == everyone else fold(ns)}" for value, ns in groups)
        by_nodes.setdefault((status, nodes), []).append(f"{name} {then} -> {lines}")
    findings = []
    for (status, nodes), lines in sorted(by_nodes.items(), key=lambda item: -item[0][0].value):
        where = "every node" if set(nodes) == everyone and len(everyone) > 1 else fold(list(nodes))
        whole = " (the whole cluster changed together: a majority vote cannot see this)" \
            if set(nodes) == everyone and len(everyone) > 1 else ""
        findings.append(Finding("baseline", status, f"{len(lines)} change(s) since the baseline {baseline.source} on "
                                                    f"{where}{whole}", lines[:30],
                                "bring the nodes back to the baseline's versions (the image it was saved from), or, if "
                                "the change is wanted and a run was READY, save a new baseline", list(nodes)))
    if baseline.skipped:
        findings.append(Finding("baseline", Status.OK, f"{len(baseline.skipped)} line(s) of the baseline name no "
                                                       f"package and are not held", baseline.skipped[:10]))
    return findings
