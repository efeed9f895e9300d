"""The inventory: which nodes make up the cluster, read from files people already have.

Accepted formats, one node per line:

    [user@]host[:port] [slots=N] [python=/path] [ifname=IF] [user=U] [port=P]

which also reads, for what they are:

- a DeepSpeed hostfile or Open MPI hostfile: ``worker-1 slots=8 [max_slots=16]``;
- an MPICH / Intel MPI machinefile: ``node1:8`` is node1 with 8 slots (ranks). A number
  after the colon below 1024 is read as slots, as MPICH does; SSH ports are 22 or 1024
  and up (``login2:2222``), or say ``port=N``. ``host:22`` is the SSH port.

Anything else is refused with the file and line, never guessed: a CSV (``0,10.0.0.1``,
a header ``index,ip``), a bare number as a host name. Host names may be Slurm host
ranges (``gpu[01-04,07]``, ``rack[1-2]-n[1-3]``), expanded with python-hostlist; commas
belong inside the brackets. ``#`` starts a comment. Per-node values win over the command
line's defaults (``--user``, ``--port``, ``--python``).
"""

from __future__ import annotations

import ipaddress
import os
import re
import sys
from dataclasses import dataclass, replace
from typing import Dict, Iterable, List, Optional

import hostlist

from clustercheck.core.errors import InputError
from clustercheck.core.inputs import read_text_file

LOCAL_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "localhost.localdomain"})
KNOWN_KEYS = ("slots", "max_slots", "python", "ifname", "user", "port")
MPICH_SLOTS_BELOW = 1024   # host:N with N below this is an MPICH machinefile's slot count (N=22 is SSH's port)
_HOST_RE = re.compile(r"^[A-Za-z0-9_.\-\[\],:]+$")
_LABEL_RE = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_\-]{0,61}[A-Za-z0-9_])?$")
HOST_NAME_MAX = 253   # RFC 1123: a name of at most 253 characters, in labels of 1 to 63
_IFNAME_RE = re.compile(r"^[A-Za-z0-9_.:@\-]{1,15}$")


@dataclass(frozen=True)
class Node:
    """One node of the cluster as the user named it."""

    name: str                     # what the user wrote (after range expansion)
    user: Optional[str] = None    # None: from ssh_config, else the local user
    port: Optional[int] = None    # None: from ssh_config, else 22
    slots: Optional[int] = None   # GPUs or ranks on the node (DeepSpeed hostfile "slots")
    python: Optional[str] = None  # interpreter that trains there
    ifname: Optional[str] = None  # the training network interface
    source: str = ""              # "nodes.txt:3", for messages
    host: Optional[str] = None    # the host to reach, where it differs from the name (several nodes on one host)

    @property
    def address(self) -> str:
        """What to connect to (SSH alias, rendezvous host, peers' target): the host, else the name."""
        return self.host or self.name

    @property
    def is_local(self) -> bool:
        return self.address in LOCAL_NAMES


@dataclass(frozen=True)
class Defaults:
    """Command-line defaults; a per-node value in the file wins over these."""

    user: Optional[str] = None
    port: Optional[int] = None
    python: Optional[str] = None
    slots: Optional[int] = None


def parse_port(text: str, source: str, line: int) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise InputError("port must be a number from 1 to 65535", source, line, text)
    return int(text)


def _parse_slots(text: str, source: str, line: int) -> int:
    if not text.isdigit() or int(text) < 1:
        raise InputError("slots must be a whole number of at least 1", source, line, text)
    return int(text)


def host_name_problem(name: str) -> str:
    """Why `name` cannot be a host to reach ("" when it can): an IPv4 or IPv6 address, or a DNS name of
    labels of 1 to 63 letters, digits, '-' and '_' (Slurm and container names use '_'), at most 253 in all.
    The one check of a host name, wherever names are read (inventory files, Slurm lists, reports)."""
    if not name:
        return "empty host name"
    if len(name) > HOST_NAME_MAX:
        return f"a host name has at most {HOST_NAME_MAX} characters, this one {len(name):,}"
    try:
        ipaddress.ip_address(name)
        return ""
    except ValueError:
        pass
    labels = name[:-1].split(".") if name.endswith(".") else name.split(".")
    bad = next((label for label in labels if not _LABEL_RE.match(label)), None)
    if bad is None:
        return ""
    if not bad:
        return "not a host name: an empty label (two dots, or a dot first)"
    if len(bad) > 63:
        return f"not a host name: a label has at most 63 characters, {bad[:20]}... has {len(bad)}"
    odd = sorted(set(re.sub(r"[A-Za-z0-9_-]", "", bad)))
    if odd:
        return f"not a host name: {bad[:40]!r} holds {' '.join(map(repr, odd))}"
    return f"not a host name: a label cannot start or end with '-' ({bad!r})"


def check_host_name(name: str, source: str = "", line: int = 0) -> str:
    problem = host_name_problem(name)
    if problem:
        raise InputError(problem, source, line, name if len(name) <= 80 else name[:80] + "...")
    return name


def _outside_brackets(pattern: str) -> str:
    return re.sub(r"\[[^\]]*\]", "", pattern)


def expand_hosts(pattern: str, source: str = "", line: int = 0, is_list: bool = False) -> List[str]:
    """Expand a Slurm-style host range (a whole host list when `is_list`: SLURM_JOB_NODELIST);
    bad ranges and other formats are input errors."""
    if (not is_list and "," in _outside_brackets(pattern)) or ";" in pattern:
        raise InputError("not a host name: this looks like a CSV or a list; write one host per line "
                         "(a range's commas go inside brackets: gpu[01,03])", source, line, pattern)
    if pattern.isdigit():
        raise InputError("not a host name: a bare number (a CSV's index column?)", source, line, pattern)
    if len(pattern) > 4096:
        raise InputError(f"not a host name or host range: {len(pattern):,} characters", source, line,
                         pattern[:80] + "...")
    if not _HOST_RE.match(pattern):
        raise InputError("not a host name or host range", source, line, pattern)
    try:
        names = hostlist.expand_hostlist(pattern)
    except hostlist.BadHostlist as exc:
        raise InputError(f"bad host range ({exc})", source, line, pattern) from None
    if not names:
        raise InputError("host range expands to no hosts", source, line, pattern)
    for name in names:
        check_host_name(name, source, line)
    return names


def _split_target(target: str, source: str, line: int):
    """(user, host pattern, port, slots) of "[user@]host[:N]"."""
    user = None
    if "@" in target:
        user, _, target = target.rpartition("@")
        if not user:
            raise InputError("empty user name before '@'", source, line, target)
    port = slots = None
    # A number follows the last ':' unless the colon sits inside a [range] (hostlist allows none there anyway).
    if ":" in target and not target.endswith("]"):
        host, _, number = target.rpartition(":")
        if ":" in host:  # a bare IPv6 address: no port syntax supported
            host, number = target, ""
        if not number and ":" not in host:
            raise InputError("empty port after ':' (write host, or host:PORT)", source, line, target)
        if number:
            if number.isdigit() and 0 < int(number) < MPICH_SLOTS_BELOW and int(number) != 22 and user is None:
                slots = int(number)   # MPICH / Intel MPI machinefile: host:ranks (never with user@)
            else:
                port = parse_port(number, source, line)
            target = host
    if not target:
        raise InputError("missing host name", source, line, target)
    return user, target, port, slots


def parse_line(text: str, source: str, line: int) -> List[Node]:
    """Parse one inventory line (comments already stripped) into its nodes."""
    fields = text.split()
    user, pattern, port, colon_slots = _split_target(fields[0], source, line)
    attrs = {}
    for field in fields[1:]:
        key, sep, value = field.partition("=")
        if not sep:
            raise InputError("expected key=value after the host", source, line, field)
        if key not in KNOWN_KEYS:
            raise InputError(f"unknown key (known: {', '.join(KNOWN_KEYS)})", source, line, key)
        if key in attrs:
            raise InputError("key given twice", source, line, key)
        if not value:
            raise InputError(f"empty value for {key}", source, line, field)
        attrs[key] = value
    if "port" in attrs:
        if port is not None:
            raise InputError("port given twice (host:port and port=)", source, line, fields[0])
        port = parse_port(attrs["port"], source, line)
    if "user" in attrs:
        if user is not None:
            raise InputError("user given twice (user@host and user=)", source, line, fields[0])
        user = attrs["user"]
    if colon_slots is not None and "slots" in attrs:
        raise InputError("slots given twice (MPICH host:N and slots=)", source, line, fields[0])
    slots = _parse_slots(attrs["slots"], source, line) if "slots" in attrs else colon_slots
    if "max_slots" in attrs:   # Open MPI: the most ranks it may oversubscribe to; clustercheck runs `slots`
        most = _parse_slots(attrs["max_slots"], source, line)
        if slots is not None and most < slots:
            raise InputError(f"max_slots is below slots={slots}", source, line, attrs["max_slots"])
    ifname = attrs.get("ifname")
    if ifname is not None and not _IFNAME_RE.match(ifname):
        raise InputError("not a network interface name (at most 15 characters)", source, line, ifname)
    where = f"{source}:{line}" if source else f"line {line}"
    return [
        Node(name=name, user=user, port=port, slots=slots, python=attrs.get("python"),
             ifname=ifname, source=where)
        for name in expand_hosts(pattern, source, line)
    ]


def parse_inventory(text: str, source: str = "<inventory>", defaults: Defaults = Defaults()) -> List[Node]:
    """Parse a whole inventory; any error names the source and line, and nothing is contacted."""
    nodes: List[Node] = []
    seen = {}
    text = text[1:] if text.startswith("\ufeff") else text   # the byte-order mark editors on Windows write first
    for number, raw in enumerate(text.splitlines(), start=1):
        body = raw.split("#", 1)[0].strip()
        if not body:
            continue
        for node in parse_line(body, source, number):
            key = (node.name, node.port)
            if key in seen:
                raise InputError(f"duplicate node (first at {seen[key]})", source, number, node.name)
            seen[key] = node.source
            nodes.append(apply_defaults(node, defaults))
    if not nodes:
        raise InputError("no nodes: the file is empty or holds only comments", source)
    return distinct_names(nodes)


def distinct_names(nodes: List[Node]) -> List[Node]:
    """Several nodes on one host (containers behind ports 2222, 2223): each is named host:port, so that no
    table or result merges them; the host is still what is connected to."""
    count: Dict[str, int] = {}
    for node in nodes:
        count[node.name] = count.get(node.name, 0) + 1
    return [replace(node, name=f"{node.name}:{node.port}", host=node.name) if count[node.name] > 1 else node
            for node in nodes]


def apply_defaults(node: Node, defaults: Defaults) -> Node:
    return replace(
        node,
        user=node.user if node.user is not None else defaults.user,
        port=node.port if node.port is not None else defaults.port,
        python=node.python if node.python is not None else defaults.python,
        slots=node.slots if node.slots is not None else defaults.slots,
    )


def read_inventory(path: str, defaults: Defaults = Defaults()) -> List[Node]:
    text = read_text_file(path, "inventory file")
    return parse_inventory(text, path, defaults)


def slurm_inventory(environ=os.environ, defaults: Defaults = Defaults()) -> List[Node]:
    """The nodes of the current Slurm allocation (SLURM_JOB_NODELIST)."""
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
    if not nodelist:
        raise InputError("SLURM_JOB_NODELIST is not set: --slurm works inside an allocation "
                         "(salloc or sbatch)", "--slurm")
    slots = None
    gpus = environ.get("SLURM_GPUS_ON_NODE", "")
    if gpus.isdigit() and int(gpus) > 0:
        slots = int(gpus)
    names = expand_hosts(nodelist, "SLURM_JOB_NODELIST", is_list=True)
    return [apply_defaults(Node(name=n, slots=slots, source="SLURM_JOB_NODELIST"), defaults) for n in names]


LOCAL_DEFAULT = "default"   # the source of the built-in one-node cluster's node


def local_inventory(defaults: Defaults = Defaults()) -> List[Node]:
    """The built-in default: this machine as a one-node cluster, no SSH needed. It trains with the
    interpreter clustercheck runs in (the environment it was installed into), unless --python says
    otherwise."""
    return [apply_defaults(Node(name="localhost", source=LOCAL_DEFAULT, python=defaults.python or sys.executable),
                           defaults)]


def fold(names: Iterable[str]) -> str:
    """Compact host list: ['node1','node2','node3','node5'] -> 'node[1-3,5]'."""
    names = list(names)
    try:
        return hostlist.collect_hostlist(names)
    except hostlist.BadHostlist:  # names hostlist cannot fold (odd characters): list them
        return ",".join(names)
