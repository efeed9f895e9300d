"""Every Python distribution on every node, compared: against each other (the majority is the baseline), against
what the user requires (`--require 'flash-attn>=2.6'`), and against a known-good baseline (baseline.py).

A package of the training stack that differs is FAIL (the job fails hours later on that node with an error that
names none of this); any other package that differs, or is on some nodes only, is WARN; a thresholds file moves a
package either way (`[env] fail_packages`, `warn_packages`). An editable install counts with where it points and
its commit. The odd nodes are named per package with both versions, grouped by the nodes that differ so that 1,000
nodes stay one screen. clustercheck's own distribution on a node is never compared. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from packaging.utils import canonicalize_name as canonical

from clustercheck.core.compare import group_by_value
from clustercheck.core.inventory import fold
from clustercheck.core.requirements import Wanted
from clustercheck.core.result import Finding, Status
from clustercheck.node.facts import NOT_INSTALLED, Probed, get

# What a job breaks on when it differs between ranks (PEP 503 names); every nvidia-* CUDA wheel too.
TRAINING_STACK = frozenset("""
torch torchvision torchaudio pytorch-triton triton deepspeed transformers accelerate peft flash-attn flash-attn-3
xformers apex bitsandbytes transformer-engine transformer-engine-torch transformer-engine-cu12 megatron-core
nccl cupy cupy-cuda12x
""".split())
STACK_PREFIXES = ("nvidia-",)
OWN = frozenset({"clustercheck"})      # the tool itself, where it runs on the nodes
PER_LINE = 4                           # packages on one evidence line (a line stays under ~150 characters)


@dataclass
class PackagePolicy:
    """Which packages fail when they differ: the training stack, the required ones, and the thresholds file's."""

    required: Sequence[str] = ()
    fail: Sequence[str] = ()
    warn: Sequence[str] = ()

    def __post_init__(self):
        self._warns = frozenset(canonical(n) for n in self.warn)        # by PEP 503 name, once, not per package
        self._fails = frozenset(canonical(n) for n in (*self.required, *self.fail))

    def status(self, name: str) -> Status:
        if name in self._warns:
            return Status.WARN
        if name in TRAINING_STACK or name.startswith(STACK_PREFIXES) or name in self._fails:
            return Status.FAIL
        return Status.WARN


def described(dist: Optional[Dict]) -> str:
    """A node's distribution as compared: its version, and for an editable install where it points and its commit."""
    if not dist:
        return NOT_INSTALLED
    version = dist.get("version") or "version unreadable"
    if dist.get("editable"):
        where = str(dist["editable"]).replace("file://", "")
        return f"{version} (editable at {where}" + (f", commit {dist['commit'][:10]}" if dist.get("commit") else "") + ")"
    if dist.get("commit"):
        return f"{version} (commit {dist['commit'][:10]})"
    return version


def distributions(probed: Probed) -> Optional[Dict[str, Dict]]:
    """The node's distributions by PEP 503 name (None: the probe could not list them)."""
    dists = get(probed.facts, "packages", "distributions")
    if isinstance(dists, dict):
        return {canonical(name): dist for name, dist in dists.items() if isinstance(dist, dict)}
    versions = get(probed.facts, "packages", "versions")    # a probe of before issue 36: names and versions only
    if isinstance(versions, dict):
        return {canonical(name): {"version": v} for name, v in versions.items() if v and not name.endswith("_wheel")}
    return None


@dataclass
class Drift:
    """One package that differs: its groups (value, nodes), largest first."""

    name: str
    groups: List[Tuple[str, List[str]]]
    status: Status

    @property
    def clear(self) -> bool:
        return len(self.groups[0][1]) > len(self.groups[1][1])

    @property
    def odd(self) -> List[Tuple[str, List[str]]]:
        return self.groups[1:] if self.clear else self.groups

    def line(self, said: Sequence[str] = ()) -> str:
        """"flash-attn 2.5.8 on n[998-1000] (the others 2.6.3)"; the nodes left out where the finding names them
        (`said`) and the package has one odd group."""
        baseline = self.groups[0][0]
        if self.clear and len(self.odd) == 1 and list(self.odd[0][1]) == list(said):
            return f"{self.name} {self.odd[0][0]} (the others {baseline})"
        odd = "; ".join(f"{value} on {fold(nodes)}" for value, nodes in self.odd)
        return f"{self.name} {odd}" + (f" (the others {baseline})" if self.clear else " (no majority)")


@dataclass
class PackageView:
    order: List[str]
    dists: Dict[str, Dict[str, Dict]] = field(default_factory=dict)   # node -> name -> distribution
    unread: Dict[str, str] = field(default_factory=dict)              # node -> why its packages are unknown


def package_view(probed: Sequence[Probed]) -> PackageView:
    view = PackageView([p.name for p in probed])
    for p in probed:
        if p.facts is None:
            continue
        dists = distributions(p)
        if dists is None:
            view.unread[p.name] = (get(p.facts, "missing", "packages") or "the probe listed no packages")
        else:
            view.dists[p.name] = {n: d for n, d in dists.items() if n not in OWN}
    return view


def drifts(view: PackageView, policy: PackagePolicy) -> List[Drift]:
    names = sorted({name for dists in view.dists.values() for name in dists})
    found = []
    for name in names:
        keys = {}          # node -> what is compared; described once per distinct value (1,000 nodes are alike)
        for node, dists in view.dists.items():
            dist = dists.get(name)
            keys[node] = (dist.get("version"), dist.get("editable"), dist.get("commit")) if dist else None
        distinct = set(keys.values())
        if len(distinct) > 1:
            shown = {key: described(dict(zip(("version", "editable", "commit"), key)) if key else None)
                     for key in distinct}
            grouping = group_by_value({node: shown[key] for node, key in keys.items()}, view.order)
            found.append(Drift(name, grouping.groups, policy.status(name)))
    return found


def compare_packages(view: PackageView, policy: PackagePolicy) -> List[Finding]:
    """The packages that differ between nodes: one finding per status and set of odd nodes, packages folded."""
    if len(view.dists) < 2:
        return []
    found = drifts(view, policy)
    if not found:
        count = len({n for dists in view.dists.values() for n in dists})
        return [Finding("packages.same", Status.OK, f"the same {count} Python packages on all {len(view.dists)} "
                                                    f"nodes")]
    by_odd: Dict[Tuple[Status, Tuple[str, ...]], List[Drift]] = {}
    for drift in found:
        odd_nodes = tuple(sorted({n for _, nodes in drift.odd for n in nodes}, key=view.order.index))
        by_odd.setdefault((drift.status, odd_nodes), []).append(drift)
    findings = []
    for (status, nodes), group in sorted(by_odd.items(), key=lambda item: (-item[0][0].value, -len(item[1]),
                                                                           view.order.index(item[0][1][0]))):
        stack = status is Status.FAIL
        names = [d.name for d in group]
        what = ("training-stack package" if stack else "package") + ("s" if len(group) > 1 else "")
        summary = (f"{len(group)} {what} differ{'s' if len(group) == 1 else ''} on {fold(list(nodes))}: "
                   f"{', '.join(names[:PER_LINE])}{', ...' if len(names) > PER_LINE else ''}")
        evidence = [", ".join(d.line(nodes) for d in group[i:i + PER_LINE]) for i in range(0, len(group), PER_LINE)]
        remedy = ("install the same versions on every node (one image, or `pip install <package>==<version>` with each "
                  "node's interpreter); the training stack must match exactly" if stack else
                  "align them (one image, or the same requirements file) or leave them: they are outside the "
                  "training stack")
        findings.append(Finding("packages.same", status, summary, evidence, remedy, list(nodes)))
    return findings


def required(view: PackageView, wanted: Iterable[Wanted], pythons: Optional[Dict[str, str]] = None) -> List[Finding]:
    """Each required package on every node, within its range: the nodes without it named with what they have. A
    marker is held where it holds on the node's Python (`pythons`: node -> "3.11.4"); a constraint where installed.
    Many met at once (a requirements file) are one OK line."""
    findings, met = [], []
    pythons = pythons or {}
    for want in wanted:
        values = {node: (dists.get(want.name) or {}).get("version") for node, dists in view.dists.items()
                  if want.applies(pythons.get(node))}
        bad = {node: v for node, v in values.items() if not want.allows(v)}
        if not values:
            continue
        if not bad:
            have = sorted({v for v in values.values() if v})
            met.append(Finding(f"required.{want.name}", Status.OK, f"{want.text} on all {len(values)} nodes"
                                                                   f"{' (' + ', '.join(have[:3]) + ')' if have else ''}"))
            continue
        grouping = group_by_value({n: v or NOT_INSTALLED for n, v in bad.items()}, view.order)
        where = "any node" if len(bad) == len(values) else fold(list(bad))
        findings.append(Finding(f"required.{want.name}", Status.FAIL, f"{want.text} is not met on {where}",
                                [f"{fold(nodes)}: {value}" + (f" (needs {want.specifier})" if want.specifier and
                                                              value != NOT_INSTALLED else "")
                                 for value, nodes in grouping.groups],
                                f"install it with each node's training interpreter: `<python> -m pip install "
                                f"'{want.text}'`, the same version everywhere", sorted(bad, key=view.order.index)))
    if len(met) > PER_LINE:
        met = [Finding("required", Status.OK, f"{len(met)} required packages met on every node",
                       [", ".join(f.check[len("required."):] for f in met[i:i + 8]) for i in range(0, len(met), 8)])]
    return met + findings


def unreadable(view: PackageView) -> List[Finding]:
    """Nodes whose packages could not be listed, and distributions whose metadata could not be read."""
    findings = []
    if view.unread:
        nodes = list(view.unread)
        findings.append(Finding("packages.unread", Status.UNKNOWN, f"could not list the Python packages on "
                                                                   f"{fold(nodes)}",
                                [f"{n}: {why}" for n, why in view.unread.items()],
                                "run clustercheck env --verbose and look at the probe's missing section", nodes))
    broken: Dict[str, List[str]] = {}
    for node, dists in view.dists.items():
        for name, dist in dists.items():
            if dist.get("error") or not dist.get("version"):
                broken.setdefault(f"{name}: {dist.get('error') or 'no version'}", []).append(node)
    if broken:
        nodes = sorted({n for ns in broken.values() for n in ns}, key=view.order.index)
        findings.append(Finding("packages.unread", Status.WARN, f"{len(broken)} installed distribution(s) with "
                                                                f"unreadable metadata on {fold(nodes)}",
                                [f"{fold(ns)}: {what}" for what, ns in broken.items()][:12],
                                "reinstall them (a dist-info without METADATA or version is a broken install)",
                                nodes))
    return findings
