"""What a test left running, named by node and process, so that a leak is reported by the test that made it.

The host sees every process of every sandbox node (their PID namespaces nest in the host's). A process is
clustercheck's when its command line or environment carries one of the marks every remote command of the tool
carries (a torchrun launch's CLUSTERCHECK_RUN, the agent's session directory, the probes' and workers' names,
torchrun itself); it belongs to this test session when it lives in one of this session's sandbox nodes (its
network namespace), or, on the host, when it inherited this session's CLUSTERCHECK_TEST_SESSION (local
transports pass the tool's environment on). Processes of other work on the same machine are never counted."""

from __future__ import annotations

import os
import re
import signal
import time
import uuid
from typing import Dict, List, NamedTuple, Optional

from clustercheck.onnode.sweep import ancestors, running, stat_fields

SESSION_VAR = "CLUSTERCHECK_TEST_SESSION"
# this session's sandboxes: conftest's and the test files' names end with this process's pid (t1234, s1234, st1234)
OURS = re.compile(rf"^[a-z]+{os.getpid() % 10000}-n\d+$")
HOST_ONLY = "\0"        # a node prefix no sandbox node has: the host's processes alone
# one per pytest process, set here: each xdist worker is a session of its own (it inherits the controller's
# environment, which must not make every worker's processes look like its own, nor its check kill another's)
SESSION = os.environ[SESSION_VAR] = uuid.uuid4().hex[:12]
# the marks of the tool's own processes on a node (cmdline or environment)
# ("clustercheck" alone is the tool's session directories and modules; the sandbox's own state directory,
# /run/clustercheck-sandbox/..., which the nodes' init and servers name, is not the tool)
MARKS = re.compile(r"torch\.distributed\.run|CLUSTERCHECK_RUN=|clustercheck(?!-sandbox)|bench_worker|train_entry|"
                   r"deepspeed\.launcher|_probe\.py|reference_train")


# the sandbox's own servers (started by the sandbox or a fault, never by the tool): their command lines name the
# sandbox's state directory (/run/clustercheck-sandbox/...), which is not the tool's mark
INFRASTRUCTURE = {"sshd", "nsenter", "unshare", "ip", "slurmd", "slurmctld", "slurmstepd", "munged", "sshfs",
                  "sftp-server", "prometheus", "prometheus-pushgateway", "prometheus-node-exporter"}


def _infrastructure(cmdline: str) -> bool:
    first = cmdline.split(" ", 1)[0].rstrip(":")
    return os.path.basename(first) in INFRASTRUCTURE


class Left(NamedTuple):
    node: str       # the sandbox node's name, or "host"
    pid: int
    cmdline: str

    def __str__(self) -> str:
        return f"{self.node} pid {self.pid}: {self.cmdline[:160]}"


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def _netns_names() -> Dict[int, str]:
    """inode of a named network namespace -> its name (/run/netns)."""
    names: Dict[int, str] = {}
    try:
        entries = os.listdir("/run/netns")
    except OSError:
        return names
    for entry in entries:
        try:
            names[os.stat(os.path.join("/run/netns", entry)).st_ino] = entry
        except OSError:
            pass
    return names


TICKS = os.sysconf("SC_CLK_TCK")


def now_ticks() -> int:
    """Clock ticks since boot, as /proc/PID/stat counts a process's start."""
    with open("/proc/uptime") as handle:
        return int(float(handle.read().split()[0]) * TICKS)


def _started(pid: str) -> int:
    fields = stat_fields(pid)
    return int(fields[19]) if fields and len(fields) > 19 else 0


def clustercheck_processes(node_prefix: Optional[str] = None, since: int = 0,
                           pattern: Optional[str] = None) -> List[Left]:
    """The tool's processes of this test session still running: in a sandbox node whose name starts with
    node_prefix (any of this session's sandboxes when None), or on the host with this session's mark; started at `since` (clock
    ticks since boot) or later: a test answers for what it started, not for a fixture's servers. pattern: the
    processes whose command line it matches (as pgrep -f), instead of the tool's marks."""
    names, spared, found = _netns_names(), ancestors(), []   # not this process, pytest, its shell
    host_net = os.stat("/proc/self/ns/net").st_ino
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) in spared or not running(pid) or (since and _started(pid) < since):
            continue
        try:
            net = os.stat(f"/proc/{pid}/ns/net").st_ino
        except OSError:
            continue
        cmdline = _read(f"/proc/{pid}/cmdline").replace(b"\0", b" ").decode(errors="replace").strip()
        environ = _read(f"/proc/{pid}/environ").decode(errors="replace")
        if pattern is None and (_infrastructure(cmdline) or not (MARKS.search(cmdline) or MARKS.search(environ))):
            continue
        if pattern is not None and not re.search(pattern, cmdline):
            continue
        if net == host_net:
            if f"{SESSION_VAR}={SESSION}" in environ.split("\0"):
                found.append(Left("host", int(pid), cmdline))
            continue
        node = names.get(net)
        if node and (node.startswith(node_prefix) if node_prefix is not None else bool(OURS.match(node))):
            found.append(Left(node, int(pid), cmdline))
    return found


def wait_gone(node_prefix: Optional[str] = None, within_s: float = 15.0, since: int = 0) -> List[Left]:
    """What is still running once within_s passed (the stop's deadline; [] as soon as nothing is)."""
    deadline = time.monotonic() + within_s
    left = clustercheck_processes(node_prefix, since)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = clustercheck_processes(node_prefix, since)
    return left


def kill(left: List[Left]) -> None:
    for item in left:
        try:
            os.kill(item.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def describe(left: List[Left]) -> str:
    return f"{len(left)} process(es) left running:\n  " + "\n  ".join(map(str, left))
