"""Host settings a sandbox needs that the host's defaults do not give, and putting them back.

Only what the sandbox's size requires is raised, never lowered; the host's own values are kept
in HOST_SETTINGS and written back when the last sandbox goes down.
"""

from __future__ import annotations

import json
import os
from typing import List

STATE_ROOT = "/run/clustercheck-sandbox"
HOST_SETTINGS = os.path.join(STATE_ROOT, "host-settings.json")   # the host's values sandboxes changed


def raise_neighbour_table(num_nodes: int) -> None:
    """The kernel keeps one ARP table for all namespaces, 1,024 entries at most by default; a mesh
    between a few hundred nodes needs an entry per pair talking ("neighbour table overflow", and
    connections that time out). Raised for the sandbox; the host's own values are kept in
    HOST_SETTINGS and put back when the last sandbox goes down."""
    wanted = {"gc_thresh1": 4 * num_nodes, "gc_thresh2": 32 * num_nodes, "gc_thresh3": 64 * num_nodes}
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
