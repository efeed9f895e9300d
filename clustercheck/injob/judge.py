"""The ranks' documents judged by the stages' own judges (one judge, two ways of gathering): the env probe's
documents as `env` judges them (with the judges every stage shares), the device probe's as `device` does, the
bench worker's events as `bench` does; whether every rank answered (rules.py) goes with env's findings, as the
node layer's shared findings go with the first stage of a run. The result is the runner's own RunResult, so
the report, the metrics and the healthy nodes are written as preflight writes them. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from clustercheck.core.inventory import Node
from clustercheck.injob.rules import arrival
from clustercheck.node.facts import Probed
from clustercheck.node.judges import judge_nodes
from clustercheck.ranks.runs import RanksRun, NodeRun
from clustercheck.runner.stage import RunResult, Stage, StageResult
from clustercheck.stages.bench.facts import BenchFacts
from clustercheck.stages.bench.gather import expected_figure
from clustercheck.stages.bench.options import BenchOptions
from clustercheck.stages.bench.stage import BenchStage
from clustercheck.stages.device.facts import DeviceFacts
from clustercheck.stages.device.options import DeviceOptions
from clustercheck.stages.device.stage import DeviceStage
from clustercheck.stages.env.facts import env_facts
from clustercheck.stages.env.options import EnvOptions
from clustercheck.stages.env.stage import EnvStage
from clustercheck.stages.storage.facts import StorageFacts
from clustercheck.stages.storage.options import StorageOptions
from clustercheck.stages.storage.stage import StorageStage

LAUNCH_NAME = "job"     # the bench's findings say "bench.job": the job's own ranks, not a launch of ours


@dataclass
class Gathered:
    """What rank 0 holds at the end: every rank's identity and documents, by rank."""

    world_size: int
    backend: str
    budget_s: float
    who: Dict[int, Dict] = field(default_factory=dict)
    answered: Dict[int, Dict] = field(default_factory=dict)
    phase_of: Dict[int, str] = field(default_factory=dict)
    device_seconds: float = 0.0

    def hosts(self) -> List[str]:
        """Every node in rank order (each once)."""
        return list(dict.fromkeys(self.who[r]["host"] for r in sorted(self.who)))

    def ranks_on(self, host: str) -> List[int]:
        return sorted(r for r, who in self.who.items() if who["host"] == host)


def _probed(gathered: Gathered) -> List[Probed]:
    found = []
    for rank, doc in sorted(gathered.answered.items()):
        if doc.get("env") is not None:
            host = gathered.who[rank]["host"]
            found.append(Probed(Node(host), facts=doc["env"]))     # the rank's own document
    return found


def _device_facts(gathered: Gathered, nodes: List[Node]) -> DeviceFacts:
    facts = DeviceFacts(nodes, seconds=gathered.device_seconds)
    for rank, doc in sorted(gathered.answered.items()):
        device = doc.get("device")
        if device is None:
            continue
        host = gathered.who[rank]["host"]
        if host not in facts.documents:
            facts.documents[host] = dict(device, devices=list(device.get("devices") or []))
        else:                        # one rank per GPU: the node's document holds every rank's GPU
            facts.documents[host]["devices"] += device.get("devices") or []
        if device.get("error"):
            facts.problems[host] = device["error"]
    return facts


def _storage_facts(gathered: Gathered, nodes: List[Node]) -> Optional[StorageFacts]:
    """The storage probes' documents as the storage stage keeps them (None when no directory was measured)."""
    docs = {gathered.who[r]["host"]: doc["storage"] for r, doc in gathered.answered.items() if doc.get("storage")}
    if not docs:
        return None
    directory = next(iter(docs.values()))["directory"]
    params, model = StorageOptions(checkpoint_dir=directory).model_params()
    facts = StorageFacts(nodes, directory, {h: len(gathered.ranks_on(h)) for h in gathered.hosts()},
                         params=params, model=model, writer=gathered.hosts()[0])
    for host, doc in docs.items():
        for key, problem_key, into, problems in (("coherence", "coherence_problem", facts.coherence,
                                                  facts.coherence_problems),
                                                 ("measured", "problem", facts.measured, facts.problems)):
            if doc.get(key) is not None:
                into[host] = doc[key]
            elif doc.get(problem_key):
                problems[host] = doc[problem_key]
        facts.window = doc["window"]
    return facts


def _ranks_run(gathered: Gathered) -> Optional[RanksRun]:
    """The job's ranks' bench measuring as the run of ranks the bench judges read: each node's measured
    events, and how its ranks ended (a rank that never answered: the node is lost)."""
    benches = {r: doc["bench"] for r, doc in gathered.answered.items() if doc.get("bench") is not None}
    if not benches:
        return None
    runs = {host: NodeRun(host) for host in gathered.hosts()}
    start = {"event": "start", "world": gathered.world_size, "backend": gathered.backend,
             "ranks": [{"node": gathered.who[r]["host"], "local_rank": gathered.who[r].get("local_rank", 0),
                        "pid": gathered.who[r].get("pid")} for r in sorted(gathered.who)]}
    runs[gathered.who[min(gathered.who)]["host"]].events.append(start)
    for host, run in runs.items():
        ranks = gathered.ranks_on(host)
        run.lost = any(r not in gathered.answered for r in ranks)
        errors = [f"rank {r}: {benches[r]['error']}" for r in ranks if r in benches and benches[r]["error"]]
        for rank in ranks:
            run.events += (benches.get(rank) or {}).get("events", [])
        run.exit_code = None if run.lost else (1 if errors else 0)
        run.error = errors[0] if errors else ""
    if all(r in benches and not benches[r]["error"] for r in range(gathered.world_size)):
        runs[gathered.who[min(gathered.who)]["host"]].events.append({"event": "done"})
    config = next(iter(benches.values()))["config"]
    wall = max((gathered.answered[r].get("seconds", {}).get("bench", 0.0) for r in benches), default=0.0)
    return RanksRun(LAUNCH_NAME, runs, wall, config)


def judged(gathered: Gathered) -> Tuple[List[Stage], RunResult]:
    """The stages (for their views) and the run, judged."""
    nodes = [Node(host) for host in gathered.hosts()]
    probed = _probed(gathered)
    env_stage, device_stage = EnvStage(EnvOptions()), DeviceStage(DeviceOptions())
    bench_options = BenchOptions(timeout_s=gathered.budget_s)
    bench_stage = BenchStage(bench_options)
    env = env_facts(probed)
    results = [StageResult("env", facts=env), StageResult("device"), StageResult("bench")]
    results[0].findings = (arrival(gathered.world_size, gathered.who, gathered.answered, gathered.phase_of,
                                   gathered.budget_s)
                           + (judge_nodes(probed) + env_stage.judge(env) if probed else []))
    device = _device_facts(gathered, nodes)
    if device.documents:
        results[1].facts, results[1].findings = device, device_stage.judge(device)
    else:
        results[1].skipped = "no rank answered with its device's measurement"
    storage = _storage_facts(gathered, nodes)
    if storage is not None:
        storage_stage = StorageStage(StorageOptions(checkpoint_dir=storage.directory))
        results.insert(2, StageResult("storage", facts=storage, findings=storage_stage.judge(storage)))
    ranks_run = _ranks_run(gathered)
    if ranks_run is not None:
        bench = BenchFacts(nodes, probed, gathered.backend, stages=[ranks_run])
        bench.nproc = {host: len(gathered.ranks_on(host)) for host in gathered.hosts()}
        bench.expected = expected_figure(bench_options, bench_stage.expect.configured_busbw, probed, gathered.backend)
        results[-1].facts, results[-1].findings = bench, bench_stage.judge(bench)
    else:
        results[-1].skipped = "no rank answered with its bandwidth measurement"
    for result in results:
        result.wall_s = max((doc.get("seconds", {}).get(result.name, 0.0) for doc in gathered.answered.values()),
                            default=0.0)
        result.command = "python -m clustercheck.injob (inside the job)"
    stages = [env_stage, device_stage] + ([storage_stage] if storage is not None else []) + [bench_stage]
    return stages, RunResult(nodes, results)
