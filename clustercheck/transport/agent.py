"""One session per node: the tool's side of the shell loop in agent_sh.py.

The first command on a node starts the loop (one exec of the login shell, its rc files
included); every later command, file and long-running command goes through it as a frame,
so it costs a few forks on the node instead of a login. A node where the loop cannot start
(no mkfifo, an unwritable TMPDIR) keeps the transport's one exec per command.
"""

from __future__ import annotations

import collections
import itertools
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

from clustercheck.core import threads
from clustercheck.transport import heartbeat
from clustercheck.transport.agent_sh import AGENT
from clustercheck.transport.base import (
    Capture,
    NodeResult,
    Outcome,
    Running,
    StreamTail,
    capped,
    decode,
)

INLINE_MAX = 2048          # longer commands travel as a payload (the shell reads a line byte by byte)
KILL_GRACE_S = 5.0         # after K: the group gets TERM, then KILL a second later
STOP_GRACE_S = 3.0
CLOSE_GRACE_S = 8.0        # Q: the loop kills every group (KILL after 1 s) and removes its directory


class AgentUnavailable(Exception):
    """The loop did not start on the node; the transport falls back to one exec per command."""


class SessionLost(Exception):
    """The loop ended (connection lost, or the loop was killed) with work outstanding."""


class Pipe:
    """What a session talks through: the loop's stdin and stdout (an SSH channel, a local process)."""

    def send(self, data: bytes) -> None:
        raise NotImplementedError

    def recv(self) -> bytes:
        """Blocks until bytes come; b"" once the stream has ended."""
        raise NotImplementedError

    def errors(self) -> str:
        """What the loop wrote on its own stderr (why it did not start)."""
        return ""

    def close(self) -> None:
        raise NotImplementedError


LOST_AFTER_S = 60          # a loop that heard nothing for this long ends every command by itself


def agent_argv(boundary: str, lost_after_s: float = LOST_AFTER_S) -> List[str]:
    return ["/bin/sh", "-c", AGENT, "clustercheck-agent", boundary, "", str(int(lost_after_s))]


def quote_line(command: str) -> str:
    """The command as one line the loop turns back into the string with eval (newlines as "$N")."""
    return "'" + command.replace("'", "'\\''").replace("\n", "'\"$N\"'") + "'"


def request(kind: str, job_id: int, command: str) -> bytes:
    data = command.encode()
    if len(data) <= INLINE_MAX:
        return f"{kind} {job_id} C {quote_line(command)}\n".encode()
    return f"{kind} {job_id} F {len(data)}\n".encode() + data


@dataclass
class Job:
    id: int
    done: threading.Event = field(default_factory=threading.Event)
    code: Optional[int] = None
    timed_out: bool = False
    out: bytearray = field(default_factory=Capture)
    err: bytearray = field(default_factory=Capture)
    size: int = -1


@dataclass
class Frame:
    kind: str
    fields: List[str]
    blocks: List[object] = field(default_factory=list)


class FrameReader:
    """Bytes from the loop in, whole frames out; a block of any size is streamed into its sink."""

    BLOCKS = {"@R": 2, "@E": 1}

    def __init__(self, boundary: str, sink: Callable[[Frame, int], object]):
        self.marker = b"\n@B" + boundary.encode() + b"\n"
        self.sink = sink            # (frame, block index) -> an object with feed(bytes) or a bytearray
        self.buf = bytearray()
        self.frame: Optional[Frame] = None
        self.block = None
        self.line_for: Optional[Frame] = None

    def feed(self, data: bytes) -> List[Frame]:
        self.buf.extend(data)
        frames = []
        while True:
            if self.frame is not None:
                if not self._read_block():
                    return frames
                if len(self.frame.blocks) == self.BLOCKS[self.frame.kind]:
                    frames.append(self.frame)
                    self.frame = None
                continue
            cut = self.buf.find(b"\n")
            if cut < 0:
                return frames
            line = decode(bytes(self.buf[:cut]))
            del self.buf[:cut + 1]
            if self.line_for is not None:
                self.line_for.fields.append(line)
                frames.append(self.line_for)
                self.line_for = None
                continue
            parts = line.split(" ")
            frame = Frame(parts[0], parts[1:])
            if frame.kind in self.BLOCKS:
                self.frame = frame
            elif frame.kind == "@L":
                self.line_for = frame
            elif frame.kind.startswith("@"):
                frames.append(frame)

    def _read_block(self) -> bool:
        if self.block is None:
            self.block = self.sink(self.frame, len(self.frame.blocks))
        at = self.buf.find(self.marker)
        if at >= 0:
            _feed(self.block, bytes(self.buf[:at]))
            del self.buf[:at + len(self.marker)]
            self.frame.blocks.append(self.block)
            self.block = None
            return True
        safe = len(self.buf) - len(self.marker) + 1
        if safe > 0:
            _feed(self.block, bytes(self.buf[:safe]))
            del self.buf[:safe]
        return False


def _feed(sink, data: bytes) -> None:
    if isinstance(sink, bytearray):
        capped(sink, data)
    else:
        sink.feed(data)


class Session:
    """The loop on one node. Thread-safe: commands from several threads are in flight at once."""

    def __init__(self, node: str, opener: Callable[[Sequence[str]], Pipe], hello_timeout_s: float,
                 lost_after_s: float = LOST_AFTER_S):
        self.node = node
        self.boundary = secrets.token_hex(16)
        self.dir = ""
        self.dead = False
        self._ids = itertools.count(1)
        self._jobs: Dict[int, Job] = {}
        self._running: Dict[int, "AgentRunning"] = {}
        self._send_lock = threading.Lock()
        self._hello = threading.Event()
        self._gone = threading.Event()
        self._reader = FrameReader(self.boundary, self._sink)
        self.pipe = opener(agent_argv(self.boundary, lost_after_s))
        threads.start(self._read, f"clustercheck-session-{node}", stop=self.pipe.close)
        if not self._hello.wait(hello_timeout_s) or self.dead:
            why = self.pipe.errors().strip().splitlines()
            self.pipe.close()
            raise AgentUnavailable(why[-1] if why else ("it ended at once" if self.dead else
                                                        f"no answer within {hello_timeout_s:g} s"))
        heartbeat.keep(self)

    # ---- reading -------------------------------------------------------------------------
    def _sink(self, frame: Frame, index: int):
        job_id = int(frame.fields[0])
        if frame.kind == "@E":
            running = self._running.get(job_id)
            return running.err if running is not None else bytearray()
        job = self._jobs.get(job_id)
        if job is None:
            return bytearray()
        return job.out if index == 0 else job.err

    def _read(self) -> None:
        try:
            while True:
                data = self.pipe.recv()
                if not data:
                    break
                for frame in self._reader.feed(data):
                    self._dispatch(frame)
        except Exception:  # noqa: BLE001 - a broken pipe ends the session like an EOF
            pass
        self.dead = True
        self._hello.set()
        self._gone.set()
        for job in list(self._jobs.values()):
            job.done.set()
        for running in list(self._running.values()):
            running.finish(None)

    def _dispatch(self, frame: Frame) -> None:
        kind, fields = frame.kind, frame.fields
        if kind == "@H":
            self.dir = fields[1] if len(fields) > 1 else ""
            self._hello.set()
        elif kind == "@Z":
            self._gone.set()
        elif kind in ("@R", "@P"):
            job = self._jobs.pop(int(fields[0]), None)
            if job is not None:
                job.code = int(fields[1]) if fields[1].lstrip("-").isdigit() else -1
                if kind == "@R":
                    job.timed_out = fields[2] == "1"
                else:
                    job.size = int(fields[2]) if len(fields) > 2 and fields[2].isdigit() else -1
                job.done.set()
        elif kind == "@L":
            running = self._running.get(int(fields[0]))
            if running is not None:
                running.add_line(fields[1])
        elif kind == "@E":
            running = self._running.pop(int(fields[0]), None)
            if running is not None:
                running.finish(int(fields[1]))

    # ---- writing -------------------------------------------------------------------------
    def _send(self, data: bytes) -> None:
        if self.dead:
            raise SessionLost("the session had ended")
        try:
            with self._send_lock:
                self.pipe.send(data)
        except Exception as exc:  # noqa: BLE001
            raise SessionLost(f"cannot send ({exc})") from None

    def beat(self) -> None:
        """The heartbeat line: the loop on the node hears that the tool is still there. Never waits long:
        a send in progress (a payload) is itself a sign of life."""
        if self.dead or not self._send_lock.acquire(timeout=0.5):
            return
        try:
            self.pipe.send(b"B\n")
        except Exception:  # noqa: BLE001 - a broken pipe is found by the reader, not here
            pass
        finally:
            self._send_lock.release()

    def kill(self, job_id: int) -> None:
        try:
            self._send(f"K {job_id}\n".encode())
        except SessionLost:
            pass

    def run(self, command: str, timeout_s: float) -> NodeResult:
        start = time.monotonic()
        job = Job(next(self._ids))
        self._jobs[job.id] = job
        self._send(request("R", job.id, command))
        if not job.done.wait(timeout_s) and not self.dead:
            self.kill(job.id)
            if not job.done.wait(KILL_GRACE_S):
                self.abandon()  # the loop does not answer: end it (its exit kills every group)
                job.timed_out = True
        elapsed = time.monotonic() - start
        if job.timed_out:
            return NodeResult(self.node, Outcome.TIMED_OUT, None, decode(job.out), decode(job.err),
                              f"no result within {timeout_s:g} s; killed", elapsed)
        if job.code is None:
            raise SessionLost("the session ended while the command ran")
        outcome = Outcome.OK if job.code == 0 else Outcome.COMMAND_FAILED
        return NodeResult(self.node, outcome, job.code, decode(job.out), decode(job.err),
                          "" if job.code == 0 else f"exit code {job.code}", elapsed)

    def put(self, data: bytes, name: str, mode: int, timeout_s: float) -> str:
        job = Job(next(self._ids))
        self._jobs[job.id] = job
        self._send(f"P {job.id} {len(data)} {mode:o} {quote_line(name)}\n".encode() + data)
        if not job.done.wait(timeout_s) or job.code is None:
            raise SessionLost(f"no answer to writing {name} within {timeout_s:g} s")
        if job.code != 0 or job.size != len(data):
            raise SessionLost(f"writing {name}: {job.size} of {len(data)} bytes written")
        return f"{self.dir}/{name}"

    def start(self, command: str) -> "AgentRunning":
        running = AgentRunning(self, next(self._ids))
        self._running[running.id] = running
        self._send(request("S", running.id, command))
        return running

    def abandon(self) -> None:
        """Close the pipe without waiting: the loop sees its stdin end and kills what runs."""
        self.dead = True
        self.pipe.close()

    def close(self, timeout_s: float = CLOSE_GRACE_S) -> None:
        """Ask the loop to kill everything and remove its directory; returns once it says all is gone."""
        if not self.dead:
            try:
                self._send(b"Q\n")
                self._gone.wait(timeout_s)
            except SessionLost:
                pass
        self.dead = True
        self.pipe.close()


class AgentRunning(Running):
    """A long-running command in a session: stdout line by line, stderr when it ends."""

    def __init__(self, session: Session, job_id: int):
        self.session = session
        self.id = job_id
        self.err = StreamTail()
        self.code: Optional[int] = None
        self.ended = False
        self._lines: "collections.deque[str]" = collections.deque()
        self._changed = threading.Condition()

    def add_line(self, line: str) -> None:
        with self._changed:
            self._lines.append(line)
            self._changed.notify_all()

    def finish(self, code: Optional[int]) -> None:
        with self._changed:
            if not self.ended:
                self.code, self.ended = code, True
            self._changed.notify_all()

    def readline(self, timeout_s: float) -> Optional[str]:
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not self._lines:
                remaining = deadline - time.monotonic()
                if self.ended or remaining <= 0:
                    return None
                self._changed.wait(remaining)
            return self._lines.popleft()

    def wait(self, timeout_s: float) -> Optional[int]:
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not self.ended:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._changed.wait(remaining)
            return -1 if self.code is None else self.code

    @property
    def lost(self) -> bool:
        return self.session.dead and self.code is None

    def stop(self) -> str:
        if not self.ended:
            self.session.kill(self.id)
            self.wait(STOP_GRACE_S)
        with self._changed:
            return self.err.text()
