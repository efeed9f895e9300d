"""The judges of `clustercheck bench`: did every rank finish, is the data right, is the
bandwidth what it should be, and which node or link is slow.

Pure functions over BenchFacts (plus the user's expectations), reading the bandwidths
computed once in figures.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

from clustercheck.core.inventory import fold
from clustercheck.core.result import Finding, Status
from clustercheck.nccl.path_judge import NodePath
from clustercheck.ranks.nccl_capture import capture_findings, captured_paths
from clustercheck.ranks.forensics import REMEDY_HANG, hang_report
from clustercheck.ranks.runs import RanksRun
from clustercheck.stages.bench.baseline import Baseline, by_size, compare
from clustercheck.stages.bench.facts import BenchFacts
from clustercheck.stages.bench.pairwise import pairwise_verdict
from clustercheck.outputs.nccl_tests import PLACEMENTS, peak



@dataclass
class Expectations:
    baseline: Optional[Baseline] = None         # --baseline: an earlier bench, preflight or nccl-tests output
    fraction: float = 0.9                       # [bench] expected_fraction
    configured_busbw: float = 0.0               # [bench] expected_busbw (0: the published table)


def ranks_of(stage: RanksRun) -> Dict[str, List[int]]:
    start = stage.start or {}
    found: Dict[str, List[int]] = {}
    for rank, info in enumerate(start.get("ranks", [])):
        found.setdefault(info["node"], []).append(rank)
    return found


def _ranks_text(ranks: Sequence[int]) -> str:
    return fold([str(r) for r in ranks]) if ranks else "?"


def participation(facts: BenchFacts) -> List[Finding]:
    """Nodes reached that cannot take part (no torch, nothing shipped); unreached ones are the node layer's."""
    unreached = {p.name for p in facts.probed if p.facts is None}
    findings = []
    for node, problem in facts.problems.items():
        if node in unreached:
            continue
        findings.append(Finding("bench.node", Status.FAIL, f"{node} cannot take part in the benchmark", [problem],
                                "run `clustercheck env` on the nodes file: the interpreter, torch and SSH must work "
                                "on every node", [node]))
    return findings


def stage_outcome(stage: RanksRun, timeout_s: float) -> List[Finding]:
    """Every rank finished, or which did not, and why (row 5: a dead or stuck rank)."""
    runs = stage.runs
    if all(r.exit_code == 0 for r in runs.values()) and stage.events("done"):
        return [Finding(f"bench.{stage.name}", Status.OK, f"{stage.name}: every rank finished "
                                                           f"({len(runs)} nodes, {stage.wall_s:.1f} s)")]
    ranks = ranks_of(stage)
    lost = [n for n, r in runs.items() if r.lost]
    hung = [n for n, r in runs.items() if r.exit_code is None and not r.cut_short]
    failed = [n for n, r in runs.items() if r.exit_code not in (0, None) and not r.lost]
    evidence = []
    for node, run in runs.items():
        state = ("connection lost (node down?)" if run.lost else
                 "stopped after another node failed" if run.cut_short else
                 (f"no progress for {stage.stalled_s:.0f} s, killed" if stage.stalled_s is not None else
                  f"still running after {timeout_s:g} s, killed") if run.exit_code is None else
                 f"exit {run.exit_code}" if run.exit_code else "finished")
        evidence.append(f"{node} (ranks {_ranks_text(ranks.get(node, []))}): {state}"
                        + (f": {run.error}" if run.error and run.exit_code != 0 else ""))
    last = stage.events("row") or stage.events("pair")
    if last:
        evidence.append(f"last result: {_describe(last[-1])}")
    if lost:
        culprits = lost
        summary = f"{stage.name} failed: {fold(lost)} went down mid-run; the other ranks stopped with it"
    elif hung and (stage.forensics or stage.stalled_s is not None):
        text, stacks, odd, _ = hang_report(stage.stalled_s, stage.forensics, timeout_s)
        culprits, evidence = odd or hung, stacks + evidence
        summary = f"{stage.name} hung: {text}"
        remedy = stage.forensics.remedy if stage.forensics else REMEDY_HANG
        return [Finding(f"bench.{stage.name}", Status.FAIL, summary, evidence, remedy, culprits)]
    elif hung and len(hung) < len(runs):
        culprits = hung
        summary = f"{stage.name} failed: ranks on {fold(hung)} did not finish within {timeout_s:g} s"
    elif hung:
        culprits = hung
        summary = f"{stage.name} hung: no rank finished within {timeout_s:g} s"
    else:
        first = sorted(failed, key=lambda n: runs[n].ended_s or 0)[:1]
        culprits = first or failed
        summary = f"{stage.name} failed on {fold(failed)} (first: {fold(culprits)})"
    remedy = ("check the named node (clustercheck env / net on it); rerun with NCCL_DEBUG=INFO, and "
              "TORCH_NCCL_DUMP_ON_TIMEOUT=1 for a trace of where the ranks stopped")
    return [Finding(f"bench.{stage.name}", Status.FAIL, summary, evidence, remedy, culprits)]


def _describe(event: Dict) -> str:
    if event.get("event") == "pair":
        return f"pair {event['a']} <-> {event['b']}"
    return f"{event['collective']} at {event['size']} B"


def data_check(stage: RanksRun) -> List[Finding]:
    bad = [(row, p) for row in stage.events("row") for p in PLACEMENTS
           if row.get(p) and (row[p].get("wrong") or 0) > 0]
    if not stage.events("row"):
        return []
    if not bad:
        return [Finding("bench.data", Status.OK, f"every result checked correct ({len(stage.events('row'))} rows)")]
    return [Finding("bench.data", Status.FAIL, f"wrong results in {len(bad)} measurements",
                    [f"{row['collective']} {row['size']} B {p.replace('_', '-')}: {row[p]['wrong']:g} wrong elements"
                     for row, p in bad[:10]],
                    "wrong data is a hardware or driver fault (GPU memory, NVLink, NIC): run `clustercheck env` for "
                    "ECC and Xid, then bench pairs of nodes to find the one", [])]


def ratio_status(ratio: float, fraction: float) -> Status:
    """A bandwidth against what it should be: OK from `fraction` of it, WARN from 70%, else FAIL."""
    return Status.OK if ratio >= fraction else Status.WARN if ratio >= 0.7 else Status.FAIL


def bandwidth(facts: BenchFacts, expect: Expectations) -> List[Finding]:
    """Each collective's busbw; all_reduce's peak as a percentage of what it should reach."""
    findings = []
    sweep = facts.stages[0] if facts.stages else None
    if sweep is None or not facts.figures.by_collective:
        return findings
    for name, coll_rows in facts.figures.by_collective.items():
        top, size = peak(coll_rows)
        text = f"{name}: avg bus bandwidth {facts.figures.avg_busbw[name]:.3f} GB/s, peak {top:.3f} GB/s at {size} B"
        expected = facts.expected if name == "all_reduce" else None
        if expected is None:
            none = ("" if name != "all_reduce" else
                    f" (no published figure for {facts.backend} on these nodes: give one with --expect-busbw or "
                    "[bench] expected_busbw in clustercheck.toml)")
            findings.append(Finding(f"bench.bandwidth.{name}", Status.OK, text + none))
            continue
        largest = max(row["size"] for row in coll_rows)
        gbps, source = expected.at_largest(largest)
        ratio = top / gbps
        status = ratio_status(ratio, expect.fraction)
        evidence = [f"expected {gbps:g} GB/s: {source}",
                    f"a finding below {expect.fraction:.0%} of it ([bench] expected_fraction; nccl-tests' "
                    "NCCL_TESTS_MIN_BW fails below 90%)"]
        if largest < 2 ** 30:
            evidence.append(f"the largest size measured is {largest} B; published figures are for 8-16 GB "
                            "messages, where busbw is highest")
        findings.append(Finding(f"bench.expected.{name}", status,
                                f"{text}: {ratio:.0%} of expected {gbps:g} GB/s", evidence,
                                "" if status is Status.OK else
                                "find the slow node or link with --pairwise; check NIC speed (ethtool, ibstat) "
                                "and that NCCL uses the fast interface (NCCL_DEBUG=INFO shows it)",
                                [] if status is Status.OK else list(sweep.runs)))
    return findings


def against_baseline(facts: BenchFacts, expect: Expectations) -> List[Finding]:
    """This sweep against --baseline at the sizes both measured; judged at the largest of them."""
    baseline = expect.baseline
    if baseline is None or not facts.figures.by_collective:
        return []
    findings = []
    shared = [name for name in facts.figures.by_collective if name in baseline.busbw]
    if not shared:
        return [Finding("bench.baseline", Status.UNKNOWN,
                        f"could not compare with the baseline: it measured {', '.join(baseline.busbw) or 'nothing'}, "
                        f"this run {', '.join(facts.figures.by_collective)}", [baseline.describe()],
                        "run the same collective as the baseline (-c)", [])]
    for name in shared:
        pairs = compare(baseline.busbw[name], by_size(facts.figures.by_collective[name]))
        if not pairs:
            old, new = sorted(baseline.busbw[name]), sorted(by_size(facts.figures.by_collective[name]))
            findings.append(Finding(f"bench.baseline.{name}", Status.UNKNOWN,
                                    f"could not compare {name} with the baseline: no message size in common "
                                    f"(baseline {old[0]}-{old[-1]} B, this run {new[0]}-{new[-1]} B)",
                                    [baseline.describe()], "rerun with -b/-e/-f giving sizes the baseline has", []))
            continue
        size, old, new = pairs[-1]
        ratio = new / old
        status = ratio_status(ratio, expect.fraction)
        findings.append(Finding(
            f"bench.baseline.{name}", status,
            f"{name}: {new:.3f} GB/s busbw at {size} B, {ratio:.0%} of the baseline's {old:.3f} GB/s",
            [baseline.describe()] + [f"{s} B: {n:.3f} GB/s, baseline {o:.3f} ({n / o:.0%})" for s, o, n in pairs[-12:]],
            "" if status is Status.OK else "what changed since the baseline (nodes, driver, NCCL, fabric)? "
            "--pairwise finds a slow node", []))
    return findings


def budget_stops(facts: BenchFacts) -> List[Finding]:
    """The sweep stopped climbing before --max-bytes: what was not measured, and why (said, not hidden)."""
    findings = []
    for event in facts.figures.budget:
        if event.get("stage") != "sweep":
            continue
        findings.append(Finding(
            "bench.budget", Status.WARN,
            f"the sweep stopped at {event['last_bytes']} B: sizes from {event['skipped_from']} B were not measured",
            [event["reason"]], "the bandwidth above comes from the sizes measured; find what is slow first (the pair "
            "rounds name a slow node), or give the sweep more time: --size-budget, --stage-budget", []))
    return findings


def nccl_paths(facts: BenchFacts) -> Dict[str, NodePath]:
    return captured_paths(facts.stages)


def nccl_verdict(facts: BenchFacts) -> List[Finding]:
    return capture_findings(facts.stages, facts.probed)


def with_paths(findings: List[Finding], facts: BenchFacts) -> List[Finding]:
    """A slow node's finding says the path NCCL took there (the first place to look)."""
    paths = nccl_paths(facts)
    for finding in findings:
        if finding.check == "bench.pairwise.node" and paths:
            finding.evidence = [f"{node}: NCCL between nodes {paths[node].between()}" for node in finding.nodes
                                if node in paths and paths[node].ranks] + finding.evidence
    return findings


def judge_bench(facts: BenchFacts, expect: Expectations, timeout_s: float) -> List[Finding]:
    findings = participation(facts)
    for stage in facts.stages:
        findings += stage_outcome(stage, timeout_s)
        findings += data_check(stage)
    findings += bandwidth(facts, expect)
    findings += against_baseline(facts, expect)
    findings += budget_stops(facts)
    findings += with_paths(pairwise_verdict(facts), facts)
    findings += nccl_verdict(facts)
    if not facts.stages and not facts.problems:
        findings.append(Finding("bench", Status.WARN, "nothing was measured", [], "name collectives to run", []))
    return findings
