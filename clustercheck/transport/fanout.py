"""Fan-out: run the same step on every node, bounded in concurrency and in time.

Every node yields a NodeResult, successes and failures side by side; one dead node
never stops or stalls the rest. Connections are opened once per node and reused for
every step of a run. Closing the Cluster (also on Ctrl-C) closes every channel, which
kills whatever still runs on the nodes, and removes the files shipped there.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence

from clustercheck.core import threads
from clustercheck.core.errors import EXIT_UNKNOWN
from clustercheck.core.inventory import Node
from clustercheck.core import progress
from clustercheck.transport.base import NodeResult, Outcome, Transport, TransportError
from clustercheck.transport.local import LocalTransport
from clustercheck.transport.srun import SrunTransport
from clustercheck.transport.ssh import SSHTransport
from clustercheck.transport.sshconfig import SSHSettings
from clustercheck.transport.sshconnect import SSHContext

DEFAULT_FANOUT = 64            # as ClusterShell


@dataclass
class FanoutOptions:
    fanout: int = DEFAULT_FANOUT
    ssh: SSHSettings = None
    session: bool = True     # one loop per node for every command (agent.py); False: one exec per command
    srun_job: Optional[str] = None   # reach the nodes through job steps of this Slurm allocation, not SSH

    def __post_init__(self):
        if self.ssh is None:
            self.ssh = SSHSettings()


def parallel_map(func: Callable, items: Sequence, workers: int) -> List:
    """func over items with at most `workers` threads; results in input order.

    Every item is tried, whatever another raised; once all are done, the first exception
    (in input order) is raised here. Daemon threads, so that Ctrl-C in the main thread is
    never held up by a worker blocked in a connect (each of which has its own deadline). Stopped
    (core/threads.stop_all) while waiting: threads.Stopped, the items in hand left to their deadlines.
    """
    results: List = [None] * len(items)
    errors: Dict[int, BaseException] = {}
    todo: "queue.Queue[int]" = queue.Queue()
    for index in range(len(items)):
        todo.put(index)
    done = threading.Semaphore(0)
    stopping = threading.Event()     # the run is stopped: take no new item (the one in hand has its deadline)

    def worker():
        while not stopping.is_set():
            try:
                index = todo.get_nowait()
            except queue.Empty:
                return
            try:
                results[index] = func(items[index])
            except BaseException as exc:  # noqa: B036 - a worker must never die with items left
                errors[index] = exc
            finally:
                done.release()

    for _ in range(max(1, min(workers, len(items)))):
        threads.start(worker, "clustercheck-fanout", stop=stopping.set)
    remaining = len(items)
    while remaining:
        if done.acquire(timeout=0.2):    # wake up now and then so Ctrl-C is seen
            remaining -= 1
        elif stopping.is_set():          # stopped: the items never taken will never be done
            raise threads.Stopped(f"stopped with {remaining} of {len(items)} items not done")
    if errors:
        raise errors[min(errors)]
    return results


class Cluster:
    """Connections to the nodes of an inventory; use as a context manager."""

    def __init__(self, nodes: Sequence[Node], options: Optional[FanoutOptions] = None):
        self.nodes = list(nodes)
        self.options = options or FanoutOptions()
        self._ssh: Optional[SSHContext] = None
        self.transports: Dict[str, Transport] = {}
        self.unreachable: Dict[str, NodeResult] = {}
        for node in self.nodes:
            self.transports[node.name] = self._make_transport(node)

    def _make_transport(self, node: Node) -> Transport:
        if self.options.srun_job:
            return SrunTransport(node.name, self.options.srun_job, session=self.options.session)
        if node.is_local:
            return LocalTransport(node.name, session=self.options.session)
        if self._ssh is None:
            self._ssh = SSHContext(self.options.ssh)
        return SSHTransport(self._ssh, node.name, user=node.user, port=node.port, session=self.options.session,
                            alias=node.address)

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _connect(self, node: Node) -> Optional[NodeResult]:
        if node.name in self.unreachable:
            return self.unreachable[node.name]
        start = time.monotonic()
        try:
            self.transports[node.name].connect()
        except TransportError as exc:
            result = NodeResult(node.name, exc.outcome, detail=exc.detail, elapsed_s=time.monotonic() - start)
            self.unreachable[node.name] = result
            return result
        return None

    def connect(self) -> Dict[str, NodeResult]:
        """Connect to every node; returns the failures by node name."""
        failures = parallel_map(self._connect, self.nodes, self.options.fanout)
        return {r.node: r for r in failures if r is not None}

    def each(self, step: Callable[[Transport, Node], NodeResult], nodes: Optional[Sequence[Node]] = None,
             what: str = "a command on the nodes") -> List[NodeResult]:
        """Run step(transport, node) on every reachable node; unreachable ones keep their outcome. `what` is the
        step's name in the run's progress, which counts the nodes as they answer."""
        beat = progress.current()

        def one(node: Node) -> NodeResult:
            try:
                return self._one(step, node)
            finally:
                beat.answered()

        todo = list(self.nodes if nodes is None else nodes)
        beat.step(what, len(todo))
        return parallel_map(one, todo, self.options.fanout)

    def _one(self, step: Callable[[Transport, Node], NodeResult], node: Node) -> NodeResult:
        failed = self._connect(node)
        if failed is not None:
            return failed
        start = time.monotonic()
        try:
            return step(self.transports[node.name], node)
        except TransportError as exc:
            return NodeResult(node.name, exc.outcome, detail=exc.detail, elapsed_s=time.monotonic() - start)
        except Exception as exc:  # a bug or a surprise on one node is that node's outcome, not a hang
            return NodeResult(node.name, Outcome.TOOL_ERROR, detail=f"{type(exc).__name__}: {exc}",
                              elapsed_s=time.monotonic() - start)

    def run(self, command: str, timeout_s: float, nodes: Optional[Sequence[Node]] = None,
            what: str = "a command on the nodes") -> List[NodeResult]:
        """The same shell command on every node, each under its own deadline."""
        return self.each(lambda transport, node: transport.run(command, timeout_s), nodes, what)

    def close(self) -> None:
        parallel_map(_close_quietly, list(self.transports.values()), self.options.fanout)
        if self._ssh is not None:
            self._ssh.close()


def _close_quietly(transport: Transport) -> None:
    """Closing is best effort: the guards on the nodes kill what runs once the connection is gone."""
    try:
        transport.close()
    except Exception:  # noqa: BLE001
        pass


def worst_exit_code(results: Sequence[NodeResult]) -> int:
    """`run`'s code, pdsh's order (a node not reached, 3, outranks a command that failed, 2); no result is no pass."""
    return max((r.outcome.exit_code for r in results), default=EXIT_UNKNOWN)


def count_by_outcome(results: Sequence[NodeResult]) -> Dict[Outcome, int]:
    counts: Dict[Outcome, int] = {}
    for result in results:
        counts[result.outcome] = counts.get(result.outcome, 0) + 1
    return counts
