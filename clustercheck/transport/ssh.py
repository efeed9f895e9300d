"""A node reached over SSH with paramiko: one connection per node, reused for every command.

Every remote step has a deadline of ours (paramiko's keepalives do not notice a dead
peer); commands run under the guard (guard.py) so they die with the channel.
"""

from __future__ import annotations

import select
import shlex
import threading
import time
from typing import Optional

import paramiko

from clustercheck.transport.agent import AgentUnavailable, Pipe, Session, SessionLost
from clustercheck.transport.base import (
    Capture,
    LineBuffer,
    NodeResult,
    Outcome,
    Running,
    StreamTail,
    TransportError,
    capped,
    decode,
)
from clustercheck.transport.guard import guarded
from clustercheck.transport.session import SessionTransport
from clustercheck.transport.sshconnect import Dial, SSHContext, open_client


def wait_readable(chan: paramiko.Channel, timeout_s: float) -> None:
    """Until the channel has data or closes, at most timeout_s. poll, not select: a run with a
    thousand connections has channel descriptors above select's limit of 1,024."""
    poller = select.poll()
    poller.register(chan.fileno(), select.POLLIN)
    poller.poll(timeout_s * 1000)


class ChannelPipe(Pipe):
    """The session's loop behind an exec channel (the login shell runs once, then execs the loop)."""

    def __init__(self, transport: "SSHTransport", argv):
        self.transport = transport
        self.chan = transport._open_channel(transport.target.connect_timeout_s)
        self.err = StreamTail(head_bytes=0, tail_bytes=8192)
        try:
            self.chan.exec_command("exec " + " ".join(shlex.quote(arg) for arg in argv))
        except (paramiko.SSHException, EOFError, OSError) as exc:
            transport._release(self.chan)
            raise AgentUnavailable(f"cannot start ({exc})") from None

    def send(self, data: bytes) -> None:
        self.chan.sendall(data)

    def recv(self) -> bytes:
        while True:
            while self.chan.recv_stderr_ready():
                self.err.feed(self.chan.recv_stderr(65536))
            if self.chan.recv_ready():
                return self.chan.recv(65536)
            if self.chan.closed or self.chan.eof_received:
                return b""
            wait_readable(self.chan, 1.0)

    def errors(self) -> str:
        return self.err.text()

    def close(self) -> None:
        self.transport._release(self.chan)


class SSHTransport(SessionTransport):
    kind = "ssh"

    def __init__(self, ctx: SSHContext, name: str, user: Optional[str] = None, port: Optional[int] = None,
                 session: bool = True, alias: Optional[str] = None):
        self.name = name
        self.ctx = ctx
        self.target = ctx.resolve(alias or name, user=user, port=port)
        self._client: Optional[paramiko.SSHClient] = None
        self._tmpdir: Optional[str] = None
        self._channels = set()
        self._lock = threading.Lock()
        self._dial: Optional[Dial] = None   # the connect in progress, which close() ends
        self._init_session(session)

    def connect(self) -> None:
        if self._client is None:
            with self._lock:
                dial = self._dial = Dial()
            client = open_client(self.ctx, self.target, dial=dial)
            with self._lock:
                self._dial = None
            if dial.closed:      # closed the moment it was set up: its socket is shut
                client.close()
                raise TransportError(Outcome.SSH_ERROR, f"{self.target.hostname}: stopped while connecting")
            self._client = client

    def _open_channel(self, timeout_s: float) -> paramiko.Channel:
        self.connect()
        try:
            chan = self._client.get_transport().open_session(timeout=timeout_s)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise TransportError(Outcome.SSH_ERROR, f"{self.target.hostname}: cannot open a channel ({exc})") from None
        with self._lock:
            self._channels.add(chan)
        return chan

    def _release(self, chan: paramiko.Channel) -> None:
        chan.close()
        with self._lock:
            self._channels.discard(chan)

    def _new_session(self) -> Session:
        self.connect()
        try:
            return Session(self.name, lambda argv: ChannelPipe(self, argv), max(30.0, self.target.connect_timeout_s))
        except AgentUnavailable:
            if self._connection_lost():
                raise TransportError(Outcome.SSH_ERROR, f"{self.target.hostname}: connection lost") from None
            raise

    def _lost(self, exc: SessionLost, doing: str) -> TransportError:
        if self._connection_lost():
            return TransportError(Outcome.SSH_ERROR, f"{self.target.hostname}: connection lost while {doing} "
                                  f"(node down or sshd killed)")
        return TransportError(Outcome.TOOL_ERROR, f"{self.target.hostname}: the session on the node ended "
                              f"while {doing} ({exc})")

    def _exec(self, command: str, timeout_s: float) -> NodeResult:
        start = time.monotonic()
        deadline = start + timeout_s
        chan = self._open_channel(timeout_s)
        out, err = Capture(), Capture()
        timed_out = False
        try:
            # stdin is never closed: the guard on the node kills the command when the channel goes.
            chan.exec_command(guarded(command))
            timed_out = not _drain(chan, out, err, deadline)
            if not timed_out:
                wait_s = max(0.0, deadline - time.monotonic())
                if chan.closed:  # closed without an exit status yet: give it a moment, not the whole deadline
                    wait_s = min(wait_s, 1.0)
                timed_out = not chan.status_event.wait(wait_s) and not chan.closed
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise TransportError(Outcome.SSH_ERROR, f"{self.target.hostname}: connection lost ({exc})") from None
        finally:
            self._release(chan)
        elapsed = time.monotonic() - start
        if timed_out:
            return NodeResult(self.name, Outcome.TIMED_OUT, None, decode(out), decode(err),
                              f"no result within {timeout_s:g} s; killed", elapsed)
        code = chan.exit_status if chan.status_event.is_set() else -1  # -1: none came
        if code == -1:
            if self._connection_lost():
                raise TransportError(Outcome.SSH_ERROR, f"{self.target.hostname}: connection lost "
                                     f"while the command ran (node down or sshd killed)")
            # No exit status on a live connection: the command was killed by a signal.
            return NodeResult(self.name, Outcome.COMMAND_FAILED, None, decode(out), decode(err),
                              "killed by a signal", elapsed)
        outcome = Outcome.OK if code == 0 else Outcome.COMMAND_FAILED
        return NodeResult(self.name, outcome, code, decode(out), decode(err),
                          "" if code == 0 else f"exit code {code}", elapsed)

    def connected(self) -> bool:
        transport = self._client.get_transport() if self._client else None
        return transport is not None and transport.is_active()

    def _connection_lost(self, grace_s: float = 0.5) -> bool:
        """paramiko closes the channels a moment before it marks the transport inactive."""
        deadline = time.monotonic() + grace_s
        while self.connected():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    def _tempdir(self, timeout_s: float) -> str:
        if self._tmpdir is None:
            made = self._exec('mktemp -d "${TMPDIR:-/tmp}/clustercheck.XXXXXXXX"', timeout_s)
            if not made.ok or not made.stdout.strip():
                raise TransportError(Outcome.SSH_ERROR, f"{self.target.hostname}: cannot make a temporary "
                                     f"directory ({made.stderr.strip() or made.detail})")
            self._tmpdir = made.stdout.strip()
        return self._tmpdir

    def put(self, data: bytes, name: str, mode: int = 0o600, timeout_s: float = 30.0) -> str:
        session = self._session()
        if session is not None:
            try:
                return session.put(data, name, mode, timeout_s)
            except SessionLost as exc:
                raise self._lost(exc, f"writing {name}") from None
        path = f"{self._tempdir(timeout_s)}/{name}"
        quoted = shlex.quote(path)
        chan = self._open_channel(timeout_s)
        try:
            # Not guarded: cat ends at EOF of its stdin, which we send.
            chan.exec_command(f"umask 077; cat > {quoted} && chmod {mode:o} {quoted}")
            chan.settimeout(timeout_s)
            chan.sendall(data)
            chan.shutdown_write()
            if not chan.status_event.wait(timeout_s) or chan.recv_exit_status() != 0:
                raise TransportError(Outcome.SSH_ERROR, f"{self.target.hostname}: cannot write {path}")
        except (paramiko.SSHException, OSError) as exc:
            raise TransportError(Outcome.SSH_ERROR, f"{self.target.hostname}: cannot write {path} ({exc})") from None
        finally:
            self._release(chan)
        return path

    def _exec_start(self, command: str) -> "SSHRunning":
        chan = self._open_channel(self.target.connect_timeout_s)
        try:
            chan.exec_command(guarded(command))
        except (paramiko.SSHException, EOFError, OSError) as exc:
            self._release(chan)
            raise TransportError(Outcome.SSH_ERROR, f"{self.target.hostname}: cannot start ({exc})") from None
        return SSHRunning(self, chan)

    def close(self) -> None:
        with self._lock:
            dial = self._dial
        if dial is not None:
            dial.close()     # a connect still in progress (in another thread) fails at once
        self._close_session()
        with self._lock:
            channels = list(self._channels)
        for chan in channels:  # running commands: their guards kill them
            chan.close()
        if self._client is not None and self._tmpdir:
            try:
                self._exec(f"rm -rf {shlex.quote(self._tmpdir)}", 10.0)
            except TransportError:
                pass
        self._tmpdir = None
        if self._client is not None:
            self._client.close()
            self._client = None


class SSHRunning(Running):
    def __init__(self, transport: SSHTransport, chan: paramiko.Channel):
        self.transport = transport
        self.chan = chan
        self.lines = LineBuffer()
        self.err = StreamTail()

    def readline(self, timeout_s: float) -> Optional[str]:
        deadline = time.monotonic() + timeout_s
        while True:
            line = self.lines.pop()
            if line is not None:
                return line
            while self.chan.recv_stderr_ready():
                self.err.feed(self.chan.recv_stderr(65536))
            if self.chan.recv_ready():
                self.lines.feed(self.chan.recv(65536))
                continue
            remaining = deadline - time.monotonic()
            if self.chan.closed or self.chan.eof_received or remaining <= 0:
                return None
            wait_readable(self.chan, min(remaining, 0.5))

    def wait(self, timeout_s: float) -> Optional[int]:
        if self.chan.status_event.wait(timeout_s):
            return self.chan.exit_status
        if self.chan.closed or self.lost:
            # The exit status comes before the close: if both arrived since the wait gave up, the
            # status is there now. Only a channel closed without one (a signal, a lost node) is -1.
            return self.chan.exit_status if self.chan.status_event.is_set() else -1
        return None

    @property
    def lost(self) -> bool:
        return not self.transport.connected()

    def stop(self) -> str:
        while self.chan.recv_stderr_ready():
            self.err.feed(self.chan.recv_stderr(65536))
        self.transport._release(self.chan)  # the guard on the node kills the command's group
        return self.err.text()


def _drain(chan: paramiko.Channel, out: bytearray, err: bytearray, deadline: float) -> bool:
    """Read stdout and stderr until both end; False if the deadline came first."""
    # The channel's fileno is readable when either stream has data or the channel closes.
    while True:
        progressed = False
        while chan.recv_ready():
            capped(out, chan.recv(65536))
            progressed = True
        while chan.recv_stderr_ready():
            capped(err, chan.recv_stderr(65536))
            progressed = True
        if chan.eof_received and not chan.recv_ready() and not chan.recv_stderr_ready():
            return True
        if chan.closed:
            return True
        if progressed:
            continue
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        wait_readable(chan, min(remaining, 0.5))
