"""What this rank's own TCP sockets carried: for each peer address, the bytes the peer acknowledged and the time
the kernel spent sending them (Linux's TCP_INFO of each socket: tcpi_bytes_acked, and tcpi_busy_time less
tcpi_rwnd_limited). Gloo's pairs and NCCL's socket transport are this process's sockets, so a window's deltas say
how fast each link moved the job's own traffic while it had some to move: a link slowed mid-run sends the same
gradients in longer busy periods, whatever the ranks compute. A peer slow to read (its receive window full) is
not the link's time, and is left out. And the training thread's own wait for a CPU (thread_cpu_wait_s), which
tells a rank whose CPUs are taken. Standard library only; never raises (no reading is an empty one): over
InfiniBand or RoCE NCCL's traffic crosses no socket, and there is nothing to read.

Read once a window (not per step): a directory listing of /proc/self/fd and one getsockopt per TCP socket.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
from typing import Dict, List, Optional, Tuple

# struct tcp_info (include/uapi/linux/tcp.h): the u64 fields and their offsets, Linux 4.10 and later
BYTES_ACKED = 120
BUSY_TIME = 168
RWND_LIMITED = 176
TCP_INFO_LEN = 192
ESTABLISHED = 1

Counters = Dict[str, Tuple[int, int]]     # peer address -> (bytes acknowledged, microseconds sending)


def _socket_fds() -> List[int]:
    fds = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                fds.append(int(name))
        except (OSError, ValueError):
            continue        # closed since the listing
    return fds


def _one(fd: int, counters: Dict[str, List[int]], local: set) -> None:
    try:
        copy = os.dup(fd)                           # a duplicate: closing it leaves the job's socket open
    except OSError:
        return
    try:
        sock = socket.socket(fileno=copy)
    except OSError:
        os.close(copy)
        return
    try:
        if sock.type != socket.SOCK_STREAM or sock.family not in (socket.AF_INET, socket.AF_INET6):
            return
        raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_LEN)
        if len(raw) < TCP_INFO_LEN or raw[0] != ESTABLISHED:
            return
        peer, mine = sock.getpeername()[0], sock.getsockname()[0]
        acked, = struct.unpack_from("=Q", raw, BYTES_ACKED)
        busy, rwnd = struct.unpack_from("=QQ", raw, BUSY_TIME)
        entry = counters.setdefault(peer, [0, 0])
        entry[0] += acked
        entry[1] += max(0, busy - rwnd)
        local.add(mine)
    except OSError:
        return
    finally:
        sock.close()


def read() -> Tuple[Counters, List[str]]:
    """Every established TCP socket of this process, summed by peer address; and this process's own addresses."""
    counters: Dict[str, List[int]] = {}
    local: set = set()
    try:
        fds = _socket_fds()
    except OSError:
        return {}, []
    for fd in fds:
        _one(fd, counters, local)
    return {peer: (acked, busy) for peer, (acked, busy) in counters.items()}, sorted(local)


def since(now: Counters, before: Counters) -> Dict[str, List[int]]:
    """What each peer's sockets carried between two readings (a socket closed since counts from zero)."""
    out = {}
    for peer, (acked, busy) in now.items():
        was = before.get(peer, (0, 0))
        moved, took = acked - was[0], busy - was[1]
        if moved < 0 or took < 0:
            moved, took = acked, busy
        if moved > 0:
            out[peer] = [moved, took]
    return out


def thread_cpu_wait_s() -> Optional[float]:
    """Seconds the calling thread has waited for a CPU while runnable (the kernel's schedstat run delay, a cgroup
    quota's throttling included), None where the kernel does not keep it. The training thread's alone: a rank's
    other threads (Gloo's, a data loader's) wait beside it, and summed they pass the step's own time."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as handle:
            return int(handle.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None
