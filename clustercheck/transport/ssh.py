"""A node reached over SSH with paramiko: one connection per node, reused for every command.

Every remote step has a deadline of ours (paramiko's keepalives do not notice a dead
peer); commands run under the guard (guard.py) so they die with the channel.
"""

from __future__ import annotations

import errno
import logging
import select
import shlex
import socket
import threading
import time
from typing import Dict, Optional, Tuple

import paramiko

from clustercheck.transport import sshconfig
from clustercheck.transport.base import (
    LineBuffer,
    NodeResult,
    Outcome,
    Running,
    StreamTail,
    Transport,
    TransportError,
    capped,
    decode,
)
from clustercheck.transport.guard import guarded
from clustercheck.transport.hostkeys import KnownHosts, Policy, UnknownHostKey

# Every paramiko failure is classified into an Outcome here; its own log lines (a transport thread's
# "Error reading SSH protocol banner" when Ctrl-C closes a half-open socket) would only be noise.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


class SSHContext:
    """What all SSH connections of one run share: parsed config, known_hosts, bastion connections."""

    def __init__(self, settings: sshconfig.SSHSettings):
        self.settings = settings
        self.config = settings.load_config()
        self._known: Dict[Tuple, KnownHosts] = {}
        self._jumps: Dict[Tuple, paramiko.SSHClient] = {}
        self._lock = threading.Lock()
        self._jump_locks: Dict[Tuple, threading.Lock] = {}
        self._jump_failures: Dict[Tuple, TransportError] = {}

    def known_hosts(self, alias: str) -> KnownHosts:
        user_files, global_files = sshconfig.known_hosts_files(self.config, alias, self.settings)
        key = (tuple(user_files), tuple(global_files))
        with self._lock:
            if key not in self._known:
                self._known[key] = KnownHosts(user_files, global_files)
            return self._known[key]

    def resolve(self, alias: str, user=None, port=None) -> sshconfig.Target:
        return sshconfig.resolve(self.config, alias, self.settings, user=user, port=port)

    def jump_client(self, hops: Tuple[str, ...], timeout_s: float) -> paramiko.SSHClient:
        """One shared connection per bastion (per chain of hops), however many nodes sit behind it."""
        with self._lock:
            lock = self._jump_locks.setdefault(hops, threading.Lock())
        with lock:
            if hops in self._jump_failures:  # a dead bastion costs one timeout, not one per node
                failure = self._jump_failures[hops]
                raise TransportError(failure.outcome, failure.detail)
            client = self._jumps.get(hops)
            if client is not None and client.get_transport() and client.get_transport().is_active():
                return client
            target = sshconfig.resolve_hop(self.config, hops[-1], self.settings)
            try:
                sock = None
                if len(hops) > 1:
                    sock = tunnel(self.jump_client(hops[:-1], timeout_s), target, timeout_s)
                client = open_client(self, target, sock=sock)
            except TransportError as exc:
                failure = TransportError(exc.outcome, f"jump host {hops[-1]}: {exc.detail}")
                self._jump_failures[hops] = failure
                raise failure from None
            self._jumps[hops] = client
            return client

    def close(self) -> None:
        with self._lock:
            jumps, self._jumps = list(self._jumps.values()), {}
        for client in jumps:
            client.close()


def _classify(exc: BaseException, target: sshconfig.Target) -> TransportError:
    where = f"{target.hostname}:{target.port}"
    if isinstance(exc, TransportError):
        return exc
    if isinstance(exc, socket.gaierror):
        return TransportError(Outcome.NAME_UNRESOLVED, f"{target.hostname}: {exc.strerror or exc}")
    if isinstance(exc, ConnectionRefusedError):
        return TransportError(Outcome.REFUSED, f"{where}: connection refused")
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return TransportError(Outcome.CONNECT_TIMEOUT, f"{where}: no answer")
    if isinstance(exc, OSError) and exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        return TransportError(Outcome.NO_ROUTE, f"{where}: {exc.strerror}")
    if isinstance(exc, paramiko.BadHostKeyException):
        return TransportError(Outcome.HOSTKEY_CHANGED,
                              f"{exc.hostname}: offered {exc.key.get_name()} key {exc.key.fingerprint}, "
                              f"known_hosts has {exc.expected_key.fingerprint}")
    if isinstance(exc, UnknownHostKey):
        return TransportError(Outcome.HOSTKEY_UNKNOWN, str(exc))
    if isinstance(exc, paramiko.AuthenticationException):
        return TransportError(Outcome.AUTH_FAILED, f"{target.user}@{where}: {exc}")
    if isinstance(exc, paramiko.ChannelException):
        return TransportError(Outcome.REFUSED, f"{where} via jump host: {exc.text} (code {exc.code})")
    if isinstance(exc, paramiko.SSHException) and "banner" in str(exc).lower():
        return TransportError(Outcome.CONNECT_TIMEOUT, f"{where}: no SSH banner ({exc})")
    if isinstance(exc, OSError):
        return TransportError(Outcome.SSH_ERROR, f"{where}: {exc.strerror or exc}")
    return TransportError(Outcome.SSH_ERROR, f"{where}: {type(exc).__name__}: {exc}")


def tunnel(via: paramiko.SSHClient, target: sshconfig.Target, timeout_s: float) -> paramiko.Channel:
    """A 'direct-tcpip' channel through a connected host to the target's SSH port."""
    return via.get_transport().open_channel("direct-tcpip", (target.hostname, target.port), ("", 0),
                                            timeout=timeout_s)


def _open_socket(ctx: SSHContext, target: sshconfig.Target, timeout_s: float):
    if target.proxy_jump:
        return tunnel(ctx.jump_client(target.proxy_jump, timeout_s), target, timeout_s)
    if target.proxy_command:
        return paramiko.ProxyCommand(target.proxy_command)
    sock = socket.create_connection((target.hostname, target.port), timeout=timeout_s)
    # paramiko leaves Nagle on: each small packet of a command would wait ~40 ms for an ACK.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def open_client(ctx: SSHContext, target: sshconfig.Target, sock=None) -> paramiko.SSHClient:
    """Connect and authenticate, verifying the host key; raises TransportError."""
    timeout_s = target.connect_timeout_s
    known = ctx.known_hosts(target.alias)
    client = paramiko.SSHClient()
    for keytype, key in known.lookup(target.hostkey_name).items():
        client.get_host_keys().add(target.hostkey_name, keytype, key)
    client.set_missing_host_key_policy(Policy(known, target.strict_hostkeys == "accept-new"))
    try:
        if sock is None:
            sock = _open_socket(ctx, target, timeout_s)
        client.connect(
            target.hostkey_alias or target.hostname, port=target.port, username=target.user,
            key_filename=list(target.identity_files) or None,
            look_for_keys=not target.identities_only, allow_agent=not target.identities_only,
            timeout=timeout_s, banner_timeout=timeout_s, auth_timeout=timeout_s,
            channel_timeout=timeout_s, sock=sock)
    except BaseException as exc:
        client.close()
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise _classify(exc, target) from None
    return client


class SSHTransport(Transport):
    def __init__(self, ctx: SSHContext, name: str, user: Optional[str] = None, port: Optional[int] = None):
        self.name = name
        self.ctx = ctx
        self.target = ctx.resolve(name, user=user, port=port)
        self._client: Optional[paramiko.SSHClient] = None
        self._tmpdir: Optional[str] = None
        self._channels = set()
        self._lock = threading.Lock()

    def connect(self) -> None:
        if self._client is None:
            self._client = open_client(self.ctx, self.target)

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

    def run(self, command: str, timeout_s: float) -> NodeResult:
        start = time.monotonic()
        deadline = start + timeout_s
        chan = self._open_channel(timeout_s)
        out, err = bytearray(), bytearray()
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
            made = self.run('mktemp -d "${TMPDIR:-/tmp}/clustercheck.XXXXXXXX"', timeout_s)
            if not made.ok or not made.stdout.strip():
                raise TransportError(Outcome.SSH_ERROR, f"{self.target.hostname}: cannot make a temporary "
                                     f"directory ({made.stderr.strip() or made.detail})")
            self._tmpdir = made.stdout.strip()
        return self._tmpdir

    def put(self, data: bytes, name: str, mode: int = 0o600, timeout_s: float = 30.0) -> str:
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

    def start(self, command: str) -> "SSHRunning":
        chan = self._open_channel(self.target.connect_timeout_s)
        try:
            chan.exec_command(guarded(command))
        except (paramiko.SSHException, EOFError, OSError) as exc:
            self._release(chan)
            raise TransportError(Outcome.SSH_ERROR, f"{self.target.hostname}: cannot start ({exc})") from None
        return SSHRunning(self, chan)

    def close(self) -> None:
        with self._lock:
            channels = list(self._channels)
        for chan in channels:  # running commands: their guards kill them
            chan.close()
        if self._client is not None and self._tmpdir:
            try:
                self.run(f"rm -rf {shlex.quote(self._tmpdir)}", 10.0)
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
            select.select([self.chan], [], [], min(remaining, 0.5))

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
        select.select([chan], [], [], min(remaining, 0.5))
