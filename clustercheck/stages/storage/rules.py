"""The judges of `clustercheck storage`: pure functions from StorageFacts to Findings.

- a node that cannot write the directory is FAIL, with the path, the errno and the OS's words;
- the checkpoint the run will write (plan's accounting, planner/checkpoint.py, times --keep) must
  fit on every node's filesystem: FAIL before anyone trains;
- a node whose slots write or read at less than SLOW of the other nodes' median is named: the slow
  storage client (WARN; FAIL under SLOW_FAIL), and the same for the data directory's reads;
- a writer in D state longer than a few seconds is named with its node and what it waited on;
  one still there when the probe gave up is FAIL (a hang on the filesystem);
- a file one node wrote and renamed must be seen, with its size, content and directory listing,
  by every node that shares the filesystem within the window: FAIL otherwise;
- the save and load time of the checkpoint, estimated from each node's measured rates (the
  slowest node sets it, since every rank waits for the last at the save's barrier); a save over
  SAVE_SHARE of the time between two saves is WARN.
"""

from __future__ import annotations

from typing import Dict, List

from clustercheck.core.compare import median
from clustercheck.core.inventory import fold
from clustercheck.core.result import Finding, Status, run_judges
from clustercheck.stages.storage.coherence import coherence
from clustercheck.stages.storage.estimate import checkpoint_estimate, rates, too_little, what_it_means, writes
from clustercheck.stages.storage.facts import NodeStorage, StorageFacts

SLOW = 0.5           # a node's write, read or data rate below this share of the other nodes' median is named
SLOW_FAIL = 0.25
# A slow figure timed over less than this is one flush's luck as much as the node's: all nodes write at one moment,
# and a node whose data-sync comes behind the others' (one disk under several node-local directories, a shared
# server) waits for theirs. It warns, and fails only timed over longer (CI's loaded host: 64 MB in 0.45 s read
# 0.20x the others, on a healthy node).
MIN_FAIL_S = 1.0
SAVE_SHARE = 0.10    # a save longer than this share of the time between two saves
ERRNO_REMEDY = {
    "EROFS": "the filesystem is mounted read-only on that node: remount it read-write (mount -o remount,rw) or "
             "choose a writable directory",
    "EACCES": "the directory is not writable by this user on that node: fix its owner or mode, or choose another",
    "EPERM": "the directory is not writable by this user on that node: fix its owner or mode, or choose another",
    "ENOSPC": "the filesystem is full on that node: free space (df -h) or point checkpoints at a larger one",
    "EDQUOT": "this user's quota on that filesystem is spent: free space or ask for a larger quota",
    "ENOENT": "the directory does not exist on that node: create it (or mount the filesystem) on every node",
    "ENOTDIR": "the path is not a directory on that node",
}


def gb(value: float) -> str:
    """Bytes as people say them: 130.1 MB, 1.3 GB, 2.3 TB."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if value >= scale:
            return f"{value / scale:,.1f} {unit}"
    return f"{int(value)} bytes"


def secs(value: float) -> str:
    return f"{value:,.1f} s" if value >= 1 else f"{value:.2f} s"


def rate(value: float) -> str:
    return f"{value / 1e9:,.2f} GB/s" if value >= 1e9 else f"{value / 1e6:,.1f} MB/s"


def unmeasured(facts: StorageFacts) -> List[Finding]:
    if not facts.problems:
        return []
    nodes = list(facts.problems)
    return [Finding("storage.unmeasured", Status.UNKNOWN, f"could not measure the storage on {fold(nodes)}",
                    [f"{n}: {why}" for n, why in facts.problems.items()],
                    "reach those nodes (clustercheck env) and run clustercheck storage again", nodes)]


def cannot_write(facts: StorageFacts) -> List[Finding]:
    found = []
    for view in facts.views():
        for error in view.errors:
            name = error.get("errno_name") or "error"
            found.append(Finding("storage.write", Status.FAIL,
                                 f"{view.node} cannot write {error.get('path')}: {name} ({error.get('message')})",
                                 [f"{view.node}: {error.get('path')} on {describe(view)}: errno {error.get('errno')} "
                                  f"{name}"],
                                 ERRNO_REMEDY.get(name, "make the directory writable on that node, or choose one "
                                                        "that is"), [view.node]))
    return found


def describe(view: NodeStorage) -> str:
    mount = view.mount
    return f"{mount.get('fstype', '?')} {mount.get('source', '?')} at {mount.get('point', '?')}" if mount else "?"


def short_of_space(facts: StorageFacts, view: NodeStorage) -> bool:
    free = view.filesystem.get("free_bytes")
    return isinstance(free, int) and free < writes(facts).needed(view.node, facts.keep)


def fits(facts: StorageFacts) -> List[Finding]:
    plan = writes(facts)
    short, unknown, evidence = [], [], []
    for view in facts.views():
        free = view.filesystem.get("free_bytes")
        need = plan.needed(view.node, facts.keep)
        if not isinstance(free, int):
            unknown.append(view.node)
        elif free < need:
            short.append(view.node)
            evidence.append(f"{view.node}: {gb(free)} free on {view.path} ({describe(view)}), {gb(need)} needed")
    what = (f"{facts.keep} checkpoint{'s' if facts.keep > 1 else ''} of {facts.model} under {facts.mode} "
            f"({gb(plan.total)} each{'' if plan.shared else ' in all, split over the nodes'})")
    if short:
        return [Finding("storage.space", Status.FAIL, f"{what} will not fit on {fold(short)}", evidence,
                        "free space there, keep fewer checkpoints (--keep), or save to a larger filesystem "
                        "(--checkpoint-dir)", short)]
    if unknown:
        return [Finding("storage.space", Status.UNKNOWN, f"could not read the free space on {fold(unknown)}", [],
                        "check df -h on those nodes", unknown)]
    if not facts.views():
        return []
    least = min(facts.views(), key=lambda v: v.filesystem["free_bytes"])
    return [Finding("storage.space", Status.OK, f"{what} fit: the least free is {gb(least.filesystem['free_bytes'])} "
                                                f"on {least.node}")]


def slow_nodes(facts: StorageFacts, phase: str, what: str) -> List[Finding]:
    """The node whose slots together reach less than SLOW of the others' median."""
    measured = rates(facts, phase)
    short = {v.node for v in facts.views() if short_of_space(facts, v)}   # said by `fits`, for space alone
    small = {n: why for n, why in too_little(facts, phase).items() if n not in short}
    found = [Finding(f"storage.{phase}", Status.UNKNOWN, f"measured too little to judge {what} on {fold(list(small))}",
                     [f"{n}: {why}" for n, why in small.items()],
                     "see the findings above for why less was written there (free space); rerun with more --seconds "
                     "or --size to time it", list(small))] if small else []
    if len(measured) < 2:
        return found
    for node, mine in measured.items():
        peers = median([t.rate for n, t in measured.items() if n != node])
        if peers > 0 and mine.rate < SLOW * peers:
            short = mine.seconds < MIN_FAIL_S
            status = Status.FAIL if mine.rate < SLOW_FAIL * peers and not short else Status.WARN
            found.append(Finding(f"storage.{phase}", status,
                                 f"{node} {'was slower in a short measure' if short else 'is a slow storage client'}"
                                 f": {what} at {rate(mine.rate)}, {mine.rate / peers:.2f}x the other nodes' "
                                 f"{rate(peers)}" + (f" (timed over {mine.seconds:.2f} s: too short to tell a slow "
                                                     "client from a sync that came behind the others')" * short),
                                 [f"{node}: {gb(mine.bytes)} in {mine.seconds:.2f} s from "
                                  f"{facts.ranks.get(node, 1)} slots at once"]
                                 + [f"{n}: {rate(t.rate)}" for n, t in measured.items() if n != node][:6],
                                 ("rerun with more --seconds or --size to time it over longer; if it stays slow, "
                                  * short) + "check that node's link to the storage (ethtool, its switch port, tc), "
                                 "its mount options and its disk: every save waits for the slowest node", [node]))
    return found


def slow_writes(facts: StorageFacts) -> List[Finding]:
    return slow_nodes(facts, "write", "writing and syncing")


def slow_reads(facts: StorageFacts) -> List[Finding]:
    return slow_nodes(facts, "read", "reading back")


def slow_data(facts: StorageFacts) -> List[Finding]:
    found = slow_nodes(facts, "data", f"reading {facts.data_dir}")
    for view in facts.views():
        errors = {(s["data_error"].get("path"), s["data_error"].get("errno")): s["data_error"]
                  for s in view.slots if s.get("data_error")}
        for error in errors.values():
            name = error.get("errno_name") or "error"
            found.append(Finding("storage.data", Status.FAIL,
                                 f"{view.node} cannot read {error.get('path')}: {name} ({error.get('message')})",
                                 [], ERRNO_REMEDY.get(name, "make the data readable there"), [view.node]))
    if facts.data_dir and facts.views() and not any(v.data() and v.data().files for v in facts.views()) and not found:
        found.append(Finding("storage.data", Status.WARN, f"no file was read from {facts.data_dir}",
                             [f"{v.node}: {v.data().files if v.data() else 0} files" for v in facts.views()],
                             "check that the data directory holds the data set on every node"))
    return found


def d_state(facts: StorageFacts) -> List[Finding]:
    found = []
    for view in facts.views():
        for spell in view.doc.get("d_state") or []:
            stuck = spell.get("still")
            waits = spell.get("wchan") or "?"
            stack = " < ".join((spell.get("stack") or [])[:4])
            found.append(Finding("storage.hang", Status.FAIL if stuck else Status.WARN,
                                 f"a writer on {view.node} {'is still' if stuck else 'was'} in D state with no I/O "
                                 f"progress for {spell.get('seconds', 0):.1f} s on {view.path}, waiting in {waits}",
                                 [f"{view.node} slot {spell.get('slot')}: wchan {waits}"]
                                 + ([f"stack: {stack}"] if stack else []),
                                 "the filesystem stopped answering that node's I/O: check its mount (dmesg for "
                                 "'not responding' or hung-task lines), its server and that node's link to it",
                                 [view.node]))
        if view.doc.get("unfinished"):
            found.append(Finding("storage.hang", Status.FAIL, f"{len(view.doc['unfinished'])} writer(s) on {view.node} "
                                                              f"did not finish within their deadline on {view.path}",
                                 [], "the filesystem hangs on that node: check its mount and server", [view.node]))
    return found


def estimate(facts: StorageFacts) -> List[Finding]:
    if not facts.views():
        return []
    found = checkpoint_estimate(facts)
    if found is None:
        return [Finding("storage.estimate", Status.UNKNOWN, "could not estimate the checkpoint's save time: a node "
                                                            "measured nothing, or too little to judge", [],
                        "see the findings above")]
    said = save_line(facts, found)
    evidence = [what_it_means(facts, found["save_s"])] + [f"{n}: writes {gb(b)}"
                                                          for n, b in list(found["per_node"].items())[:6]]
    if facts.step_seconds and found["save_s"] > SAVE_SHARE * facts.save_every * facts.step_seconds:
        return [Finding("storage.estimate", Status.WARN, said, evidence,
                        "save less often, keep fewer ranks writing whole copies (a sharded mode), save asynchronously, "
                        "or use a faster filesystem for checkpoints", [found["save_node"]])]
    return [Finding("storage.estimate", Status.OK, said, evidence)]


def save_line(facts: StorageFacts, found: Dict) -> str:
    """The answer to --params in one line: the time per save, the node that sets it, the load."""
    nodes = len(found["per_node"])
    where = f", set by {found['save_node']}, the slowest of {nodes} nodes" if nodes > 1 else f" on {found['save_node']}"
    return (f"a checkpoint save of {facts.model} under {facts.mode} ({gb(found['bytes'])}) takes about "
            f"{secs(found['save_s'])}{where}; a load about {secs(found['load_s'])}"
            + (f" ({found['load_node']})" if nodes > 1 else ""))


JUDGES = (unmeasured, cannot_write, fits, coherence, slow_writes, slow_reads, slow_data, d_state, estimate)


def judge_storage(facts: StorageFacts) -> List[Finding]:
    return run_judges(JUDGES, facts)
