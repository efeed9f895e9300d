"""Processes of the sandbox's nodes, seen from this host: run a command, start one detached, find
a node's process by the pid its own PID namespace gave it."""

from __future__ import annotations

import os
import subprocess
from typing import List, Optional


class SandboxError(Exception):
    pass


def sh(*argv: str, check: bool = True, input: Optional[str] = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, input=input, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise SandboxError(f"{' '.join(argv)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ")[-1][0] != "Z"
    except OSError:
        return False


def spawn(argv: List[str]) -> subprocess.Popen:
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def read_text(path: str) -> str:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return ""


def pid_namespace(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return ""


def host_pid(netns: str, init_pid: int, ns_pid: int) -> int:
    """The host's pid of the process that is `ns_pid` in the PID namespace of the node's init (0: none)."""
    namespace = pid_namespace(init_pid)
    for pid in sh("ip", "netns", "pids", netns, check=False).stdout.split():
        nspid = next((line.split()[1:] for line in read_text(f"/proc/{pid}/status").splitlines()
                      if line.startswith("NSpid:")), [])
        if len(nspid) > 1 and int(nspid[-1]) == ns_pid and pid_namespace(int(pid)) == namespace:
            return int(pid)
    return 0


def first_process_alive(pid: int, netns: str) -> bool:
    """The node's first process still runs (a pid reused by another process after a crash is not it)."""
    try:
        return pid_alive(pid) and os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat(f"/run/netns/{netns}").st_ino
    except OSError:
        return False


def naming(path: str) -> List[int]:
    """Processes whose command line names path: a node's first processes, found even once its network
    namespace has lost its name (a `down` that raced an `up`)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and path in read_text(f"/proc/{entry}/cmdline").replace("\0", " "):
            found.append(int(entry))
    return found


def node_first(pid: int) -> bool:
    """A node's first process: `unshare`, or PID 1 of its namespace (it ignores TERM; its namespace dies with it)."""
    return read_text(f"/proc/{pid}/comm").strip() == "unshare" or (
        read_text(f"/proc/{pid}/status").split("NSpid:")[-1].split("\n")[0].split() or ["0"])[-1] == "1"
