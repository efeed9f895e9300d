"""The judges of `clustercheck bench`: did every rank finish, is the data right, is the
bandwidth what it should be, and which node or link is slow.

Pure functions over BenchFacts (plus the user's expectations), reading the bandwidths
computed once in figures.py.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

from clustercheck.core.inventory import fold
from clustercheck.core.result import Finding, Status
from clustercheck.nccl.path_judge import NodePath
from clustercheck.ranks.nccl_capture import capture_findings, captured_paths
from clustercheck.onnode.rounds import SLOW, STARVED, cpu_wait, exchange_gbps
from clustercheck.ranks.forensics import REMEDY_HANG, hang_report
from clustercheck.ranks.runs import RanksRun
from clustercheck.stages.bench.baseline import Baseline, by_size, compare
from clustercheck.stages.bench.facts import BenchFacts
from clustercheck.outputs.nccl_tests import PLACEMENTS, peak

SLOW_PAIR_RATIO = SLOW  # a node whose pairs' median is below this fraction of the other pairs' is slow
SLOW_LINK_RATIO = 0.2   # one pair is a single, noisy measurement: slow only when far below the rest


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


REMEDY_STARVED = ("the named nodes' CPUs were busy or capped while they measured (another job, a data loader, a "
                  "runaway process: top, ps -eo pcpu,comm --sort=-pcpu; a cgroup CPU quota: cpu.max); rerun the "
                  "bench once they are free")


def starved_said(facts: BenchFacts) -> List[str]:
    """One line per exchange not counted because a side's threads waited for a CPU, naming that side."""
    lines = []
    for event in facts.figures.starved:
        waits = event.get("cpu_wait") or {}
        node, share = max(waits.items(), key=lambda item: item[1]) if isinstance(waits, dict) and waits else ("?", 0)
        lines.append(f"round {event.get('round', 0) + 1} ({event.get('phase')}): {event['a']} <-> {event['b']}: not "
                     f"counted ({exchange_gbps(event):.3f} GB/s), {node}'s threads waited {share:.0%} of the exchange "
                     f"for a CPU (both sides {cpu_wait(event):.0%}, above {STARVED:.0%}), enough to explain that "
                     "speed: it measured busy or capped CPUs (another process, a cgroup quota), not the link")
    return lines


def search_verdict(facts: BenchFacts) -> List[Finding]:
    """What the adaptive search found: slow nodes, slow links, and what it could not settle."""
    search = facts.figures.search
    if search is None:
        return []
    if search.reference is None:
        if not facts.figures.starved and not facts.figures.rounds:
            return []
        return [Finding("bench.pairwise.undecided", Status.UNKNOWN,
                        "could not tell whether any node or link is slow: no exchange of the first round measured "
                        "a link" + (" (the nodes' CPUs were busy)" if facts.figures.starved else ""),
                        starved_said(facts), REMEDY_STARVED if facts.figures.starved else
                        "rerun with a larger --stage-budget", sorted(search.nodes))]
    reference = search.reference
    slow_ones = [m for m in search.measured if m[4] < SLOW * reference]
    fast_ones = [m[4] for m in search.measured if m[4] >= SLOW * reference]
    evidence = [f"round {r + 1} ({phase}): {a} <-> {b}: {gbps:.3f} GB/s (slow)" for r, phase, a, b, gbps in slow_ones]
    evidence += starved_said(facts)
    if fast_ones:
        evidence.append(f"{len(fast_ones)} other exchange{'s' * (len(fast_ones) > 1)} fast: "
                        f"{min(fast_ones):.3f} to {max(fast_ones):.3f} GB/s")
    basis = (f"reference {reference:.3f} GB/s, the screen's upper median; slow below {SLOW:.0%} of it; "
             f"{search.rounds} round{'s' * (search.rounds != 1)}")
    findings = []
    slow = search.slow_nodes()
    if slow:
        mine = [gbps for _, phase, a, b, gbps in search.measured if phase == "confirm" and a in slow]
        findings.append(Finding(
            "bench.pairwise.node", Status.FAIL,
            f"slow node{'s' * (len(slow) > 1)}: {fold(slow)} (slow with two nodes that passed: "
            f"{statistics.median(mine):.3f} GB/s against a reference of {reference:.3f} GB/s)", evidence,
            "check that node's NIC (ethtool / ibstat: speed, errors), cable and switch port, and any traffic "
            "shaping (tc qdisc); or drain it", slow))
    if search.links:
        findings.append(Finding(
            "bench.pairwise.link", Status.FAIL,
            "slow link" + "s" * (len(search.links) > 1) + ": " + ", ".join(f"{a} <-> {b}" for a, b in search.links)
            + " (slow twice; both nodes fast with others)", evidence,
            "check the path between those two nodes: switch ports, routing, a congested uplink",
            sorted({n for pair in search.links for n in pair})))
    undecided, open_pairs = search.undecided(), search.open_pairs()
    if undecided or open_pairs:
        stopped = [e["reason"] for e in facts.figures.budget if e.get("stage") == "pairs"]
        why = stopped[0] if stopped else f"{search.rounds} rounds (the most the search takes for " \
                                          f"{len(search.nodes)} nodes) or no untried partner left"
        subjects = undecided + [f"{a} <-> {b}" for a, b in open_pairs if a not in undecided and b not in undecided]
        findings.append(Finding(
            "bench.pairwise.undecided", Status.UNKNOWN,
            f"could not tell whether {', '.join(subjects)} {'is' if len(subjects) == 1 else 'are'} slow: "
            f"the search stopped ({why})", evidence,
            REMEDY_STARVED if facts.figures.starved else
            "rerun with a larger --stage-budget, or --pairwise full on these nodes", undecided))
    if not findings:
        checked = len({n for _, _, a, b, _ in search.measured for n in (a, b)})
        findings.append(Finding(
            "bench.pairwise", Status.OK,
            f"no slow node among {checked}: every node within {SLOW:.0%} of the reference with a partner that "
            f"passed ({basis}; links between nodes that passed are not all measured: --pairwise full measures "
            "every pair)", evidence))
    return findings


def pairwise_verdict(facts: BenchFacts) -> List[Finding]:
    """Name the slow node (slow with every partner) or the slow link (slow only together)."""
    if facts.figures.pair_mode == "adaptive":
        return search_verdict(facts)
    matrix = facts.figures.pairs.get("matrix", {})
    confirm = facts.figures.pairs.get("confirm", {})
    if not matrix:
        return [Finding("bench.pairwise.undecided", Status.UNKNOWN, "could not tell whether any node or link is slow: "
                        "no exchange of the round robin measured a link (the nodes' CPUs were busy)",
                        starved_said(facts), REMEDY_STARVED, [])] if facts.figures.starved else []
    median = statistics.median(matrix.values())
    nodes = sorted({n for pair in matrix for n in pair})
    # A node is slow when its pairs are slow next to the pairs it is not in (with 3 nodes, two of
    # the three pairs hold the slow node: the overall median would hide it).
    slow_nodes = []
    for node in nodes:
        mine = [speed for pair, speed in matrix.items() if node in pair]
        others = [speed for pair, speed in matrix.items() if node not in pair]
        confirmed = [speed for pair, speed in confirm.items() if node in pair]
        if others and mine and statistics.median(mine) < SLOW_PAIR_RATIO * statistics.median(others) and \
                all(speed < SLOW_PAIR_RATIO * statistics.median(others) for speed in confirmed):
            slow_nodes.append(node)
    slow_pairs = set()
    for pair, speed in matrix.items():
        rest = [s for p, s in matrix.items() if p != pair and not set(p) & set(slow_nodes)]
        limit = SLOW_PAIR_RATIO if set(pair) & set(slow_nodes) else SLOW_LINK_RATIO
        if speed < limit * (statistics.median(rest) if rest else median):
            slow_pairs.add(pair)
    slow_links = [pair for pair in slow_pairs if not set(pair) & set(slow_nodes)]
    evidence = [f"{a} <-> {b}: {speed:.3f} GB/s" + (" (slow)" if (a, b) in slow_pairs else "")
                for (a, b), speed in sorted(matrix.items())]
    evidence += [f"confirm {a} <-> {b}: {speed:.3f} GB/s" for (a, b), speed in sorted(confirm.items())]
    evidence += starved_said(facts)
    findings = []
    if slow_nodes:
        mine = statistics.median(s for p, s in matrix.items() if set(p) & set(slow_nodes))
        rest = [s for p, s in matrix.items() if not set(p) & set(slow_nodes)]
        findings.append(Finding(
            "bench.pairwise.node", Status.FAIL,
            f"slow node{'s' if len(slow_nodes) > 1 else ''}: {fold(slow_nodes)} ({mine:.3f} GB/s with its "
            f"partners; {statistics.median(rest) if rest else median:.3f} GB/s between the others)", evidence,
            "check that node's NIC (ethtool / ibstat: speed, errors), cable and switch port, and any traffic "
            "shaping (tc qdisc); or drain it", slow_nodes))
    if slow_links:
        findings.append(Finding(
            "bench.pairwise.link", Status.FAIL,
            "slow link" + ("s" if len(slow_links) > 1 else "") + ": " +
            ", ".join(f"{a} <-> {b}" for a, b in sorted(slow_links)) +
            f" (below {SLOW_LINK_RATIO:.0%} of the other pairs; both nodes are fast with others)",
            evidence, "check the path between those two nodes: switch ports, routing, a congested uplink",
            sorted({n for pair in slow_links for n in pair})))
    if not findings:
        findings.append(Finding("bench.pairwise", Status.OK,
                                f"every pair within {SLOW_PAIR_RATIO:.0%} of the median {median:.3f} GB/s "
                                f"({len(matrix)} pairs)", evidence))
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
