"""NVIDIA's nvbandwidth output, read: each test's matrix (GB/s; "N/A" on the diagonal) and its SUM line.

The device probe runs `nvbandwidth -t host_to_device_memcpy_ce -t device_to_host_memcpy_ce -t
device_to_device_memcpy_read_ce` where the tool is installed (never required); its copy-engine
figures stand in for the probe's own host-link and peer figures. Judging only, no I/O.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional

TESTS = ("host_to_device_memcpy_ce", "device_to_host_memcpy_ce", "device_to_device_memcpy_read_ce")
# the GPU-to-GPU figures, in order of preference: the read test the probe runs, else the write test of a run
# that had only that one (nvbandwidth v0.1's README shows it). Their diagonal is a GPU to itself: 0.00 in v0.1,
# N/A later; never a link (DeviceFacts.peers_matrix leaves it out)
PEER_TESTS = ("device_to_device_memcpy_read_ce", "device_to_device_memcpy_write_ce")


def parse_nvbandwidth(text: str) -> Dict[str, List[List[Optional[float]]]]:
    """test name -> its matrix (rows as printed: CPU row 0 for host tests, GPU rows for device tests)."""
    found: Dict[str, List[List[Optional[float]]]] = {}
    test, rows = None, None
    for line in text.splitlines():
        running = re.match(r"^Running (\w+)\.", line)
        if running:
            test, rows = running.group(1), None
            continue
        if test is None:
            continue
        if re.match(r"^\s+\d+(\s+\d+)*\s*$", line):          # the column header
            rows = found.setdefault(test, [])
            continue
        cells = re.match(r"^\s*(\d+)\s+((?:(?:[\d.]+|N/A)\s*)+)$", line)
        if rows is not None and cells:
            rows.append([None if c == "N/A" else float(c) for c in cells.group(2).split()])
        elif line.startswith("SUM ") or not line.strip():
            rows = None if not line.strip() else rows
    return found


def figures(text: str) -> Dict:
    """{"h2d": [GB/s per GPU], "d2h": [...], "peers": matrix} from the tests that ran; {} when none did."""
    matrices = parse_nvbandwidth(text)
    out: Dict = {}
    for test, key in (("host_to_device_memcpy_ce", "h2d"), ("device_to_host_memcpy_ce", "d2h")):
        if matrices.get(test):
            out[key] = matrices[test][0]
    peers = next((test for test in PEER_TESTS if matrices.get(test)), None)
    if peers:
        out["peers"] = matrices[peers]
    return out


def version(text: str) -> str:
    """"v0.4" from "nvbandwidth Version: v0.4"; "" where the output does not say (v0.1 printed no version)."""
    match = re.search(r"nvbandwidth Version:\s*(\S+)", text)
    return match.group(1) if match else ""


def unreadable(text: str) -> str:
    """Why an nvbandwidth output that is there gave no figure ("" when it gave some, or is empty)."""
    if not text.strip() or figures(text):
        return ""
    ran = re.findall(r"^Running (\w+)\.", text, re.M)
    if not ran:
        return "no \"Running <test>.\" line: not an output of nvbandwidth's tests"
    return f"no matrix could be read under {', '.join(ran[:3])}"
