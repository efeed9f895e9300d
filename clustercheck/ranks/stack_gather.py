"""Taking the Python stacks of processes on every node: the stacks probe run over the connections.

stacks.py folds and shows what this brings back; forensics.py judges it.
"""

from __future__ import annotations

import re
from typing import Dict, List, Sequence, Tuple

from clustercheck.core.errors import InputError
from clustercheck.core.inventory import Node
from clustercheck.node.facts import interpreter
from clustercheck.node.gather import parse_document
from clustercheck.onnode import inline_command
from clustercheck.ranks.stacks import ProcessStack
from clustercheck.transport.base import Outcome
from clustercheck.transport.fanout import Cluster

MAX_PATTERN = 1000   # it travels on every node's command line

PROBE = "stacks_probe"


def probe_command(node: Node, tag: str = "", match: str = "", hang_dir: str = "", wait_s: float = 3.0) -> str:
    args = ["--tag", tag] if tag else ["--match", match]
    if hang_dir:
        args += ["--hang-dir", hang_dir]
    return inline_command(interpreter(node), PROBE, args + ["--wait", f"{wait_s:g}"])


def read_stacks(node: str, doc: Dict) -> List[ProcessStack]:
    found = []
    for proc in doc.get("processes") or []:
        threads = proc.get("threads") or []
        main = threads[0]["frames"] if threads else []
        hook = proc.get("hook") or {}
        collectives = hook.get("collectives") or []
        rank = proc.get("rank")
        found.append(ProcessStack(
            node=node, pid=int(proc.get("pid", 0)), rank=int(rank) if str(rank or "").isdigit() else None,
            state=proc.get("state", "?"), state_text=proc.get("state_text", ""),
            frames=[(str(f[0]), str(f[1]), int(f[2])) for f in main], threads=len(threads),
            source=proc.get("source", ""), problem=proc.get("problem", ""), step=hook.get("step"),
            phase=hook.get("phase") or "", collective=collectives[-1] if collectives else None,
            command=proc.get("command", ""), flight=proc.get("flight"), job=proc.get("job") or ""))
    return found


def gather_stacks(cluster: Cluster, nodes: Sequence[Node], commands: Dict[str, str], timeout_s: float
                  ) -> Tuple[List[ProcessStack], Dict[str, str]]:
    """Run each node's probe command: (every process found, node -> why it could not be looked at)."""
    stacks: List[ProcessStack] = []
    problems: Dict[str, str] = {}
    by_name = {n.name: n for n in nodes}
    results = cluster.each(lambda transport, node: transport.run(commands[node.name], timeout_s),
                           [by_name[name] for name in commands], what="taking every rank's stack")
    for result in results:
        if not result.outcome.reached or result.outcome is Outcome.TIMED_OUT:
            problems[result.node] = result.detail or result.outcome.value
            continue
        doc, problem = parse_document(result.stdout, schema=1)
        if doc is None:
            err = result.stderr.strip().splitlines()
            problems[result.node] = problem if not err else f"{problem}: {err[-1][:200]}"
            continue
        stacks += read_stacks(result.node, doc)
    return stacks, problems


def dump_matching(cluster: Cluster, nodes: Sequence[Node], pattern: str, timeout_s: float
                  ) -> Tuple[List[ProcessStack], Dict[str, str]]:
    """`clustercheck stacks`: every process matching `pattern` (a regular expression) on every node."""
    if len(pattern) > MAX_PATTERN:
        raise InputError(f"longer than {MAX_PATTERN} characters", "--match", value=pattern[:60] + "...")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise InputError(f"not a regular expression: {exc}", "--match", value=pattern) from None
    except (RecursionError, OverflowError, MemoryError) as exc:   # nested or repeated past what re can compile
        raise InputError(f"a regular expression too large to compile ({type(exc).__name__})", "--match",
                         value=pattern[:60] + ("..." if len(pattern) > 60 else "")) from None
    return gather_stacks(cluster, nodes, {n.name: probe_command(n, match=pattern) for n in nodes}, timeout_s)
