"""The judges of `clustercheck smoke`: did the training run work, and if not, why and where.

A pass needs the loss to fall by a clear margin, every rank to hold the same weights, and
a checkpoint to load back identical. A failure is classified from what the ranks wrote to
stderr and how each node's torchrun ended, most telling cause first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from clustercheck.inventory import fold
from clustercheck.launch import NodeRun
from clustercheck.result import Finding, Status
from clustercheck.smoke.gather import SmokeFacts

MIN_LOSS_DROP = 0.2   # the last loss must be at most 80% of the first

# (class, pattern in stderr, summary, remedy), most specific first.
CAUSES: List[Tuple[str, str, str, str]] = [
    ("import", r"ModuleNotFoundError|ImportError|No module named",
     "a module does not import",
     "install it into the interpreter that trains on that node, or name the right one with python= "
     "(clustercheck env shows what each node has)"),
    ("oom", r"out of memory|OutOfMemoryError|CUDA error: out of memory|Cannot allocate memory",
     "out of memory",
     "lower --micro-batch, use zero3 / zero3-offload / fsdp, or activation checkpointing; `clustercheck plan` "
     "shows what fits"),
    ("rendezvous", r"RendezvousTimeoutError|RendezvousClosedError|rendezvous.*(timed out|timeout)|"
                   r"The server socket has failed to listen|failed to bind",
     "the nodes did not meet at the rendezvous",
     "start on every node, keep the rendezvous port open and free on the first node (clustercheck net)"),
    ("comms", r"NCCL error|ncclInternalError|ncclSystemError|DistBackendError|Gloo|Connection closed by peer|"
              r"Connection reset by peer|Broken pipe|ProcessGroup",
     "a collective failed between ranks",
     "run clustercheck net and bench: a blocked port, a wrong interface (NCCL_SOCKET_IFNAME) or a dead peer"),
]


@dataclass
class Cause:
    kind: str
    nodes: List[str]
    ranks: List[int]
    evidence: List[str]
    summary: str
    remedy: str


def _ranks(lines: List[str], pattern: str) -> List[int]:
    found = set()
    for line in lines:
        match = re.match(r"\[rank(\d+)\]:", line.strip())
        if match and re.search(pattern, line):
            found.add(int(match.group(1)))
    return sorted(found)


def classify(runs: Dict[str, NodeRun], timeout_s: float) -> Cause:
    """The most telling cause of a failed run, and the nodes (and ranks) it points at."""
    lost = [n for n, r in runs.items() if r.lost]
    for kind, pattern, summary, remedy in CAUSES:
        if lost and kind in ("rendezvous", "comms"):
            break  # a node went down: the others' connection errors are its echo
        hits = {n: r for n, r in runs.items() if any(re.search(pattern, line) for line in r.stderr_tail + [r.error])}
        if hits:
            evidence = []
            for node, run in hits.items():
                line = next((text.strip() for text in reversed(run.stderr_tail + [run.error])
                             if re.search(pattern, text)), "")
                evidence.append(f"{node}: {line[:300]}")
            ranks = sorted({r for run in hits.values() for r in _ranks(run.stderr_tail, pattern)})
            return Cause(kind, list(hits), ranks, evidence, summary, remedy)
    if lost:
        return Cause("node-down", lost, [], [f"{n}: the connection dropped while training ran" for n in lost],
                     "a node went down mid-run", "check the node (power, kernel log, OOM killer); drain it if it "
                                                  "does not come back")
    hung = [n for n, r in runs.items() if r.exit_code is None and not r.cut_short]
    if hung:
        return Cause("hang", hung, [], [f"{n}: still running after {timeout_s:g} s, killed" for n in hung],
                     f"no result within {timeout_s:g} s",
                     "look for a blocked port or a dead peer (clustercheck net, bench); raise --timeout if the "
                     "first DeepSpeed run compiles its ops")
    failed = {n: r for n, r in runs.items() if r.exit_code not in (0, None)}
    return Cause("error", list(failed), [], [f"{n}: exit {r.exit_code}: {r.error}" for n, r in failed.items()],
                 "the trainer failed", "see the log tail")


def judge_smoke(facts: SmokeFacts, timeout_s: float, min_loss_drop: float = MIN_LOSS_DROP) -> List[Finding]:
    findings = []
    for node, problem in facts.problems.items():
        findings.append(Finding("smoke.node", Status.FAIL, f"{node} cannot take part", [problem],
                                "run `clustercheck env`: the interpreter, torch and SSH must work on every node",
                                [node]))
    stage = facts.stage
    if stage is None:
        return findings
    summary: Optional[Dict] = next(iter(stage.events("summary")), None)
    ok_exit = all(r.exit_code == 0 for r in stage.runs.values())
    if summary is None or not ok_exit:
        cause = classify(stage.runs, timeout_s)
        last = stage.events("step")
        evidence = cause.evidence + ([f"last progress: step {last[-1]['step']}, loss {last[-1]['loss']}"]
                                     if last else ["no training step finished"])
        ranks = f" (ranks {fold([str(r) for r in cause.ranks])})" if cause.ranks else ""
        findings.append(Finding(f"smoke.{cause.kind}", Status.FAIL,
                                f"training failed on {fold(cause.nodes)}{ranks}: {cause.summary}", evidence,
                                cause.remedy, cause.nodes))
        return findings
    first, last = summary["first_loss"], summary["last_loss"]
    names = list(stage.runs)
    if last <= first * (1 - min_loss_drop):
        findings.append(Finding("smoke.loss", Status.OK, f"loss fell from {first:.3f} to {last:.3f} in "
                                                          f"{summary['steps']} steps"))
    else:
        findings.append(Finding("smoke.loss", Status.FAIL, f"loss did not fall clearly: {first:.3f} -> {last:.3f}",
                                [f"needed at most {first * (1 - min_loss_drop):.3f}"],
                                "a learning problem, not a cluster one, unless ranks see different data or "
                                "weights: check the steps' losses in --json", names))
    if summary.get("weights_agree"):
        findings.append(Finding("smoke.weights", Status.OK, f"all {summary['world']} ranks hold the same weights"))
    else:
        findings.append(Finding("smoke.weights", Status.FAIL, "ranks ended with different weights", [],
                                "a silent desync: check that every node runs the same torch / deepspeed "
                                "(clustercheck env) and that no rank skipped a step", names))
    if summary.get("checkpoint_ok"):
        findings.append(Finding("smoke.checkpoint", Status.OK, "the checkpoint saved and loaded back identical"))
    else:
        findings.append(Finding("smoke.checkpoint", Status.FAIL, "the checkpoint did not round-trip", [],
                                "check the disk and permissions of the run directory on every node", names))
    findings.append(Finding("smoke.throughput", Status.OK,
                            f"{summary['mode']}: {summary['tokens_per_s_per_rank']:.0f} tokens/s per rank, "
                            f"{summary['tokens_per_s']:.0f} in all, peak memory {summary['peak_mem_mb']:.0f} MB "
                            f"(rank 0)"))
    return findings
