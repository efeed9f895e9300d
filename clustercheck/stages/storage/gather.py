"""Run the storage probe (clustercheck/onnode/storage_probe.py) on every node: first the coherence round (one
node writes and renames, the others look), then every rank slot of every node writes, syncs and reads back at
one moment (--start-at); each run has its deadline."""

from __future__ import annotations

import os
import time
import uuid
from typing import Dict, List, Sequence

from clustercheck.core.inventory import Node
from clustercheck.node.facts import interpreter
from clustercheck.node.gather import read_document
from clustercheck.onnode import inline_command
from clustercheck.stages.storage.facts import StorageFacts
from clustercheck.stages.storage.options import StorageOptions
from clustercheck.transport.base import NodeResult, Transport
from clustercheck.transport.fanout import Cluster

IMPORT_S = 10.0     # the probe's own start on a loaded node (standard library only)


def node_directory(transport: Transport, options: StorageOptions) -> str:
    """--checkpoint-dir, else the node's run directory (node-local: where smoke saves by default)."""
    return options.checkpoint_dir or os.path.dirname(transport.put(b"", ".storage"))


def documents(cluster: Cluster, nodes: Sequence[Node], options: StorageOptions, argv_of, deadline: float,
              what: str):
    """node -> document, node -> why none, for one probe round with per-node arguments (`what`: its name in the
    progress)."""
    by_name = {node.name: node for node in nodes}
    docs: Dict[str, Dict] = {}
    problems: Dict[str, str] = {}

    def run(transport: Transport, node: Node) -> NodeResult:
        argv = argv_of(node, node_directory(transport, options))
        return transport.run(inline_command(interpreter(node), "storage_probe", argv), deadline)

    for result in cluster.each(run, nodes, what=what):
        doc, problem = read_document(by_name[result.node], result)
        if doc is not None:
            docs[result.node] = doc
        if problem:
            problems[result.node] = problem
    return docs, problems


def check_coherence(cluster: Cluster, nodes: Sequence[Node], options: StorageOptions, facts: StorageFacts) -> None:
    token = uuid.uuid4().hex[:12]
    start_at = time.time() + (options.start_margin_s if len(nodes) > 1 else 0.0)
    facts.writer = nodes[0].name

    def argv(node: Node, directory: str) -> List[str]:
        role = "write" if node.name == facts.writer else "look"
        return ["--dir", directory, "--coherence", role, "--token", token, "--start-at", f"{start_at:.3f}",
                "--window", f"{options.window:g}"]

    deadline = options.start_margin_s + options.window + IMPORT_S + 10
    facts.coherence, facts.coherence_problems = documents(
        cluster, nodes, options, argv, deadline, f"one node writes, the others look for its file ({options.window:g} s "
                                                 f"window)")
    written_in = (facts.coherence.get(facts.writer) or {}).get("dir")
    if written_in:     # everyone has looked (or given up): the writer's files go
        remove = ["--dir", written_in, "--coherence", "remove", "--token", token]
        cluster.run(inline_command(interpreter(nodes[0]), "storage_probe", remove), 30, nodes[:1])


def measure(cluster: Cluster, nodes: Sequence[Node], options: StorageOptions, facts: StorageFacts) -> None:
    token = uuid.uuid4().hex[:12]
    start_at = time.time() + (options.start_margin_s if len(nodes) > 1 else 0.0)
    world = sum(facts.ranks.get(n.name, 1) for n in nodes)
    first_rank, rank = {}, 0
    for node in nodes:
        first_rank[node.name], rank = rank, rank + facts.ranks.get(node.name, 1)

    def argv(node: Node, directory: str) -> List[str]:
        args = ["--dir", directory, "--slots", str(facts.ranks.get(node.name, 1)), "--size", str(options.size),
                "--seconds", f"{options.seconds:g}", "--start-at", f"{start_at:.3f}", "--token", token,
                "--d-state", f"{options.d_state_s:g}", "--world", str(world), "--rank0", str(first_rank[node.name])]
        return args + (["--data", options.data_dir] if options.data_dir else [])

    phases = 3 + (1 if options.data_dir else 0)
    deadline = options.start_margin_s + IMPORT_S + (phases + 2) * (options.seconds + 1) + 10
    what = f"every slot writes, reads back{', reads the data' * bool(options.data_dir)} ({options.seconds:g} s a phase)"
    facts.measured, facts.problems = documents(cluster, nodes, options, argv, deadline, what)


def gather_storage(cluster: Cluster, nodes: Sequence[Node], ranks: Dict[str, int],
                   options: StorageOptions) -> StorageFacts:
    params, model = options.model_params()
    facts = StorageFacts(list(nodes), options.checkpoint_dir or "", dict(ranks), window=options.window,
                         data_dir=options.data_dir or "", params=params, model=model, mode=options.mode,
                         precision=options.precision, keep=options.keep, step_seconds=options.step_seconds,
                         save_every=options.save_every)
    started = time.monotonic()
    if nodes:
        check_coherence(cluster, nodes, options, facts)
        measure(cluster, nodes, options, facts)
    facts.wall_s = time.monotonic() - started
    return facts
