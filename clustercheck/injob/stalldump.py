"""The Flight Recorder on in the job, and each rank's record written when the job stops making progress.

- `turn_on(env)`, before any process group of the job or the check exists (torch's recorder reads
  TORCH_FR_BUFFER_SIZE when the first process group is made): where the user set neither TORCH_FR_BUFFER_SIZE nor
  TORCH_NCCL_TRACE_BUFFER_SIZE (0 included: a choice), 2,000 entries per rank, as docs/guides/flight-recorder.md
  advises. Without it a hung job's ranks hold no record of their collectives to read.
- `StallDump`: a thread of its own on each rank (no collective, no device synchronisation): the optimizer's step
  hook stamps the time of each step; once no step came for `after_s` (from the start of the watch or the last
  step), the rank writes torch's own pickle of its record (`_dump_fr_trace()`: the collectives, their sequence
  numbers, sizes, states and the Python frames at each call) to DIR/<prefix><rank>, the name torch's dump on
  timeout has, and local rank 0 says so in one line: `clustercheck explain DIR` then names the collective some
  ranks never entered, those ranks and their nodes. Once per stall: a step after it re-arms the dump.
- `answer_stacks()`: the rank's hang hook, so that `clustercheck stacks --match train.py` on a live job gets
  each rank's record beside its stack, and names the same.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Callable, Mapping, MutableMapping, Optional

from torch.optim.optimizer import register_optimizer_step_post_hook

from clustercheck.core import threads
from clustercheck.flight.formats import DEFAULT_PREFIX
from clustercheck.onnode import hang
from clustercheck.onnode.nodelib import job_hook_directory, safe_name

BUFFER_VARIABLES = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
ENTRIES = "2000"
SAY = "clustercheck injob"


def turn_on(env: MutableMapping[str, str]) -> Optional[str]:
    """TORCH_FR_BUFFER_SIZE set where the user set no recorder size; the line saying so, or None."""
    if any(name in env for name in BUFFER_VARIABLES):
        return None
    env["TORCH_FR_BUFFER_SIZE"] = ENTRIES
    return f"the Flight Recorder is on (TORCH_FR_BUFFER_SIZE={ENTRIES}, unset by the job)"


def answer_stacks() -> None:
    """The rank's hang hook (onnode/hang.py) in a folder `clustercheck stacks` finds from the rank's environment:
    its stack on SIGUSR2 (faulthandler) and, asked, its step and its whole Flight Recorder record."""
    os.environ["CLUSTERCHECK_HANG_DIR"] = job_hook_directory(os.environ)
    hang.install()


def folder_for(reports_dir: str, env: Mapping[str, str]) -> str:
    """One folder per job attempt that every rank names alike without asking the others."""
    job = env.get("TORCHELASTIC_RUN_ID") or env.get("SLURM_JOB_ID") or \
        f"{env.get('MASTER_ADDR', 'local')}-{env.get('MASTER_PORT', '0')}"
    attempt = env.get("TORCHELASTIC_RESTART_COUNT", "0")
    return os.path.join(reports_dir, "flight-recorder", safe_name(f"{job}-{attempt}"))


def record() -> Optional[bytes]:
    """This rank's record as torch pickles it (the hang hook's own reading), None where torch has no recorder."""
    return next(hang.dumps(), None)


class StallDump:
    """One rank's dump on no progress. install() arms the step hook and starts the thread; stop() ends both."""

    def __init__(self, after_s: float, folder: str, rank: int, host: str, speaker: bool,
                 dump: Callable[[], Optional[bytes]] = record, poll_s: Optional[float] = None):
        self.after_s, self.folder, self.rank, self.host, self.speaker = after_s, folder, rank, host, speaker
        self.dump, self.poll_s = dump, poll_s or min(5.0, max(0.05, after_s / 4))
        self.steps, self.last = 0, time.monotonic()
        self.dumped_at_step: Optional[int] = None
        self.stopping = threading.Event()
        self.handle = None

    def install(self) -> "StallDump":
        hang.prepare_dumps()      # in this thread: the dump thread's first dump would import torch._dynamo
        self.handle = register_optimizer_step_post_hook(self._stepped)
        threads.start(self._run, "injob-stall-dump", stop=self.stopping.set)
        return self

    def stop(self) -> None:
        self.stopping.set()
        if self.handle is not None:
            self.handle.remove()
            self.handle = None

    def _stepped(self, optimizer, args, kwargs) -> None:
        self.steps += 1
        self.last = time.monotonic()
        hang.step(self.steps)        # what the hook answers `clustercheck stacks` with

    def _run(self) -> None:
        while not self.stopping.wait(self.poll_s):
            if time.monotonic() - self.last >= self.after_s and self.dumped_at_step != self.steps:
                self.dumped_at_step = self.steps
                self._write()

    def _write(self) -> None:
        path = os.path.join(self.folder, f"{DEFAULT_PREFIX}{self.rank}")
        try:
            data = self.dump()
            if not data:
                raise OSError("this torch has no Flight Recorder to dump")
            os.makedirs(self.folder, exist_ok=True)
            with open(path + ".tmp", "wb") as handle:
                handle.write(data)
            os.replace(path + ".tmp", path)
        except Exception as exc:   # noqa: BLE001 - the job goes on; the line says why there is no record
            print(f"{SAY}: no step for {self.after_s:g} s (after step {self.steps}), and rank {self.rank} on "
                  f"{self.host} could not write its Flight Recorder record: {type(exc).__name__}: {exc}",
                  file=sys.stderr, flush=True)
            return
        if self.speaker:
            print(f"{SAY}: no step for {self.after_s:g} s (after step {self.steps}): each rank writes its Flight "
                  f"Recorder record to {self.folder} (this node's ranks have); `clustercheck explain "
                  f"{self.folder}` names the collective the ranks wait in and the ranks that never entered it",
                  file=sys.stderr, flush=True)
