"""The judges of `clustercheck smoke`: did the training run work and compute the right numbers,
and if not, why and where (classify.py).

A pass needs every rank to finish; no NaN or Inf; the loss curve to follow one process's
reference for the same global batch (the proof that the collectives compute the right
numbers); the loss to fall; the run, resumed from its checkpoint in fresh processes, to
repeat the same losses; and no node far slower than the others.
"""

from __future__ import annotations

import statistics
from typing import Dict, List, Optional

from clustercheck.core.inventory import fold
from clustercheck.core.result import Finding, Status
from clustercheck.node.facts import get, gpus
from clustercheck.planner.fit import mode_fit
from clustercheck.ranks.nccl_capture import capture_findings
from clustercheck.ranks.runs import ABORT_MARKS, RanksRun, aborted_at_exit, ended_well
from clustercheck.ranks.stacks import ranges
from clustercheck.stages.smoke.classify import classify
from clustercheck.stages.smoke.facts import SmokeFacts

MIN_LOSS_DROP = 0.2     # the last loss must be at most 80% of the first
LORA_MIN_LOSS_DROP = 0.02   # an adapter on a frozen base moves the loss slowly: it must fall, by 2% at least
# Relative difference allowed from the single-process reference, and between the run and its resumption.
# On CPUs the arithmetic differs only in the order of the sums (measured: 1e-7; one rank at 1.5x the
# learning rate: 3e-3 under ZeRO-2, 3e-2 under FSDP). GPUs use other kernels for the bigger batch, and
# bf16 / fp16 round far more.
REFERENCE_TOLERANCE = {"gloo": 1e-4, "nccl": 2e-3, "half": 5e-2}
RESUME_TOLERANCE = {"gloo": 1e-6, "nccl": 1e-3, "half": 1e-2}
STRAGGLER_RATIO = 1.5   # a node whose forward pass takes this much longer than the median node's
STRAGGLER_STEP_SHARE = 0.2   # ... by more than this share of the step time


def _precision_key(stage: RanksRun) -> str:
    ds = next(iter(stage.events("deepspeed_config")), None)   # --deepspeed: what "auto" resolved to decides
    used = ds.get("precision") if ds else stage.config.get("precision")
    if used in ("bf16", "fp16"):
        return "half"
    return (stage.start or {}).get("backend", "gloo")


def _node_of(summary: Dict, rank: int) -> str:
    return next((r["node"] for r in summary.get("ranks") or [] if r.get("rank") == rank), "?")


def failure(facts: SmokeFacts, stage: RanksRun, timeout_s: float, what: str = "training") -> Finding:
    cause = classify(stage.runs, timeout_s, stage.stalled_s, stage.forensics)
    detail = [p.name for p in facts.probed if get(p.facts, "env", "TORCH_DISTRIBUTED_DEBUG") == "DETAIL"]
    if cause.kind == "crashed" and detail and stage.config.get("mode") == "ddp":
        cause.remedy = (f"TORCH_DISTRIBUTED_DEBUG=DETAIL is set on {fold(detail)}: DDP (torch 2.13) segfaults while "
                        f"it is built under it; unset it or use INFO. Otherwise: {cause.remedy}")
    last = stage.events("step")
    evidence = cause.evidence + ([f"last progress: step {last[-1]['step']}, loss {last[-1]['loss']}"]
                                 if last else ["no training step finished"])
    ranks = (f" (rank{'s' * (len(cause.ranks) > 1)} {ranges(cause.ranks)})" if cause.ranks else
             f" (local rank{'s' * (len(cause.local_ranks) > 1)} {ranges(cause.local_ranks)})" if cause.local_ranks
             else "")
    where = f" on {fold(cause.nodes)}{ranks}" if cause.nodes else ""
    return Finding(f"smoke.{cause.kind}", Status.FAIL, f"{what} failed{where}: {cause.summary}",
                   evidence, cause.remedy, cause.nodes)


def storage(facts: SmokeFacts) -> List[Finding]:
    """Say plainly where checkpoints went: one filesystem for every node, or a disk per node."""
    event = next(iter(facts.stage.events("storage")), None)
    if event is None:
        return []
    where = event["directory"]
    if event["kind"] == "mixed":
        return [Finding("smoke.storage", Status.FAIL,
                        f"the checkpoint directory {where} is shared by some nodes only",
                        [f"{fold(event['nodes_seeing'])}: see the file the first rank wrote",
                         f"{fold(event['nodes_not_seeing'])}: do not"],
                        "mount the same filesystem at that path on every node, or use a node-local path on all",
                        event["nodes_not_seeing"])]
    kind = ("shared by every node" if event["kind"] == "shared" and len(event["nodes_seeing"]) > 1 else
            "one node's disk" if event["kind"] == "shared" else
            "a disk per node: each node saved and reloaded its own ranks' part")
    return [Finding("smoke.storage", Status.OK, f"checkpoint directory {where}: {kind}")]


def numbers(facts: SmokeFacts, min_loss_drop: float) -> List[Finding]:
    """NaN / Inf, the reference curve, the loss falling, and (DDP) the ranks' weights."""
    summary, stage, findings = facts.summary, facts.stage, []
    names = list(stage.runs)
    bad = summary.get("nonfinite")
    if bad:
        node = _node_of(summary, bad["rank"])
        return [Finding("smoke.nan", Status.FAIL, f"the loss became {bad['value'].upper()} at step {bad['step']} "
                        f"on rank {bad['rank']} ({node})", [f"first loss {summary['first_loss']}"],
                        "lower the learning rate or use bf16 rather than fp16; if only this node's ranks go NaN, "
                        "check its GPUs (clustercheck env: ECC, Xid)", [node])]
    reference = summary.get("reference")
    if reference:
        tolerance = REFERENCE_TOLERANCE[_precision_key(stage)]
        losses = summary.get("losses") or {}
        departs = [(step, losses[str(step)], ref) for step, ref in enumerate(reference, 1)
                   if str(step) in losses and abs(losses[str(step)] - ref) > tolerance * max(abs(ref), 1e-12)]
        if departs:
            step, got, want = departs[0]
            findings.append(Finding(
                "smoke.reference", Status.FAIL,
                f"the loss departs from one process's reference at step {step}: {got:.6f}, expected {want:.6f} "
                f"(tolerance {tolerance:g} relative)",
                [f"step {s}: {g:.6f} vs {w:.6f}" for s, g, w in departs[:5]],
                "the ranks do not compute the same numbers as one process: a rank with other settings (learning "
                "rate, data, seed), a corrupted collective (wrong data in clustercheck bench), or different "
                "library versions (clustercheck env)", names))
        else:
            findings.append(Finding("smoke.reference", Status.OK,
                                    f"the first {len(reference)} losses match one process's reference within "
                                    f"{tolerance:g}"))
    else:
        why = summary.get("reference_skipped") or (f"preset {stage.config.get('preset')}: too large to recompute "
                                                   f"in one process")
        findings.append(Finding("smoke.reference", Status.WARN, "the loss curve was not compared with a reference",
                                [why], "run the tiny or small preset, on fewer ranks if need be, to prove the "
                                       "collectives' numbers", []))
    first, last = summary["first_loss"], summary["last_loss"]
    if last <= first * (1 - min_loss_drop):
        findings.append(Finding("smoke.loss", Status.OK, f"loss fell from {first:.3f} to {last:.3f} in "
                                                          f"{summary['steps']} steps"))
    else:
        findings.append(Finding("smoke.loss", Status.FAIL, f"loss did not fall clearly: {first:.3f} -> {last:.3f}",
                                [f"needed at most {first * (1 - min_loss_drop):.3f}"],
                                "a learning problem, not a cluster one, unless ranks see different data or "
                                "weights: check the steps' losses in --json", names))
    if summary.get("weights_agree") is False:   # DDP only: sharded modes agree by construction
        findings.append(Finding("smoke.weights", Status.FAIL, "ranks ended with different weights", [],
                                "a silent desync: check that every node runs the same torch (clustercheck env) "
                                "and that no rank skipped a step", names))
    return findings


def resumed(facts: SmokeFacts, timeout_s: float) -> List[Finding]:
    """The checkpoint proves itself only by a resume: fresh processes, the same losses after it."""
    save_at = facts.stage.config.get("save_at")
    if facts.resume is None:
        return [Finding("smoke.checkpoint", Status.WARN, "the resume from the checkpoint was not run",
                        ["no time left before the deadline"], "raise --timeout", [])]
    summary = facts.resumed_summary
    if not ended_well(facts.resume, summary):
        return [failure(facts, facts.resume, timeout_s, f"resuming from the checkpoint of step {save_at}")]
    tolerance = RESUME_TOLERANCE[_precision_key(facts.stage)]
    before, after = facts.summary.get("losses") or {}, summary.get("losses") or {}
    steps = sorted((s for s in after if int(s) > save_at), key=int)
    differ = [s for s in steps if s not in before or abs(after[s] - before[s]) > tolerance * max(abs(before[s]), 1e-12)]
    if not steps or differ:
        evidence = [f"step {s}: {after[s]:.6f} resumed, {before.get(s, float('nan')):.6f} before" for s in differ[:5]]
        return [Finding("smoke.checkpoint", Status.FAIL,
                        f"the run resumed from step {save_at} does not repeat the same losses",
                        evidence or ["the resumed run reported no loss after the checkpoint"],
                        "the checkpoint lost state (optimizer, data position) or a node read another node's "
                        "files: check the checkpoint directory on every node", list(facts.stage.runs))]
    times = facts.checkpoint_times
    took = [f"saved in {times['save_s']:.2f} s" if "save_s" in times else "",
            f"loaded in {times['load_s']:.2f} s" if "load_s" in times else ""]
    return [Finding("smoke.checkpoint", Status.OK, f"resumed from the checkpoint of step {save_at} in fresh processes: "
                                                   f"the same losses for steps {steps[0]}-{steps[-1]}"
                                                   + (f" ({', '.join(t for t in took if t)})" if any(took) else ""))]


def throughput(facts: SmokeFacts) -> List[Finding]:
    """Throughput per rank and per node; a straggler named when its own compute is well above the rest."""
    summary = facts.summary
    ranks = [r for r in summary.get("ranks") or [] if r.get("step_ms")]
    by_node: Dict[str, List[Dict]] = {}
    for r in ranks:
        by_node.setdefault(r["node"], []).append(r)
    per_node = {n: (sum(r["tokens_per_s"] for r in rs), statistics.median(r["step_ms"] for r in rs),
                    statistics.median(r.get("forward_ms") or r["step_ms"] for r in rs))
                for n, rs in by_node.items()}
    text = (f"{summary['mode']}: {summary['tokens_per_s']:.0f} tokens/s in all, {summary['tokens_per_s_per_rank']:.0f} "
            f"per rank, peak memory {summary['peak_mem_mb']:.0f} MB (rank 0)")
    evidence = [f"{n}: {tok:.0f} tokens/s over {len(by_node[n])} ranks, step {step:.1f} ms, forward {fwd:.1f} ms"
                for n, (tok, step, fwd) in per_node.items()]
    if len(per_node) > 1:
        median_fwd = statistics.median(fwd for _, _, fwd in per_node.values())
        median_step = statistics.median(step for _, step, _ in per_node.values())
        # Every rank pays a straggler's excess each step; an excess under STRAGGLER_STEP_SHARE of the
        # step is what a busy host's scheduling makes of a few milliseconds, not a slow node.
        floor = max(2.0, STRAGGLER_STEP_SHARE * median_step)
        slow = {n: fwd for n, (_, _, fwd) in per_node.items()
                if fwd > STRAGGLER_RATIO * median_fwd and fwd - median_fwd > floor}
        if slow:
            return [Finding("smoke.straggler", Status.WARN,
                            f"straggler: {fold(list(slow))} computes a step's forward pass in "
                            f"{max(slow.values()):.1f} ms, the median node in {median_fwd:.1f} ms", evidence,
                            "every rank waits for the slowest at each step: check that node's GPUs (clocks, "
                            "throttling: clustercheck env), CPU load and data loading", list(slow))]
    return [Finding("smoke.throughput", Status.OK, text, evidence)]


def judge_smoke(facts: SmokeFacts, timeout_s: float, min_loss_drop: float = MIN_LOSS_DROP) -> List[Finding]:
    findings = cannot_take_part(facts) + memory_plan(facts)
    if facts.stage is None:
        return findings
    findings += capture_findings([facts.stage, facts.resume], facts.probed)   # NCCL's path, where it ran
    if not ended_well(facts.stage, facts.summary):
        return findings + [failure(facts, facts.stage, timeout_s)]
    findings += aborts_at_exit(facts.stage, facts.resume)
    findings += job_shape(facts)
    findings += storage(facts)
    findings += numbers(facts, min_loss_drop)
    findings += resumed(facts, timeout_s)
    findings += throughput(facts)
    return findings


def aborts_at_exit(*stages: Optional[RanksRun]) -> List[Finding]:
    """Ranks that finished training and then aborted as their process exited: a WARN about teardown (the
    run's numbers stand), with the line that says so, never a crash in training."""
    runs = [(stage.name, node, run) for stage in stages if stage is not None for node, run in stage.runs.items()
            if aborted_at_exit(run)]
    if not runs:
        return []
    nodes = sorted({node for _, node, _ in runs})
    marks = sorted({mark for _, _, run in runs for mark in ABORT_MARKS if mark in run.stderr})
    return [Finding("smoke.exit", Status.WARN, f"a rank on {fold(nodes)} aborted (SIGABRT) as it exited, after "
                                               f"training finished and every rank reported", marks,
                    "the run's numbers stand; an abort at teardown usually comes from a library's thread still "
                    "running at exit: report it with the node's versions (clustercheck env)", nodes)]


def cannot_take_part(facts: SmokeFacts) -> List[Finding]:
    """One finding per distinct reason, its nodes folded (the node layer's reach names unreached nodes)."""
    unreached = {p.name for p in facts.probed if p.facts is None}
    by_problem: Dict[str, List[str]] = {}
    for node, problem in facts.problems.items():
        if node not in unreached:
            by_problem.setdefault(problem, []).append(node)
    findings = []
    for problem, nodes in by_problem.items():
        remedy = ("install it with that interpreter on those nodes (`<python> -m pip install transformers peft`), "
                  "or leave out --model / --lora" if set(nodes) <= set(facts.lacking) else
                  "run `clustercheck env`: the interpreter, torch and SSH must work on every node")
        findings.append(Finding("smoke.node", Status.FAIL, f"{fold(nodes)} cannot take part: {problem}", [],
                                remedy, nodes))
    return findings


def job_shape(facts: SmokeFacts) -> List[Finding]:
    """What ran, when it is the user's own job: their model, their DeepSpeed config as resolved, LoRA."""
    model = next(iter(facts.stage.events("model")), None)
    ds = next(iter(facts.stage.events("deepspeed_config")), None)
    if not model and not ds:
        return []
    evidence = []
    if model:
        lora = model.get("lora")
        evidence.append(f"model {model['directory']}: {model['parameters']:,} parameters, {model['trainable']:,} "
                        f"trained" + (f" (LoRA rank {lora['rank']}, alpha {lora['alpha']}; base frozen)" if lora
                                      else "") + f"; text as {model['tokens']}")
    if ds:
        resolved = ", ".join(f"{k}={v}" for k, v in ds["resolved"].items()) or "nothing was \"auto\""
        evidence.append(f"DeepSpeed config {facts.stage.config.get('deepspeed') or ds['file']} ran as "
                        f"{ds['mode']}; resolved: {resolved}")
    return [Finding("smoke.job", Status.OK, "your job's shape ran: " + "; ".join(
        part for part in (model and "your model", ds and "your DeepSpeed config",
                          model and model.get("lora") and "LoRA") if part), evidence)]


def memory_plan(facts: SmokeFacts) -> List[Finding]:
    """--model on GPUs: does this run's mode fit the smallest GPU (clustercheck/planner/memory.py)? Nothing on CPUs."""
    on_gpus = any(gpus(p.facts) for p in facts.probed if p.facts)
    if facts.shape_problem and on_gpus:
        return [Finding("smoke.plan", Status.UNKNOWN, f"could not plan the run's memory: {facts.shape_problem}", [],
                        "check the model's config.json on the nodes", [])]
    if facts.shape is None or facts.workload is None or not facts.plan_mode:
        return []
    finding = mode_fit(facts.shape, facts.probed, facts.plan_mode, facts.workload)
    return [finding] if finding else []
