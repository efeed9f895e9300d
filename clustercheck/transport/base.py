"""What every transport returns, and the interface it implements.

A transport reaches one node: it runs commands there under a deadline and ships
files into a per-run temporary directory. Local and SSH transports exist; an srun
transport (inside a Slurm allocation) fits the same interface.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional

from clustercheck.core.errors import EXIT_FAIL, EXIT_OK, EXIT_UNKNOWN

# At most this much of a stream is kept per command; the rest is counted, not stored.
MAX_CAPTURE_BYTES = 4 * 1024 * 1024


class Outcome(enum.Enum):
    """How a command on a node ended, worst last within each tier."""

    OK = "ok"
    COMMAND_FAILED = "command failed"
    TIMED_OUT = "timed out"
    REFUSED = "unreachable: connection refused"
    CONNECT_TIMEOUT = "unreachable: connect timed out"
    NO_ROUTE = "unreachable: no route to host"
    NAME_UNRESOLVED = "unreachable: name does not resolve"
    AUTH_FAILED = "authentication failed"
    HOSTKEY_UNKNOWN = "host key unknown"
    HOSTKEY_CHANGED = "host key changed"
    SSH_ERROR = "ssh error"
    SLURM_REFUSED = "unreachable: Slurm refused the step"
    TOOL_ERROR = "could not check: error in clustercheck"

    @property
    def reached(self) -> bool:
        """The command ran (whatever its exit code)."""
        return self in (Outcome.OK, Outcome.COMMAND_FAILED, Outcome.TIMED_OUT)

    @property
    def exit_code(self) -> int:
        if self is Outcome.OK:
            return EXIT_OK
        return EXIT_FAIL if self.reached else EXIT_UNKNOWN


REMEDIES = {
    Outcome.REFUSED: "the host answers but nothing listens on the SSH port: start sshd, or fix Port / the node's "
                     "address",
    Outcome.CONNECT_TIMEOUT: "no answer within the connect timeout: the node is down, or a firewall drops the SSH "
                             "port",
    Outcome.NO_ROUTE: "no route to the node: check its address and the network between here and there",
    Outcome.NAME_UNRESOLVED: "the name does not resolve here: add it to /etc/hosts or DNS, or give HostName in "
                             "ssh_config",
    Outcome.AUTH_FAILED: "key not accepted: install your public key in the node's authorized_keys, or name the key "
                         "with IdentityFile",
    Outcome.HOSTKEY_UNKNOWN: "verify the key, then add it to known_hosts (ssh-keyscan) or rerun with "
                             "--accept-new-hostkeys",
    Outcome.HOSTKEY_CHANGED: "the node's host key differs from known_hosts: if the node was reinstalled, remove the "
                             "old entry with ssh-keygen -R; otherwise treat it as a possible attack",
    Outcome.SLURM_REFUSED: "Slurm would not start a step there: is the node in this allocation and the job still "
                           "running (squeue -j $SLURM_JOB_ID)? A node Slurm lists as drained or down takes no steps",
    Outcome.TIMED_OUT: "the command passed its deadline and was killed: raise --timeout or find what hangs",
    Outcome.TOOL_ERROR: "clustercheck itself failed on this node: rerun; if it persists, report it with the detail",
}


@dataclass
class NodeResult:
    """What happened on one node: the outcome, and the evidence."""

    node: str
    outcome: Outcome
    exit_code: Optional[int] = None
    stdout: str = ""
    stderr: str = ""
    detail: str = ""        # one line: why it failed, in words
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.OK

    @property
    def remedy(self) -> str:
        return REMEDIES.get(self.outcome, "")


class TransportError(Exception):
    """The node could not be reached; carries the outcome that classifies why."""

    def __init__(self, outcome: Outcome, detail: str):
        super().__init__(detail)
        self.outcome = outcome
        self.detail = detail


class Transport:
    """One node. Implementations: LocalTransport, SSHTransport, SrunTransport."""

    name: str
    kind = "?"     # how commands reach the node, in reports: local, ssh, srun

    def connect(self) -> None:
        """Reach the node; raises TransportError classified by Outcome."""
        raise NotImplementedError

    def run(self, command: str, timeout_s: float) -> NodeResult:
        """Run a shell command under a deadline; it and its children die at the deadline."""
        raise NotImplementedError

    def put(self, data: bytes, name: str, mode: int = 0o600) -> str:
        """Write data into this run's temporary directory on the node; returns its path."""
        raise NotImplementedError

    def start(self, command: str) -> "Running":
        """Start a long-running command (a listener) whose stdout is read line by line while it runs."""
        raise NotImplementedError

    def close(self) -> None:
        """Kill what still runs, remove the run's temporary directory, drop the connection."""
        raise NotImplementedError


CUT_MARK = "clustercheck: output cut"


class Capture(bytearray):
    """A command's stdout or stderr as kept: at most MAX_CAPTURE_BYTES, and how many more were not kept."""

    dropped = 0


def decode(data: bytes) -> str:
    """The text; a capture that was cut says so at its end, with how much was kept and how much not."""
    text = data.decode("utf-8", errors="replace")
    dropped = getattr(data, "dropped", 0)
    if dropped:
        text += f"\n[{CUT_MARK}: the first {len(data):,} bytes kept, {dropped:,} more not kept]\n"
    return text


def capped(buffer: bytearray, chunk: bytes) -> None:
    room = MAX_CAPTURE_BYTES - len(buffer)
    if room > 0:
        buffer.extend(chunk[:room])
    if len(chunk) > max(room, 0) and isinstance(buffer, Capture):
        buffer.dropped += len(chunk) - max(room, 0)


class Running:
    """A command still running on a node (see Transport.start). stop() kills it there."""

    def readline(self, timeout_s: float) -> Optional[str]:
        """The next line of stdout; None if none came in time or the command ended."""
        raise NotImplementedError

    def wait(self, timeout_s: float) -> Optional[int]:
        """The exit code once the command ended (-1: ended with none, killed or connection lost);
        None if it still runs after timeout_s."""
        raise NotImplementedError

    def stop(self) -> str:
        """Kill the command (its guard kills the whole group) and return its stderr so far."""
        raise NotImplementedError

    @property
    def lost(self) -> bool:
        """The connection to the node dropped (a local command never loses one)."""
        return False


class StreamTail:
    """A stream that may be long (a loud rank's stderr): its head and its tail are kept, what lies
    between is counted. The telling lines of a failure are usually at the end."""

    def __init__(self, head_bytes: int = 64 * 1024, tail_bytes: int = MAX_CAPTURE_BYTES):
        self.head = bytearray()
        self.tail = bytearray()
        self.head_bytes, self.tail_bytes = head_bytes, tail_bytes
        self.dropped = 0

    def feed(self, chunk: bytes) -> None:
        room = self.head_bytes - len(self.head)
        if room > 0:
            self.head.extend(chunk[:room])
            chunk = chunk[room:]
        self.tail.extend(chunk)
        excess = len(self.tail) - self.tail_bytes
        if excess > 0:
            del self.tail[:excess]
            self.dropped += excess

    def text(self) -> str:
        gap = f"\n[... {self.dropped} bytes not kept ...]\n" if self.dropped else ""
        return decode(bytes(self.head)) + gap + decode(bytes(self.tail))


class LineBuffer:
    """Bytes in, complete lines out."""

    def __init__(self):
        self._data = bytearray()

    def feed(self, chunk: bytes) -> None:
        capped(self._data, chunk)

    def pop(self) -> Optional[str]:
        cut = self._data.find(b"\n")
        if cut < 0:
            return None
        line = bytes(self._data[:cut])
        del self._data[:cut + 1]
        return decode(line)
