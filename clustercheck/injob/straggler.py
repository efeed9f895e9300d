"""The judge of the watch while the job trains (`--watch`): from every rank's numbers over one window of steps,
which rank makes the job slow, by how much, and whether it computes slower or waits; and the episodes (a rank
named over K windows in a row, then no longer) so that each is said once. Pure: numbers in, findings out.

What a rank times, with the host's clock at hooks (stepwatch.py), never a device synchronisation:
- step_s: from one optimizer step to the next (everything);
- forward_s: its model's forward (the outermost module called after the step; on a GPU, CUDA events on its
  stream, read once they completed); no collective runs there in data-parallel training;
- between_s: from the optimizer's step to the next forward (data loading, the script's own work);
- cpu_wait_s: its training thread's wait for a CPU over the step (the kernel's runqueue wait): a
  cgroup's quota throttling the rank, or another process on its cores, shows here wherever in the step it lands;
- backward_s (a model on the CPU only, else 0): from the forward's end to its last parameter's gradient, the
  backward's compute. DDP's all-reduce runs beside it and is waited for after it, so a rank waiting for a peer
  shows it after its backward, not in it. On a GPU the host sees only kernel launches: not timed, and a slower
  backward there is the job's, named on no rank.

How the slow rank is told from those that wait for it: in a job whose ranks meet in a collective every step,
every rank's step takes as long as the slowest one's, so step time alone names nobody (or everybody). What
differs is the work outside collectives: the slow rank's forward or between-steps time is longer than its
peers' by what the step lost; the others spend that time waiting inside the all-reduce. So a rank's extra own
work (its forward and between-steps beyond its peers' medians) says how much faster the job would step without
it: slowdown = step / (step - extra). Ranks that do not wait for each other (no collective per step) differ
in step time itself: a rank whose steps take longer than its peers' median is named from step time alone, and
the line says it cannot tell computing from waiting. Either way a rank's extra counts only where it stands out of
its peers' own spread (SPREAD), so that a loaded host's drift names nobody. A job whose every step is slower than
its best while no rank's own work is (the network, or on a GPU one rank's backward, which cannot be told from
waiting there) is said without naming a rank; where the ranks' own sockets carry the job's traffic (Gloo, NCCL's
socket transport), the node's link or the link that moves it far slower than the others is named (links.py).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Dict, Hashable, List, Mapping, Sequence

from clustercheck.injob.links import slow_link

JOB = -1     # the key of a slowdown of the whole job, named on no rank
MAX_SLOWDOWN = 1000.0
# A rank (or the job) is named only when it loses at least this much a step: a busy host's scheduler delays a
# process by a few milliseconds at a time (its time slices), whatever the job does, so a 2 ms step 1.5x slower
# for a window says nothing of the rank (seen: a clean job of 1 ms steps on a loaded 2-core host named a rank
# 1.46x slower, 0.6 ms a step). A straggler worth a line costs more than that: 1.3x of a 100 ms step is 30 ms.
NOISE_S = 0.005
# A rank stands out of its peers only beyond this many of their own spread (the median absolute deviation of
# their numbers from their median, scaled to a normal's sigma): on a loaded host every rank's forward drifts by
# tens of percent as the scheduler shares the cores, and a healthy rank 1.36x its peers' median for two windows
# was within that drift (seen on the sandbox: 6 ranks on 2 cores, a CPU quota on another node's ranks). A rank
# slowed for real (a throttled node, a slow GPU) is many spreads out; peers that agree closely guard nothing.
SPREAD = 3.0
MAD_SIGMA = 1.4826
# A rank's training thread's wait for a CPU counts where it is a share of its step (CPU_SHARE, as bench's STARVED)
# and CPU_RATIO times its peers' at least, beyond their spread: on a loaded host every rank waits, and by turns
# (seen: a healthy rank at 2.3x its peers' wait named, with the wait summed over its threads). A rank under a
# cgroup's CPU quota waits most of its step, tens of times its peers.
CPU_SHARE = 0.25
CPU_RATIO = 4.0


@dataclass
class Slow:
    rank: int                 # JOB for the whole job
    host: str
    slowdown: float           # how much longer the job's steps take because of it (1.3 = 30% slower)
    how: str                  # computing slower, slower between steps, step time only, or waiting
    step_s: float
    reference_s: float        # what a step would take without it (its peers' step, or the job's best)
    last_step: int


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else 0.0


def _beyond(mine: float, theirs: Sequence[float]) -> float:
    """How far `mine` is above the median of `theirs`, or 0.0 where that is within their own spread."""
    middle = _median(theirs)
    spread = MAD_SIGMA * _median([abs(v - middle) for v in theirs]) if len(theirs) > 2 else 0.0
    return mine - middle if mine - middle > SPREAD * spread else 0.0


def _cpu_extra(me: Mapping, peers: Sequence[Mapping]) -> float:
    """What the rank's training thread waited for a CPU a step beyond its peers' (0 where that says nothing)."""
    mine, theirs = me.get("cpu_wait_s", 0.0), [p.get("cpu_wait_s", 0.0) for p in peers]
    if mine < CPU_SHARE * me["step_s"] or mine < CPU_RATIO * _median(theirs):
        return 0.0
    return min(_beyond(mine, theirs), 0.95 * me["step_s"])


def judge_window(window: Mapping[int, Mapping], slower: float) -> List[Slow]:
    """The ranks (or the job) slower than `slower` over one window: {rank: that rank's numbers for it}."""
    ranks = sorted(window)
    named: List[Slow] = []
    for rank in ranks:
        me = window[rank]
        peers = [window[p] for p in ranks if p != rank]
        if not peers or me["step_s"] <= 0:
            continue
        peer_step = _median([p["step_s"] for p in peers])
        peer_forward = _median([p["forward_s"] for p in peers])
        peer_between = _median([p["between_s"] for p in peers])
        peer_backward = _median([p.get("backward_s", 0.0) for p in peers])
        extra_forward = _beyond(me["forward_s"], [p["forward_s"] for p in peers])
        extra_between = _beyond(me["between_s"], [p["between_s"] for p in peers])
        extra_backward = (_beyond(me.get("backward_s", 0.0), [p.get("backward_s", 0.0) for p in peers])
                          if peer_backward > 0 else 0.0)
        # its training thread's wait for a CPU (the kernel's runqueue wait, a cgroup quota's throttling included)
        # beyond its peers': that wait lies inside its forward, backward or collectives, so it is not added to them
        extra_cpu = _cpu_extra(me, peers)
        own = extra_forward + extra_between + extra_backward
        without = me["step_s"] - max(own, extra_cpu)
        explained = min(MAX_SLOWDOWN, me["step_s"] / without) if without > 0 else MAX_SLOWDOWN
        behind = ((peer_step + _beyond(me["step_s"], [p["step_s"] for p in peers])) / peer_step
                  if peer_step > 0 else 1.0)
        if max(explained, behind) < slower:
            continue
        if me["step_s"] - (without if explained >= behind else peer_step) < NOISE_S:
            continue        # slower by less than a busy host's scheduling delays: nothing to name
        if explained >= behind:
            if extra_cpu > own:
                peer_cpu = _median([p.get("cpu_wait_s", 0.0) for p in peers])
                how = (f"its CPUs are taken: its training thread waited {me['cpu_wait_s']:.3g} s a step for a CPU "
                       f"(its peers {peer_cpu:.3g} s), a cgroup's CPU quota, another process or more ranks than cores "
                       f"on its node; the other ranks wait for it in collectives")
            elif extra_backward > max(extra_forward, extra_between):
                ratio = me["backward_s"] / peer_backward
                how = (f"computing slower: its backward takes {ratio:.1f}x its peers' ({me['backward_s']:.3g} s vs "
                       f"{peer_backward:.3g} s); the other ranks wait for it in collectives")
            elif extra_forward >= extra_between:
                ratio = me["forward_s"] / peer_forward if peer_forward > 0 else MAX_SLOWDOWN
                how = (f"computing slower: its forward takes {ratio:.1f}x its peers' ({me['forward_s']:.3g} s vs "
                       f"{peer_forward:.3g} s); the other ranks wait for it in collectives")
            else:
                how = (f"slower between steps (data loading, or the script's own work outside forward and backward): "
                       f"{me['between_s']:.3g} s a step vs its peers' {peer_between:.3g} s; the other ranks wait "
                       f"for it in collectives")
            named.append(Slow(rank, me["host"], explained, how, me["step_s"], without, me["last_step"]))
        else:
            how = ("its steps take longer than its peers' and they do not wait for it (step time only: computing "
                   "and waiting are not told apart)")
            named.append(Slow(rank, me["host"], behind, how, me["step_s"], peer_step, me["last_step"]))
    if named or not ranks:
        return sorted(named, key=lambda s: -s.slowdown)
    step = _median([window[r]["step_s"] for r in ranks])
    best = _median([window[r]["best_step_s"] for r in ranks])
    if best > 0 and step / best >= slower and step - best >= NOISE_S:
        link = slow_link(window)
        if link is not None and not _cpus_taken(window, link.nodes):
            how = (f"the network: {link.summary} (the TCP counters of the ranks' own sockets); every rank only "
                   f"waits for it in collectives: {link.remedy}")
            return [Slow(JOB, ", ".join(link.nodes), step / best, how, step, best,
                         max(window[r]["last_step"] for r in ranks))]
        how = ("every rank's steps are slower than their best and no rank's own work (forward, between steps) is: "
               "the time goes into backward or collectives (the network, or on a GPU one rank's backward, which "
               "cannot be told from waiting without the Flight Recorder)")
        return [Slow(JOB, "", step / best, how, step, best, max(window[r]["last_step"] for r in ranks))]
    return []


def _cpus_taken(window: Mapping[int, Mapping], nodes: Sequence[str]) -> bool:
    """Whether a rank on these nodes waited for a CPU beyond the other nodes' ranks (NOISE_S a step at least): on
    a veth, as on a host whose cores also run its network's interrupts, a node's throttled CPUs slow its sockets
    too, and its link would be blamed for its CPUs."""
    others = [n.get("cpu_wait_s", 0.0) for n in window.values() if n["host"] not in nodes]
    return any(n.get("cpu_wait_s", 0.0) >= NOISE_S and _beyond(n.get("cpu_wait_s", 0.0), others) > 0
               and n.get("cpu_wait_s", 0.0) >= 2 * _median(others) for n in window.values() if n["host"] in nodes)


@dataclass
class Event:
    kind: str                 # "began" or "ended"
    slow: Slow
    first_step: int           # the last step of the window before the episode's first (the steps after it)
    line: str = ""


@dataclass
class Episodes:
    """A rank (or the job) named in `windows` judged windows in a row begins an episode, said once; not named
    in `windows` in a row ends it, said once. The job's episodes are kept by what they name (no node, a node's
    link, a link): a job slower for a loaded host's drift, then for a link slowed, says the link when it comes."""

    windows: int
    streak: Dict[Hashable, List[Slow]] = field(default_factory=dict)
    started: Dict[Hashable, int] = field(default_factory=dict)     # the step its streak started after
    quiet: Dict[Hashable, int] = field(default_factory=dict)
    open: Dict[Hashable, Event] = field(default_factory=dict)
    before: int = 0           # the last step of the window before the one fed

    def feed(self, slows: Sequence[Slow], last_step: int) -> List[Event]:
        """One judged window's slowdowns (judge_window), ending at `last_step`: the episodes begun or ended."""
        events: List[Event] = []
        named = {(s.rank if s.rank != JOB else (JOB, s.host)): s for s in slows}
        for key, slow in named.items():
            streak = self.streak.setdefault(key, [])
            if not streak:
                self.started[key] = self.before
            streak.append(slow)
            self.quiet[key] = 0
            if key not in self.open and len(streak) >= self.windows:
                typical = statistics.median(s.slowdown for s in streak[-self.windows:])
                shown = Slow(slow.rank, slow.host, typical, slow.how, slow.step_s, slow.reference_s, slow.last_step)
                self.open[key] = Event("began", shown, self.started[key])
                events.append(self.open[key])
        for key in [k for k in self.streak if k not in named]:
            if key not in self.open:
                del self.streak[key]
                continue
            self.quiet[key] += 1
            if self.quiet[key] >= self.windows:
                began = self.open.pop(key)
                worst = max(s.slowdown for s in self.streak.pop(key))
                events.append(Event("ended", Slow(began.slow.rank, began.slow.host, worst, began.slow.how, 0.0, 0.0,
                                                  last_step),
                                    began.first_step))
        self.before = last_step
        return events
