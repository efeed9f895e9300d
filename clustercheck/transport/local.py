"""The local machine as a node: no SSH, same semantics (guard, deadline, temp dir)."""

from __future__ import annotations

import os
import selectors
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from typing import Optional, Set

from clustercheck.core import threads
from clustercheck.transport.agent import Pipe, Session
from clustercheck.transport.base import (
    Capture,
    LineBuffer,
    NodeResult,
    Outcome,
    Running,
    StreamTail,
    capped,
    decode,
)
from clustercheck.transport.guard import guard_argv
from clustercheck.transport.session import SessionTransport


def stop(proc: subprocess.Popen, grace_s: float = 3.0) -> None:
    """Close the guard's stdin (it kills the command's group), then make sure the guard is gone."""
    try:
        proc.stdin.close()
    except OSError:
        pass
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


class ProcessPipe(Pipe):
    """The session's loop as a local process (its own session: a Ctrl-C on the terminal is ours)."""

    GRACE_S = 3.0   # for the loop to end after its stdin closes, before it is killed

    def __init__(self, argv):
        self._errors = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._errors,
                                     start_new_session=True)

    def send(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def recv(self) -> bytes:
        return os.read(self.proc.stdout.fileno(), 65536)

    def errors(self) -> str:
        self._errors.seek(0)
        return decode(self._errors.read()[-4096:])

    def close(self) -> None:
        stop(self.proc, self.GRACE_S)
        self._errors.close()


class LocalTransport(SessionTransport):
    kind = "local"

    def __init__(self, name: str = "localhost", session: bool = True):
        self.name = name
        self._tmpdir: Optional[str] = None
        self._running: Set[subprocess.Popen] = set()
        self._lock = threading.Lock()
        self._init_session(session)

    def connect(self) -> None:
        return None

    def _new_session(self) -> Session:
        return Session(self.name, ProcessPipe, 30.0)

    def _argv(self, command: str) -> list:
        """The local argv that runs `command` under the guard."""
        return guard_argv(command)

    def _exec(self, command: str, timeout_s: float) -> NodeResult:
        start = time.monotonic()
        # stdin stays open while we wait: the guard kills the command when it closes,
        # which also happens if this process dies.
        proc = subprocess.Popen(self._argv(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        with self._lock:
            self._running.add(proc)
        out, err = Capture(), Capture()
        timed_out = False
        deadline = start + timeout_s
        try:
            with selectors.DefaultSelector() as sel:
                sel.register(proc.stdout, selectors.EVENT_READ, out)
                sel.register(proc.stderr, selectors.EVENT_READ, err)
                while sel.get_map():
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        timed_out = True
                        break
                    for key, _ in sel.select(remaining):
                        chunk = os.read(key.fileobj.fileno(), 65536)
                        if chunk:
                            capped(key.data, chunk)
                        else:
                            sel.unregister(key.fileobj)
            if not timed_out:
                try:
                    proc.wait(timeout=max(0.05, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    timed_out = True
        finally:
            stop(proc)
            proc.stdout.close()
            proc.stderr.close()
            with self._lock:
                self._running.discard(proc)
        elapsed = time.monotonic() - start
        if timed_out:
            return NodeResult(self.name, Outcome.TIMED_OUT, None, decode(out), decode(err),
                              f"no result within {timeout_s:g} s; killed", elapsed)
        code = proc.returncode
        outcome = Outcome.OK if code == 0 else Outcome.COMMAND_FAILED
        return NodeResult(self.name, outcome, code, decode(out), decode(err),
                          "" if code == 0 else f"exit code {code}", elapsed)

    def put(self, data: bytes, name: str, mode: int = 0o600) -> str:
        session = self._session()
        if session is not None:
            self._tmpdir = session.dir   # the same machine: written here, removed by the loop
        elif self._tmpdir is None:
            self._tmpdir = tempfile.mkdtemp(prefix="clustercheck.")
        path = os.path.join(self._tmpdir, name)
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "wb") as handle:
            handle.write(data)
        return path

    def _exec_start(self, command: str) -> "LocalRunning":
        proc = subprocess.Popen(self._argv(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        with self._lock:
            self._running.add(proc)
        return LocalRunning(self, proc)

    def close(self) -> None:
        with self._lock:
            running = list(self._running)
        for proc in running:
            stop(proc)
        if self.session is not None:
            self._close_session()
            self._tmpdir = None
        if self._tmpdir:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None


class LocalRunning(Running):
    """A local command whose stdout and stderr are read continuously by a thread of their own:
    a rank that writes megabytes to stderr never blocks on a full pipe, whatever the caller does."""

    def __init__(self, transport: LocalTransport, proc: subprocess.Popen):
        self.transport = transport
        self.proc = proc
        self.lines = LineBuffer()
        self.err = StreamTail()
        self.ended = False
        self._changed = threading.Condition()
        self._pump = threads.start(self._read_both, "clustercheck-local-pump", stop=lambda: stop(self.proc))

    def _read_both(self) -> None:
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ, self.lines)
            sel.register(self.proc.stderr, selectors.EVENT_READ, self.err)
            while sel.get_map():
                for key, _ in sel.select():
                    chunk = os.read(key.fileobj.fileno(), 65536)
                    with self._changed:
                        if chunk:
                            key.data.feed(chunk)
                        else:
                            sel.unregister(key.fileobj)
                        self._changed.notify_all()
        with self._changed:
            self.ended = True
            self._changed.notify_all()
        self.proc.stdout.close()
        self.proc.stderr.close()

    def readline(self, timeout_s: float) -> Optional[str]:
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                line = self.lines.pop()
                if line is not None:
                    return line
                remaining = deadline - time.monotonic()
                if self.ended or remaining <= 0:
                    return None
                self._changed.wait(remaining)

    def wait(self, timeout_s: float) -> Optional[int]:
        try:
            code = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None
        return code if code >= 0 else -1

    def stop(self) -> str:
        stop(self.proc)
        # What the command wrote last is read before we answer; a process that escaped the guard's
        # group could hold the pipes open for ever, so the reader gets a moment, not a promise.
        self._pump.join(timeout=1.0)
        with self.transport._lock:
            self.transport._running.discard(self.proc)
        with self._changed:
            return self.err.text()
