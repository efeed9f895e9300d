"""Start a Python script with torchrun on every node at once and follow what its ranks print.

Used by `bench` (its worker) and `smoke` (the reference trainer); it reads the node layer's facts
(interpreter, training interface, GPUs), never another stage's. Each node runs
`python -m torch.distributed.run` with c10d rendezvous at the first node; the script's
ranks print JSON lines on stdout, which come back as events while the run goes on.
Every launch has one deadline. At the deadline, on Ctrl-C, or when the tool dies, the
channels close and the guards kill torchrun, whose process group goes with it; the
scripts also ask the kernel to kill them when torchrun dies (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import threading
import time
import uuid
from typing import Callable, Dict, Optional, Sequence, Tuple

from clustercheck.core import threads
from clustercheck.core.inventory import Node
from clustercheck.core.progress import current as current_progress
from clustercheck.node.facts import Probed, interpreter
from clustercheck.onnode import source
from clustercheck.ranks.forensics import Forensics, judge_stacks
from clustercheck.ranks.nccl_capture import has_diagnostics, nccl_version, plan_capture, read_captured
from clustercheck.ranks.runs import Launch, RanksRun, NodeRun, telling_line
from clustercheck.ranks.ras_gather import ras_findings
from clustercheck.ranks.stack_gather import gather_stacks, probe_command
from clustercheck.transport.base import Running, TransportError
from clustercheck.transport.fanout import Cluster

FAILURE_GRACE_S = 15.0
PROGRESS_EVENTS = ("step", "tick", "row", "round", "pair", "resumed")   # a rank moved on: the stall window starts again
PAUSE_EVENTS = ("saving", "compiling")    # long and legitimately silent: no stall until the next progress
FORENSICS_TIMEOUT_S = 25.0
FLIGHT_RECORDER = {"TORCH_FR_BUFFER_SIZE": "2000", "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
                   "TORCH_NCCL_DUMP_ON_TIMEOUT": "1"}
LOCK_RECORDS = "build-locks"   # in the run directory: the build locks the ranks hold (onnode/buildlocks.py)


def forwarded_env() -> Dict[str, str]:
    """NCCL_* set where the tool runs travel to every node (they override the nodes' own)."""
    return {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}


def hang_directory(launch: Launch, node: str) -> str:
    """Where the ranks' hang hook answers (clustercheck/onnode/hang.py): hang/ in the node's run directory."""
    return os.path.join(os.path.dirname(launch.script_paths[node]), "hang")


def launch_env(node: Node, launch: Launch, ifname: Optional[str], run_id: str) -> Dict[str, str]:
    """The ranks' environment on this node: the run's tags and hooks, the NCCL_* of the tool's own
    environment, the launch's settings, the training interface."""
    hang_dir = hang_directory(launch, node.name)
    records = os.path.join(os.path.dirname(launch.script_paths[node.name]), LOCK_RECORDS)
    env = {"CLUSTERCHECK_NODE": node.name, "CLUSTERCHECK_RUN": run_tag(run_id, node), "OMP_NUM_THREADS": "1",
           "CLUSTERCHECK_LOCK_RECORDS": records,
           **FLIGHT_RECORDER, "CLUSTERCHECK_HANG_DIR": hang_dir,
           "TORCH_FR_DUMP_TEMP_FILE": os.path.join(hang_dir, "flight_recorder_rank_"), **forwarded_env(), **launch.env}
    if ifname:
        env.setdefault("GLOO_SOCKET_IFNAME", ifname)
        env.setdefault("NCCL_SOCKET_IFNAME", ifname)
    return env


def env_file(env: Dict[str, str]) -> bytes:
    """The environment as a file the node's shell sources: values travel in a file only the user can read
    (the run directory, mode 0600), never on a command line that `ps` shows to every user."""
    return "".join(f"export {key}={shlex.quote(value)}\n" for key, value in sorted(env.items())).encode()


def run_tag(run_id: str, node: Node) -> str:
    return f"{run_id}.{node.name}"   # per node: the sandbox's nodes share one process table


def rendezvous_endpoint(node: Node, nnodes: int, master: str, port: int) -> str:
    """Across nodes, the port net tested on the master. A run on this machine alone rendezvous on a port its own
    agent binds (`localhost:0`, as torchrun --standalone): two checks on one machine at once, or a job holding the
    port, never meet in one rendezvous (seen: two local preflights at once, the second's ranks failed to start)."""
    return "localhost:0" if nnodes == 1 and node.is_local else f"{master}:{port}"


def torchrun_command(node: Node, launch: Launch, nnodes: int, master: str, run_id: str, env_path: str) -> str:
    tag = run_tag(run_id, node)
    script = launch.script_paths[node.name]
    argv = [interpreter(node), "-m", "torch.distributed.run",
            f"--nnodes={nnodes}", f"--nproc-per-node={launch.nproc[node.name]}", "--rdzv-backend=c10d",
            f"--rdzv-endpoint={rendezvous_endpoint(node, nnodes, master, launch.rdzv_port)}", f"--rdzv-id={run_id}",
            # read_timeout: the store's own deadline (default 60 s) fails agents that start slowly on a busy host
            f"--rdzv-conf=join_timeout={int(launch.timeout_s)},read_timeout={int(launch.timeout_s)}",
            "--max-restarts=0", "--monitor-interval=1",
            script, *launch.args]
    # torchrun starts its workers in sessions of their own, out of reach of the guard's group kill.
    # Every process of this run carries CLUSTERCHECK_RUN in its environment: whatever still has it
    # when torchrun ends (or is stopped) is killed, found through /proc by the node's own python.
    sweep = " ".join(shlex.quote(a) for a in (source("sweep.py").decode(), f"CLUSTERCHECK_RUN={tag}",
                                              os.path.join(os.path.dirname(script), LOCK_RECORDS)))
    return (f"cd {shlex.quote(os.path.dirname(script))} || exit 1; . {shlex.quote(env_path)} || exit 1; "
            f"sweep() {{ {shlex.quote(interpreter(node))} -c {sweep} >/dev/null 2>&1; }}; "
            "trap 'sweep; exit 143' TERM INT HUP; " + " ".join(shlex.quote(a) for a in argv)
            + " & pid=$!; wait $pid; rc=$?; sweep; exit $rc")


def start_window(stall_s: float) -> float:
    """How long ranks may stay silent from their start (imports, rendezvous, process groups, the model)
    before that silence is a hang: twice the stall window, at least a minute."""
    return max(2 * stall_s, 60.0)


class StallClock:
    """When the ranks last made progress, the longest gap seen, and whether the quiet now is a stall."""

    def __init__(self, launch: Launch):
        self.launch = launch
        self.started = time.monotonic()
        self.last: Optional[float] = None
        self.paused = False
        self.longest = 0.0

    def moved(self, kind) -> None:
        now = time.monotonic()
        if kind in PROGRESS_EVENTS:
            if self.last is not None and not self.paused:
                self.longest = max(self.longest, now - self.last)
            self.last, self.paused = now, False
        elif kind in PAUSE_EVENTS:
            self.paused = True
        else:   # a sign of life (the run started, a model was read): the quiet starts again
            self.last = now

    def stalled(self) -> Optional[float]:
        """Seconds without progress once past the window (3x the longest gap seen, if longer), else None."""
        launch = self.launch
        if not launch.stall_s or self.paused:
            return None
        if self.last is None:   # not one word since the start: stuck at rendezvous, set-up or a lock
            quiet = time.monotonic() - self.started
            return quiet if quiet > start_window(launch.stall_s) else None
        quiet = time.monotonic() - self.last
        window = max(launch.stall_s, 3 * self.longest)
        window = min(window, max(launch.stall_s, launch.stall_cap_s)) if launch.stall_cap_s else window
        return quiet if quiet > window else None


_DECODER = json.JSONDecoder()


def event_of(line: str) -> Tuple[Optional[Dict], str]:
    """The event a line starts with, and the text after it (or None and the whole line). Another rank's output can
    follow an event on its line: a rank that prints under PYTHONUNBUFFERED=1 (common in containers and batch
    scripts) writes the object and its newline in two writes, and another process's line may come between."""
    text = line.lstrip()
    if not text.startswith("{"):
        return None, line
    try:
        event, end = _DECODER.raw_decode(text)
    except ValueError:
        return None, line
    return (event, text[end:]) if isinstance(event, dict) else (None, line)


def follow(run: NodeRun, handle: Running, deadline: float, started: float, halt: threading.Event,
           clock: StallClock, progress: Optional[Callable[[str, Dict], None]]) -> None:
    """One node's events as they come, until its torchrun ends, the deadline passes or the tool halts."""
    while time.monotonic() < deadline and not halt.is_set():
        line = handle.readline(min(1.0, max(0.0, deadline - time.monotonic())))
        if line is not None:
            event, rest = event_of(line)
            if "NCCL DIAG" in rest and len(run.diag) < 1000:
                run.diag.append(rest.rstrip("\n"))
            if event is not None:
                run.events.append(event)
                clock.moved(event.get("event"))
                current_progress().hear(f"{event.get('event')} from {run.node}")
                if progress:
                    progress(run.node, event)
            continue
        code = handle.wait(0.05)
        if code is not None and not halt.is_set():   # once halted, an end is the tool's doing
            run.exit_code, run.ended_s = code, time.monotonic() - started
            run.lost = code == -1 and handle.lost
            current_progress().answered()
            return


def watch(runs: Dict[str, NodeRun], followers: Sequence[threading.Thread], clock: StallClock,
          started: float) -> Optional[float]:
    """Until every node ended: None, or the seconds of quiet once the run stalled. Once a node has failed,
    the others get FAILURE_GRACE_S to fail too (with their own error lines); ranks still waiting on the
    dead one would otherwise hang until the deadline."""
    while any(thread.is_alive() for thread in followers):
        failed = [r.ended_s for r in runs.values() if r.exit_code not in (0, None) and r.ended_s is not None]
        if failed and time.monotonic() - started > min(failed) + FAILURE_GRACE_S:
            for run in runs.values():
                run.cut_short = run.exit_code is None
            return None
        stalled_s = None if failed else clock.stalled()   # a failure is judged as one, never as a hang
        if stalled_s is not None:
            return stalled_s
        time.sleep(0.2)
    return None


def start_all(cluster: Cluster, nodes: Sequence[Node], probed: Sequence[Probed], launch: Launch, run_id: str,
              runs: Dict[str, NodeRun]) -> Dict[str, Running]:
    """torchrun started on every node; a node where it could not start is recorded as lost."""
    handles: Dict[str, Running] = {}
    ifnames = {p.name: p.ifname for p in probed if p.facts}
    for node in nodes:
        transport = cluster.transports[node.name]
        try:
            env_path = transport.put(env_file(launch_env(node, launch, ifnames.get(node.name), run_id)),
                                     f"{launch.name}.env")
            handles[node.name] = transport.start(
                torchrun_command(node, launch, len(nodes), nodes[0].address, run_id, env_path))
        except TransportError as exc:
            run = runs[node.name]
            run.error, run.lost, run.exit_code, run.ended_s = exc.detail, True, -1, 0.0
    return handles


def collect(runs: Dict[str, NodeRun], handles: Dict[str, Running]) -> None:
    """Every node's stderr (its head and last megabytes), and the telling line of a run that failed."""
    for node_name, handle in handles.items():
        run = runs[node_name]
        run.stderr = handle.stop()
        tail = run.stderr.strip().splitlines()
        run.stderr_tail = tail[-40:]
        if run.exit_code != 0:
            run.error = run.error or telling_line(tail)


def run_torchrun(cluster: Cluster, nodes: Sequence[Node], probed: Sequence[Probed], launch: Launch,
                 progress: Optional[Callable[[str, Dict], None]] = None) -> RanksRun:
    """torchrun on every node of `nodes` at once; returns when all ended or the deadline passed."""
    run_id = f"clustercheck-{uuid.uuid4().hex[:10]}"
    runs = {n.name: NodeRun(n.name) for n in nodes}
    capture = plan_capture(forwarded_env(), launch.keep_logs,
                           has_diagnostics([nccl_version(p.facts) for p in probed if p.name in runs])) \
        if launch.capture_nccl else None
    if capture is not None:
        launch = dataclasses.replace(launch, env={**capture.env, **launch.env})
    started = time.monotonic()
    what = "ranks" if launch.name == "torchrun" else f"{launch.name} ranks"
    current_progress().step(f"starting the {what} on every node", len(nodes))
    handles = start_all(cluster, nodes, probed, launch, run_id, runs)
    current_progress().step(f"the {what} run under torchrun", len(nodes), counted="ended")
    clock = StallClock(launch)
    halt = threading.Event()   # stalled or stopping: what ends now is the tool's doing, not the run's
    followers = [threads.start(follow, f"clustercheck-follow-{n.name}", stop=halt.set, args=(
        runs[n.name], handles[n.name], started + launch.timeout_s, started, halt, clock, progress))
        for n in nodes if n.name in handles]
    stalled_s = forensics = None
    try:
        stalled_s = watch(runs, followers, clock, started)
        if stalled_s is not None:
            halt.set()
        hung = [n for n in nodes if n.name in handles and runs[n.name].exit_code is None
                and not runs[n.name].cut_short]
        if hung:   # stalled, or still running at the deadline: before anything is killed, where is each rank?
            if progress:
                progress(hung[0].name, {"event": "stalled", "quiet_s": stalled_s, "nodes": [n.name for n in hung]})
            forensics = take_forensics(cluster, hung, launch, run_id, sum(launch.nproc[n.name] for n in hung))
    finally:
        halt.set()   # what ends from here on was stopped by the tool: not the run's own exit code
        for thread in followers:
            thread.join(timeout=2.0)
        collect(runs, handles)
        if capture is not None:
            run_dirs = {n: os.path.dirname(path) for n, path in launch.script_paths.items()}
            capture = read_captured(cluster, [n for n in nodes if n.name in handles], run_dirs, capture, runs,
                                    forwarded_env())
    launched = {"launcher": launcher_of(cluster, nodes)}
    return RanksRun(launch.name, runs, time.monotonic() - started, {**launch.config, **launched}, stalled_s,
                        forensics, capture)


def launcher_of(cluster: Cluster, nodes: Sequence[Node]) -> str:
    """How torchrun reached the nodes: srun, ssh or local (several: joined with +)."""
    return "+".join(sorted({cluster.transports[n.name].kind for n in nodes}))


def take_forensics(cluster: Cluster, nodes: Sequence[Node], launch: Launch, run_id: str, ranks: int) -> Forensics:
    """Every rank's stack, state and last collective on these nodes, judged: which ranks are odd."""
    commands = {n.name: probe_command(n, tag=f"{run_id}.{n.name}", wait_s=3.0,
                                      hang_dir=hang_directory(launch, n.name))
                for n in nodes}
    try:
        stacks, unreached = gather_stacks(cluster, nodes, commands, FORENSICS_TIMEOUT_S)
    except Exception as exc:   # the verdict stands without the stacks; never a traceback instead of it
        return Forensics(f"the ranks' stacks could not be taken ({type(exc).__name__}: {exc})")
    found = judge_stacks(stacks, unreached, ranks)
    try:                       # NCCL's RAS beside the stacks: the dead or missing ranks, the collective they disagree on
        found.ras = ras_findings(cluster, nodes, hung=True)
    except Exception:          # noqa: BLE001 - RAS is a supplement; the stacks' verdict stands without it
        found.ras = []
    return found


def ship(cluster: Cluster, nodes: Sequence[Node], files: Dict[str, bytes],
         problems: Dict[str, str]) -> Dict[str, Dict[str, str]]:
    """Put files into every node's run directory: node -> {name: path}; a node that failed goes into problems."""
    placed: Dict[str, Dict[str, str]] = {}
    for node in nodes:
        try:
            placed[node.name] = {name: cluster.transports[node.name].put(data, name) for name, data in files.items()}
        except TransportError as exc:
            problems[node.name] = f"cannot write {', '.join(files)} into its run directory: {exc.detail}"
    return placed
