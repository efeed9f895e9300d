"""Reaching a node over SSH with paramiko: host keys verified, ssh_config honoured, one shared
connection per bastion; every failure classified into an Outcome."""

from __future__ import annotations

import errno
import logging
import os
import shlex
import socket
import threading
from typing import Dict, Optional, Set, Tuple

import paramiko

from clustercheck.core.errors import InputError
from clustercheck.transport import sshconfig
from clustercheck.transport.base import Outcome, TransportError
from clustercheck.transport.hostkeys import KnownHosts, Policy, UnknownHostKey

IDLE_WAKE_S = 2.0   # how often an idle connection's paramiko thread wakes

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
        self._chains_checked: Set[str] = set()   # hosts whose chain has no loop

    def known_hosts(self, alias: str) -> KnownHosts:
        user_files, global_files = sshconfig.known_hosts_files(self.config, alias, self.settings)
        key = (tuple(user_files), tuple(global_files))
        with self._lock:
            if key not in self._known:
                self._known[key] = KnownHosts(user_files, global_files)
            return self._known[key]

    def resolve(self, alias: str, user=None, port=None) -> sshconfig.Target:
        """The node's settings, its ProxyJump / ProxyCommand chain followed and its known_hosts files read:
        bad input (a bad Port, a loop, a corrupt known_hosts) is found here, before anything is contacted."""
        target = sshconfig.resolve(self.config, alias, self.settings, user=user, port=port)
        self._check_chain(target, (alias,))
        self.known_hosts(target.alias)
        return target

    def _check_chain(self, target: sshconfig.Target, trail: Tuple[str, ...]) -> None:
        """Refuse a ProxyJump or ProxyCommand chain that comes back to a host already on it (`Host *` with
        `ProxyJump bastion` makes the bastion its own jump host): followed, it would never connect."""
        for hop in target.proxy_jump or _proxy_command_hosts(target.proxy_command):
            hop_target = sshconfig.resolve_hop(self.config, hop, self.settings)
            name = hop_target.alias
            if name in trail:
                raise InputError(f"{'ProxyJump' if target.proxy_jump else 'ProxyCommand'} loops back: "
                                 f"{' -> '.join(trail + (name,))} (a `Host *` block applies to the jump host "
                                 f"too: add `ProxyJump none` / `ProxyCommand none` in the jump host's own block)",
                                 self.settings.config_path or "~/.ssh/config", value=hop)
            if name not in self._chains_checked:
                self._check_chain(hop_target, trail + (name,))
        self._chains_checked.add(trail[-1])

    def jump_client(self, hops: Tuple[str, ...], timeout_s: float) -> paramiko.SSHClient:
        """One shared connection per bastion (per chain of hops), however many nodes sit behind it."""
        with self._lock:
            lock = self._jump_locks.setdefault(hops, threading.Lock())
        # Another node's thread may be connecting to this bastion: wait for it, but not past the deadline.
        if not lock.acquire(timeout=max(timeout_s, 0.1) * 2):
            raise TransportError(Outcome.CONNECT_TIMEOUT, f"jump host {hops[-1]}: still connecting after "
                                                          f"{2 * timeout_s:g} s")
        try:
            return self._jump_client_locked(hops, timeout_s)
        finally:
            lock.release()

    def _jump_client_locked(self, hops: Tuple[str, ...], timeout_s: float) -> paramiko.SSHClient:
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


class Dial:
    """A connection being set up, which another thread can end at once (closing the transport on Ctrl-C):
    close() shuts the socket it holds, which fails a TCP connect in progress (Linux aborts a SYN_SENT socket on
    shutdown) and paramiko's handshake and authentication (its reader sees the end of the stream), and refuses
    any socket given to it afterwards. Without it a node still in its handshake held the interrupted run until
    its connect timeout."""

    def __init__(self):
        self._lock = threading.Lock()
        self._held = []
        self.closed = False

    def hold(self, sock):
        """`sock` kept until the connection is set up (or closed at once, raising, if the dial was closed)."""
        with self._lock:
            if not self.closed:
                self._held.append(sock)
                return sock
        _shut(sock)
        raise TransportError(Outcome.SSH_ERROR, "stopped while connecting")

    def close(self) -> None:
        with self._lock:
            self.closed, held, self._held = True, self._held, []
        for sock in held:
            _shut(sock)


def _shut(sock) -> None:
    try:
        if isinstance(sock, socket.socket):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
    except (OSError, EOFError, paramiko.SSHException):
        pass


def _tcp_connect(host: str, port: int, timeout_s: float, dial: Dial) -> socket.socket:
    """socket.create_connection, with each socket held by the dial before it connects."""
    error: Optional[BaseException] = None
    for family, kind, proto, _, address in socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM):
        sock = dial.hold(socket.socket(family, kind, proto))
        try:
            sock.settimeout(timeout_s)
            sock.connect(address)
            return sock
        except OSError as exc:
            sock.close()
            if dial.closed:
                raise TransportError(Outcome.SSH_ERROR, "stopped while connecting") from None
            error = exc
    raise error or OSError(f"{host}: no address")


def _open_socket(ctx: SSHContext, target: sshconfig.Target, timeout_s: float, dial: Dial):
    if target.proxy_jump:
        return dial.hold(tunnel(ctx.jump_client(target.proxy_jump, timeout_s), target, timeout_s))
    if target.proxy_command:
        return dial.hold(paramiko.ProxyCommand(target.proxy_command))
    sock = _tcp_connect(target.hostname, target.port, timeout_s, dial)
    # paramiko leaves Nagle on: each small packet of a command would wait ~40 ms for an ACK.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def open_client(ctx: SSHContext, target: sshconfig.Target, sock=None, dial: Optional[Dial] = None) \
        -> paramiko.SSHClient:
    """Connect and authenticate, verifying the host key; raises TransportError. Closing `dial` from another
    thread ends a connect in progress at once."""
    timeout_s = target.connect_timeout_s
    dial = dial or Dial()
    known = ctx.known_hosts(target.alias)
    client = paramiko.SSHClient()
    for keytype, key in known.lookup(target.hostkey_name).items():
        client.get_host_keys().add(target.hostkey_name, keytype, key)
    client.set_missing_host_key_policy(Policy(known, target.strict_hostkeys == "accept-new"))
    try:
        sock = dial.hold(sock) if sock is not None else _open_socket(ctx, target, timeout_s, dial)
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
        if dial.closed:
            raise TransportError(Outcome.SSH_ERROR, f"{target.hostname}: stopped while connecting") from None
        raise _classify(exc, target) from None
    if isinstance(sock, socket.socket):
        # paramiko's thread wakes at every socket timeout (0.1 s) to see whether it should stop: a
        # thousand idle connections cost a core. Closing still stops it at once (it checks the
        # packetizer, not the clock).
        sock.settimeout(IDLE_WAKE_S)
    return client


SSH_OPTIONS_WITH_VALUE = set("BbcDEeFIiJLlmOoPpQRSWw")


def _proxy_command_hosts(command: Optional[str]) -> Tuple[str, ...]:
    """The host a `ProxyCommand ssh ... HOST` goes through (its own config applies to it), else ()."""
    try:
        words = shlex.split(command or "")
    except ValueError:
        return ()
    if not words or os.path.basename(words[0]) != "ssh":
        return ()
    index = 1
    while index < len(words):
        word = words[index]
        if word.startswith("-") and len(word) > 1:
            index += 2 if word[-1] in SSH_OPTIONS_WITH_VALUE and len(word) == 2 else 1
            continue
        return () if "%" in word else (word,)   # %h: the target itself, resolved by that ssh, not a fixed hop
    return ()
