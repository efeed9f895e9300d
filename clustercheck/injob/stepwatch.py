"""The watch while the job trains (`--watch`, `check(watch=True)`, or `watch()` alone): every rank times its
steps at the optimizer's step hook, posts a few numbers to the job's own c10d store once a window, and rank 0
names the rank that makes the job slow (straggler.py judges), once per episode: a line on stderr, the check's
report, the Pushgateway when asked, and under `--watch-on-slow stop` every rank exits 2 at the next window.

What runs on the job's path, per step: a few perf_counter reads and list appends at three hooks (the optimizer's
step, torch's global forward pre-hook, armed at the step and removed at the first forward after it, and the
outermost module's forward hook), and, for a model on the CPU, one perf_counter read at each of its parameters'
post-accumulate-grad hooks: the last of them ends the rank's backward compute, so that a rank whose backward is
slower is told from those that only wait for it in the all-reduce (which DDP runs beside backward and waits for
after it). On a GPU that host time is when kernels were launched, not run: backward is not timed there. Per
window: one store set on every rank (one check and one multi_get more on rank 0), and the counters of the rank's
own TCP sockets read (sockets.py: what each link carried, for links.py's judge of a slowed link). No collective on
the job's stream, no device synchronisation: on a GPU the forward is timed with CUDA events, read once they have
completed (query() does not wait). The push runs in a thread of its own.

The step hook (torch.optim.optimizer.register_optimizer_step_post_hook) is global: it fires for every torch
optimizer, so for DeepSpeed's engine and accelerate's wrapper, which step one. Several optimizers stepping in one
step (no forward between them) count as one step.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import sys
import time
import weakref
from collections import deque
from typing import Any, Deque, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist
from torch.nn.modules.module import register_module_forward_pre_hook
from torch.optim.optimizer import register_optimizer_step_post_hook

from clustercheck.core import threads
from clustercheck.core.errors import EXIT_FAIL
from clustercheck.injob import sockets
from clustercheck.injob.straggler import JOB, Episodes, Event, judge_window
from clustercheck.metrics.build import registry_of
from clustercheck.metrics.export import push

STORE_PREFIX = "clustercheck-watch"
KEPT_WINDOWS = 4      # each rank posts its last few windows: rank 0 judges every window even if it read late
SAY = "clustercheck injob: watch"     # verdict.PREFIX's, without the stages it loads (watch() alone is light)
NUMBERS_ENV = "CLUSTERCHECK_WATCH_NUMBERS"     # a file rank 0 appends every judged window's numbers to
STOP_EXIT = EXIT_FAIL                # verdict.STOP_EXIT: the exit code of a stopped job, under either policy


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class Watch:
    """One rank's watch. install() arms the step hook; stop() removes every hook."""

    def __init__(self, every: int, slower: float, windows: int, on_slow: str, host: str,
                 reports: Optional[Dict[str, str]] = None, pushgateway: Optional[str] = None,
                 report_name: str = "injob"):
        self.every, self.slower, self.on_slow, self.host = every, slower, on_slow, host
        self.reports, self.pushgateway, self.report_name = reports or {}, pushgateway, report_name
        self.episodes = Episodes(windows)
        self.handles: List[Any] = []
        self.armed: Any = None                 # the global forward pre-hook, between a step and its forward
        self.timed: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # module -> on a GPU
        self.top: Any = None                   # the module whose forward is being timed
        self.steps = 0
        self.last_step_at: Optional[float] = None
        self.forward_since_step = False
        self.seen_forward = False
        self.forward_started: Optional[float] = None
        self.forward_ended_at: Optional[float] = None   # host time, a model on the CPU only
        self.last_grad_at: Optional[float] = None       # its last parameter's gradient this step
        self.gpu_pending: Deque[Tuple[Any, Any]] = deque()
        self.periods: List[float] = []
        self.forwards: List[float] = []
        self.betweens: List[float] = []
        self.backwards: List[float] = []
        self.best_step_s = float("inf")
        self.carried: sockets.Counters = {}       # this rank's sockets' counters at the last window
        self.waited: Optional[float] = None       # its training thread's wait for a CPU so far (s), last window
        self.recent: Deque[Dict] = deque(maxlen=KEPT_WINDOWS)
        self.store: Any = None
        self.rank = -1
        self.world_size = 0
        self.history: Dict[int, Dict[int, Dict]] = {}
        self.judged = 0
        self.stop_at: Optional[int] = None
        self.off = False

    # ---- the hooks: what runs on the job's own path -----------------------------------------------------------
    def install(self) -> "Watch":
        self.handles.append(register_optimizer_step_post_hook(self._after_step))
        return self

    def stop(self) -> None:
        for handle in self.handles + [self.armed]:
            if handle is not None:
                handle.remove()
        self.handles, self.armed, self.off = [], None, True

    def _quit(self, exc: BaseException) -> None:
        """The watch is never why a job fails: it says so and stops watching."""
        say(f"{SAY}: stopped watching at step {self.steps}: {type(exc).__name__}: {str(exc)[:200]}")
        self.stop()

    def _after_step(self, optimizer, args, kwargs) -> None:
        try:
            self._step()
        except SystemExit:
            raise                   # --watch-on-slow stop
        except Exception as exc:
            self._quit(exc)

    def _step(self) -> None:
        if self.off or (self.seen_forward and not self.forward_since_step):
            return                  # another optimizer's step in the same step
        now = time.perf_counter()
        if self.last_step_at is not None:
            self.periods.append(now - self.last_step_at)
        if self.forward_ended_at is not None and self.last_grad_at is not None \
                and self.last_grad_at > self.forward_ended_at:
            self.backwards.append(self.last_grad_at - self.forward_ended_at)
        self.forward_ended_at = self.last_grad_at = None
        self.last_step_at = now
        self.forward_since_step = False
        self.steps += 1
        if self.armed is None:
            self.armed = register_module_forward_pre_hook(self._first_forward)
        if self.steps % self.every == 0:
            self._window()

    def _first_forward(self, module, args) -> None:
        try:
            self._forward_starts(module, time.perf_counter())
        except Exception as exc:
            self._quit(exc)

    def _forward_starts(self, module, now: float) -> None:
        self.armed.remove()
        self.armed = None
        self.forward_since_step = self.seen_forward = True
        if self.last_step_at is not None:
            self.betweens.append(now - self.last_step_at)
        if module not in self.timed:
            self.timed[module] = torch.cuda.is_available() and torch.cuda.is_initialized() and _on_gpu(module)
            self.handles.append(module.register_forward_hook(self._forward_done))
            if not self.timed[module]:
                self.handles += [p.register_post_accumulate_grad_hook(self._grad_ready)
                                 for p in module.parameters() if p.requires_grad]
        self.top = module
        if self.timed[module]:
            start = torch.cuda.Event(enable_timing=True)
            start.record()
            self.forward_started = start
        else:
            self.forward_started = now

    def _grad_ready(self, parameter) -> None:
        self.last_grad_at = time.perf_counter()

    def _forward_done(self, module, args, output) -> None:
        try:
            self._forward_ends(module)
        except Exception as exc:
            self._quit(exc)

    def _forward_ends(self, module) -> None:
        if module is not self.top or self.forward_started is None:
            return                  # a later micro-batch's forward, or another module called at the top
        started, self.forward_started, self.top = self.forward_started, None, None
        if isinstance(started, float):
            self.forward_ended_at = time.perf_counter()
            self.forwards.append(self.forward_ended_at - started)
        else:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self.gpu_pending.append((started, end))

    # ---- once a window: the numbers posted, rank 0 judges ------------------------------------------------------
    def _gpu_forwards(self) -> None:
        while self.gpu_pending and self.gpu_pending[0][1].query():
            start, end = self.gpu_pending.popleft()
            self.forwards.append(start.elapsed_time(end) / 1000.0)

    def _attach(self) -> bool:
        if self.store is None and dist.is_available() and dist.is_initialized():
            attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
            self.store = dist.PrefixStore(f"{STORE_PREFIX}/{attempt}", dist.distributed_c10d._get_default_store())
            self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        return self.store is not None

    def _window(self) -> None:
        self._gpu_forwards()
        carried, addrs = sockets.read()
        links, self.carried = sockets.since(carried, self.carried), carried
        waited, self.waited = self.waited, sockets.thread_cpu_wait_s()   # at the step hook: the training thread
        if self.periods:
            numbers = dict(window_numbers(self.periods, self.forwards, self.betweens, self.backwards),
                           window=self.steps // self.every, last_step=self.steps, host=self.host, links=links,
                           addrs=addrs)
            if waited is not None and self.waited is not None:
                numbers["cpu_wait_s"] = max(0.0, self.waited - waited) / len(self.periods)
            self.best_step_s = min(self.best_step_s, numbers["step_s"])
            numbers["best_step_s"] = self.best_step_s
            self.recent.append(numbers)
        self.periods, self.forwards, self.betweens, self.backwards = [], [], [], []
        if not self._attach():
            return                  # no process group (yet): nobody to compare with
        self.store.set(f"rank/{self.rank}", json.dumps({"rank": self.rank, "windows": list(self.recent)}))
        if self.rank == 0:
            self._judge()
        if self.on_slow == "stop":
            self._maybe_stop()

    def _judge(self) -> None:
        keys = [f"rank/{r}" for r in range(self.world_size)]
        if not self.store.check(keys):
            return                  # a rank has not posted its first window yet
        for value in self.store.multi_get(keys):
            posted = json.loads(value.decode("utf-8"))
            for numbers in posted["windows"]:
                if numbers["window"] > self.judged:
                    self.history.setdefault(numbers["window"], {})[posted["rank"]] = numbers
        for window in sorted(self.history):
            ranks = self.history[window]
            if len(ranks) < self.world_size:
                break               # judged in order, once every rank's numbers for it are in
            last_step = max(n["last_step"] for n in ranks.values())
            self._keep(window, ranks)
            for event in self.episodes.feed(judge_window(ranks, self.slower), last_step):
                self._tell(event)
            self.judged = window
            del self.history[window]

    def _keep(self, window: int, ranks: Dict[int, Dict]) -> None:
        """$CLUSTERCHECK_WATCH_NUMBERS=FILE: every judged window's numbers, a JSON line each (why a rank was named,
        or why nobody was)."""
        path = os.environ.get(NUMBERS_ENV)
        if path:
            with open(path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps({"window": window, "ranks": ranks}) + "\n")

    def _tell(self, event: Event) -> None:
        event.line = line_of(event, self.every)
        say(event.line)
        if self.reports:
            add_to_report(self.reports, event)
        if self.pushgateway:
            push_slowdown(self.pushgateway, self.report_name, event)
        # a rank named: stopped, so that the scheduler can replace its node; the whole job slower names no node
        if event.kind == "began" and event.slow.rank != JOB and self.on_slow == "stop" and self.stop_at is None:
            self.stop_at = self.steps + self.every
            self.store.set("stop", json.dumps({"at": self.stop_at, "line": event.line}))

    def _maybe_stop(self) -> None:
        if self.stop_at is None:
            if not self.store.check(["stop"]):
                return
            self.stop_at = json.loads(self.store.get("stop").decode("utf-8"))["at"]
        if self.steps >= self.stop_at:
            say(f"{SAY}: rank {self.rank} stopping at step {self.steps} (--watch-on-slow stop): exit {STOP_EXIT}")
            self.stop()
            sys.exit(STOP_EXIT)


def window_numbers(periods: List[float], forwards: List[float], betweens: List[float],
                   backwards: List[float]) -> Dict[str, float]:
    """A window's numbers: the mean of each time over its steps. The mean, not the median: the job's pace is its
    steps' sum, and a rank that loses its time in bursts (a CPU quota's throttle: frozen 90 ms of every 100 ms,
    one step in five; a data loader that stalls every tenth step; a GPU throttling in periods) has typical steps
    as fast as its peers' while the job waits for it. A one-off (a checkpoint, a collection) is one window's:
    a rank is named only after --watch-windows in a row."""
    def mean(values: List[float]) -> float:
        return statistics.fmean(values) if values else 0.0
    return {"step_s": mean(periods), "forward_s": mean(forwards), "between_s": mean(betweens),
            "backward_s": mean(backwards)}


def _on_gpu(module) -> bool:
    for parameter in module.parameters():
        return parameter.is_cuda
    return False


def line_of(event: Event, every: int) -> str:
    slow = event.slow
    who = "the job" if slow.rank == JOB else f"rank {slow.rank} on {slow.host}"
    if event.kind == "ended":
        return (f"{SAY}: {who} no longer slow at step {slow.last_step} (it was up to {slow.slowdown:.2f}x slower "
                f"from step {event.first_step + 1})")
    if slow.rank == JOB:
        return (f"{SAY}: the job's steps are {slow.slowdown:.2f}x slower than their best since step "
                f"{event.first_step + 1} ({slow.step_s:.3g} s a step vs {slow.reference_s:.3g} s): {slow.how}")
    return (f"{SAY}: rank {slow.rank} on {slow.host} is slowing the job {slow.slowdown:.2f}x since step "
            f"{event.first_step + 1} ({slow.step_s:.3g} s a step, {slow.reference_s:.3g} s without it; named at step "
            f"{slow.last_step}, windows of {every} steps): {slow.how}")


def add_to_report(reports: Dict[str, str], event: Event) -> None:
    """The line under the check's Markdown report, and the event in its JSON's "watch" list (rewritten whole)."""
    slow = event.slow
    try:
        if "markdown" in reports:
            with open(reports["markdown"], "a", encoding="utf-8") as handle:
                handle.write(f"\n## While training (--watch)\n\n{event.line}\n")
        if "json" in reports:
            with open(reports["json"], encoding="utf-8") as handle:
                doc = json.load(handle)
            doc.setdefault("watch", []).append({
                "event": event.kind, "rank": None if slow.rank == JOB else slow.rank, "node": slow.host,
                "slowdown": round(slow.slowdown, 3), "since_step": event.first_step + 1, "step": slow.last_step,
                "line": event.line})
            temporary = reports["json"] + ".tmp"
            with open(temporary, "w", encoding="utf-8") as handle:
                json.dump(doc, handle, indent=1, default=str)
            os.replace(temporary, reports["json"])
    except (OSError, ValueError) as exc:
        say(f"{SAY}: report NOT updated: {exc}")


def push_slowdown(url: str, cluster: str, event: Event) -> None:
    """clustercheck_straggler_slowdown{node, rank} beside the check's metrics (1 once the episode ended), in a
    thread of its own: a gateway that is slow to answer never holds a step."""
    slow = event.slow
    labels = {"node": slow.host, "rank": "" if slow.rank == JOB else str(slow.rank)}
    value = 1.0 if event.kind == "ended" else slow.slowdown

    def send() -> None:
        finding = push(url, registry_of([("clustercheck_straggler_slowdown", labels, value)]), cluster, replace=False)
        if finding.checked:         # a WARN: the gateway did not take it
            say(f"{SAY}: {finding.summary}")

    threads.start(send, "injob-watch-push")


def start(every: int = 20, slower: float = 1.3, windows: int = 2, on_slow: str = "warn", host: str = "",
          reports: Optional[Dict[str, str]] = None, pushgateway: Optional[str] = None,
          report_name: str = "injob") -> Watch:
    """Arm this rank's watch (its process group may come later: the numbers are posted from the first window
    after it exists)."""
    watch = Watch(every, slower, windows, on_slow, host or os.environ.get("CLUSTERCHECK_NODE") or socket.gethostname(),
                  reports, pushgateway, report_name)
    return watch.install()
