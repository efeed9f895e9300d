"""Host settings a sandbox needs that the host's defaults do not give, and putting them back.

Only what the sandbox's size requires is raised, never lowered; the host's own values are kept
in HOST_SETTINGS and written back when the last sandbox goes down.
"""

from __future__ import annotations

import json
import os
from typing import Dict, List

STATE_ROOT = "/run/clustercheck-sandbox"
HOST_SETTINGS = os.path.join(STATE_ROOT, "host-settings.json")   # the host's values sandboxes changed


def mesh_neighbour_entries(num_nodes: int) -> int:
    """The entries a full mesh of sandbox nodes puts in the host's one table: every node resolves every other
    (n x (n - 1)), and each pair is learnt from both ends of its link: 2n² (a mesh of 128 nodes gave 115 false
    FAILs until the table was raised to that)."""
    return 2 * num_nodes * num_nodes


def neighbour_table_settings(num_nodes: int) -> Dict[str, int]:
    """What the sandbox asks of the host's table: gc_thresh3 (the hard maximum) and gc_thresh2 (above it entries
    are collected after 5 s) the full mesh's entries, gc_thresh1 half of them; never under the kernel defaults."""
    need = mesh_neighbour_entries(num_nodes)
    return {"gc_thresh1": max(128, need // 2), "gc_thresh2": max(512, need), "gc_thresh3": max(1024, need)}


def raise_neighbour_table(num_nodes: int) -> None:
    """The kernel keeps one ARP table for all namespaces, 1,024 entries at most by default; a full mesh of
    sandbox nodes needs mesh_neighbour_entries ("neighbour table overflow", and connections that time out).
    Raised for the sandbox, never lowered; the host's own values are kept in HOST_SETTINGS and put back when the
    last sandbox goes down."""
    wanted = neighbour_table_settings(num_nodes)
    try:
        with open(HOST_SETTINGS) as handle:
            saved = json.load(handle)
    except (OSError, ValueError):
        saved = {}
    for key, value in wanted.items():
        path = f"/proc/sys/net/ipv4/neigh/default/{key}"
        with open(path) as handle:
            current = handle.read().strip()
        if int(current) < value:
            saved.setdefault(path, current)
            with open(path, "w") as handle:
                handle.write(str(value))
    if saved:
        with open(HOST_SETTINGS, "w") as handle:
            json.dump(saved, handle)


def restore_host_settings() -> List[str]:
    """Put back the host settings sandboxes raised (called when none is left)."""
    try:
        with open(HOST_SETTINGS) as handle:
            saved = json.load(handle)
    except (OSError, ValueError):
        return []
    for path, value in saved.items():
        try:
            with open(path, "w") as handle:
                handle.write(value)
        except OSError:
            pass
    os.unlink(HOST_SETTINGS)
    return [f"{path} = {value}" for path, value in saved.items()]
