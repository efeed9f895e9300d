"""Is the directory one filesystem for every node, and a coherent one? One node wrote a file under a temporary
name, synced and renamed it and filled a small directory; every other node had looked the name up before
(what an attribute or lookup cache keeps) and then looked until it saw the file with its size and content and
the whole listing. A node that shares the filesystem and does not see it within the window reads stale data
at a resume, or waits forever for a file its peers see (NFS's attribute caching: KempnerForge #49)."""

from __future__ import annotations

from typing import List, Optional

from clustercheck.core.inventory import fold
from clustercheck.core.result import Finding, Status
from clustercheck.stages.storage.facts import StorageFacts

# Filesystem types that are served over the network: the same source on every node is one filesystem.
NETWORK_FS = ("nfs", "nfs4", "lustre", "gpfs", "beegfs", "cifs", "smb3", "ceph", "glusterfs", "9p", "afs",
              "orangefs", "panfs", "wekafs", "fuse.sshfs", "fuse.ceph", "fuse.glusterfs", "fuse.juicefs",
              "fuse.s3fs", "fuse.gcsfuse", "fuse.weka", "fuse.beegfs", "fuse.geesefs", "fuse.mountpoint-s3")


def identity(doc: dict) -> tuple:
    mount = (doc.get("filesystem") or {}).get("mount") or {}
    return mount.get("fstype", ""), mount.get("source", "")


def networked(doc: dict) -> bool:
    return identity(doc)[0] in NETWORK_FS


def readers(facts: StorageFacts) -> List[str]:
    return [n for n in facts.order if n != facts.writer and n in facts.coherence]


def shared(facts: StorageFacts) -> Optional[bool]:
    """True: every node sees one filesystem; False: a disk per node; None: neither (mixed, or not known)."""
    written = facts.coherence.get(facts.writer) or {}
    if not written.get("written_at") or facts.coherence_problems:
        return None if len(facts.order) > 1 else True
    looking = readers(facts)
    saw = [n for n in looking if "seen_after_s" in facts.coherence[n]]
    if len(saw) == len(looking):
        return True
    if not saw and not any(same_network_fs(facts, n) for n in looking):
        return False
    return None


def same_network_fs(facts: StorageFacts, node: str) -> bool:
    """The node's directory is on the writer's network filesystem (same type and source)."""
    mine, writer = facts.coherence.get(node) or {}, facts.coherence.get(facts.writer) or {}
    return networked(writer) and identity(mine) == identity(writer)


def coherence(facts: StorageFacts) -> List[Finding]:
    where = facts.directory or "each node's run directory"
    written = facts.coherence.get(facts.writer) or {}
    found = []
    if facts.coherence_problems:
        nodes = list(facts.coherence_problems)
        found.append(Finding("storage.coherence", Status.UNKNOWN, f"could not check {where} for coherence on "
                                                                  f"{fold(nodes)}",
                             [f"{n}: {why}" for n, why in facts.coherence_problems.items()],
                             "reach those nodes and run clustercheck storage again", nodes))
    if len(facts.order) < 2 or facts.writer not in facts.coherence:
        return found
    if not written.get("written_at"):
        error = written.get("write_error") or {}
        return found + [Finding("storage.coherence", Status.UNKNOWN,
                                f"could not check {where} for coherence: {facts.writer} could not write "
                                f"{error.get('path')} ({error.get('errno_name') or 'error'}: {error.get('message')})",
                                [], "see storage.write", [facts.writer])]
    looking = readers(facts)
    saw = {n: facts.coherence[n]["seen_after_s"] for n in looking if "seen_after_s" in facts.coherence[n]}
    blind = [n for n in looking if n not in saw]
    if not blind:
        slowest = max(saw.values(), default=0.0)
        return found + [Finding("storage.coherence", Status.OK,
                                f"{where}: shared by every node and coherent (a file renamed on {facts.writer} was "
                                f"seen whole by every node within {slowest:.1f} s)")]
    if not saw and not any(same_network_fs(facts, n) for n in blind):
        return found + [Finding("storage.coherence", Status.OK,
                                f"{where}: a disk per node (the same path, node-local); a resume needs every node's "
                                f"own checkpoint files there, and data a full copy on every node")]
    stale = [n for n in blind if same_network_fs(facts, n) or facts.coherence[n].get("saw", "absent") != "absent"]
    other = [n for n in blind if n not in stale]
    if stale:
        found.append(Finding("storage.coherence", Status.FAIL,
                             f"{where} is not coherent: {fold(stale)} did not see what {facts.writer} wrote and "
                             f"renamed within {facts.window:g} s",
                             [f"{n}: saw {facts.coherence[n].get('saw')} after {facts.coherence[n].get('looked_s')} s "
                              f"on {' '.join(identity(facts.coherence[n]))}" for n in stale][:8],
                             "the clients cache attributes and lookups (NFS: actimeo, lookupcache; FUSE: "
                             "attr_timeout, entry_timeout): mount with shorter caches, or have every rank wait for "
                             "the checkpoint's files (not only rank 0) before it loads", stale))
    if other:
        found.append(Finding("storage.coherence", Status.FAIL, f"{where} is shared by some nodes only",
                             [f"{fold(list(saw) + [facts.writer])}: see what {facts.writer} wrote",
                              f"{fold(other)}: do not"] + [f"{n}: {' '.join(identity(facts.coherence[n]))}"
                                                            for n in [facts.writer, *other]][:6],
                             "mount the same filesystem at that path on every node (or none): ranks that read or "
                             "resume from it see different files", other))
    return found
