"""The ranks' records matched by process group and sequence number, judged (pure: the dumps are read already):
the first collective of each group that some ranks never entered, where every other rank waits, which rank stopped
outside any collective; a collective called with another op, other sizes or dtypes at one sequence number (a
desync), the odd ranks named against the majority; a collective every rank entered and none finished."""

from __future__ import annotations

import json
import operator
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

from clustercheck.flight.formats import INPUTS_MAY_DIFFER, KNOWN_VERSIONS, OUTPUTS_MAY_DIFFER
from clustercheck.flight.read import RankDump

GroupKey = Tuple[str, str]       # (pg name, desc) as every entry's process_group says


def op_name(entry: Dict) -> str:
    """"all_reduce" of "nccl:all_reduce", "send" of "nccl:send 0->1"."""
    return entry["profiling_name"].split(":", 1)[-1].split(" ", 1)[0]


def call_site(entry: Dict) -> str:
    """The rank's own line that called the collective: the first frame outside torch (pickle dumps carry frames)."""
    for frame in entry.get("frames") or ():
        name = str(frame.get("filename", ""))
        if "/torch/" not in name and not name.startswith("<"):
            return f"{name.rsplit('/', 1)[-1]}:{frame.get('line')} in {frame.get('name')}"
    return ""


def pending(entry: Dict) -> bool:
    return not entry.get("retired") and entry.get("state") != "completed"


def state_of(entry: Dict) -> str:
    return f"{entry.get('state')}, {'finished' if not pending(entry) else 'not finished'}"


@dataclass
class Group:
    key: GroupKey
    members: Set[int]
    inferred: bool                    # no pg_config ranks (Gloo): the members are the ranks with entries in it
    by_rank: Dict[int, Dict[int, List[Dict]]] = field(default_factory=dict)   # rank -> seq -> entries
    last_seq: Dict[int, int] = field(default_factory=dict)

    @property
    def label(self) -> str:
        name, desc = self.key
        who = "the world" if desc == "default_pg" else f"group {desc or name!r}"
        return f"{who} (pg {name}, ranks {fold_ranks(self.members)})"


def fold_ranks(ranks) -> str:
    ranks = sorted(ranks)
    out, start = [], None
    for i, rank in enumerate(ranks):
        start = rank if start is None else start
        if i + 1 == len(ranks) or ranks[i + 1] != rank + 1:
            out.append(str(start) if start == rank else f"{start}-{rank}")
            start = None
    return ",".join(out)


def _configured(dumps: List[RankDump]) -> Dict[str, Set[int]]:
    ranks: Dict[str, Set[int]] = {}
    for dump in dumps:
        for name, cfg in dump.pg_config.items():
            if isinstance(cfg, dict) and cfg.get("ranks") not in (None, "", "[]"):
                try:
                    ranks[str(name)] = set(json.loads(cfg["ranks"]) if isinstance(cfg["ranks"], str) else cfg["ranks"])
                except (ValueError, TypeError):
                    continue
    return ranks


def current_incarnation(entries: List[Dict], seq_key: str) -> List[Dict]:
    """The entries of the group's last incarnation on this rank. A process group destroyed and made again under
    the same name and description (the check inside the job's own, then the job's; an elastic restart) counts its
    collectives from 1 again, in the same recorder: matched with the earlier one's, they would read as a desync.
    A sequence number below the one before it starts a new incarnation."""
    start, previous = 0, None
    for index, entry in enumerate(entries):
        if entry["is_p2p"]:
            continue
        seq = entry[seq_key]
        if previous is not None and seq < previous:
            start = index
        previous = seq
    return entries[start:] if start else entries


def build_groups(dumps: List[RankDump]) -> Dict[GroupKey, Group]:
    configured = _configured(dumps)
    groups: Dict[GroupKey, Group] = {}
    world = {d.rank for d in dumps}
    for dump in dumps:
        seq_key, rank = KNOWN_VERSIONS[dump.version].seq_key, dump.rank
        by_pg: Dict[GroupKey, List[Dict]] = {}
        for entry in dump.entries:
            by_pg.setdefault(entry["process_group"], []).append(entry)
        for key, entries in by_pg.items():
            entries = current_incarnation(entries, seq_key)
            group = groups.get(key)
            if group is None:
                members = configured.get(key[0])
                group = groups[key] = Group(key, set(members or ()), members is None)
            seqs: Dict[int, List[Dict]] = {}
            for entry in entries:
                if not entry["is_p2p"]:
                    seqs.setdefault(entry[seq_key], []).append(entry)
            if not seqs:
                continue
            if group.inferred:
                group.members.add(rank)
            group.by_rank[rank] = seqs
            last = max(seqs)
            status = dump.pg_status.get(str(entries[-1].get("pg_id", -1)))   # the recorder's own count: the ring
            if status and "last_enqueued_collective" in status:              # buffer may have dropped entries
                last = max(last, status["last_enqueued_collective"])
            group.last_seq[rank] = last
    for group in groups.values():
        if group.key[1] == "default_pg" and group.inferred:
            group.members |= world
    return groups


@dataclass
class Incomplete:
    group: Group
    seq: int
    op: str
    entered: List[int]
    missing: List[int]
    no_dump: List[int]
    created_ns: int


def incomplete(groups: Dict[GroupKey, Group], dumped: Set[int]) -> List[Incomplete]:
    """Per group, the first collective some of its dumped members never entered (its members without a dump
    named apart: their place is not known)."""
    found = []
    for group in groups.values():
        ranks = [r for r in sorted(group.members & dumped)]
        if len(ranks) < 2 and not (group.members - dumped):
            continue
        last = {r: group.last_seq.get(r, 0) for r in ranks}
        if not last:
            continue
        top, first = max(last.values()), min(last.values()) + 1
        if first > top:
            continue
        entered = [r for r in ranks if last[r] >= first]
        entries = [e for r in entered for e in group.by_rank.get(r, {}).get(first, [])]
        op = op_name(entries[0]) if entries else "a collective"
        found.append(Incomplete(group, first, op, entered, [r for r in ranks if last[r] < first],
                                sorted(group.members - dumped), min((e["time_created_ns"] for e in entries),
                                                                    default=0)))
    return sorted(found, key=lambda i: i.created_ns)


def current(dump: RankDump) -> Optional[Dict]:
    """The collective this rank was in when it dumped (its last entry, not finished), else None."""
    return dump.entries[-1] if dump.entries and pending(dump.entries[-1]) else None


_RAW = operator.itemgetter("profiling_name", "input_sizes", "output_sizes", "input_dtypes", "output_dtypes")


def signature(entries: List[Dict]) -> Tuple:
    out = []
    for e in entries:
        op = op_name(e)
        out.append((op, None if op in INPUTS_MAY_DIFFER else e["input_sizes"],
                    None if op in OUTPUTS_MAY_DIFFER else e["output_sizes"], e["input_dtypes"], e["output_dtypes"]))
    return tuple(out)


@dataclass
class Mismatch:
    group: Group
    seq: int
    by_sig: List[Tuple[str, List[int], Dict]]      # (what, ranks, one entry) majority first
    later: int                                     # mismatching sequence numbers after this one


def mismatches(groups: Dict[GroupKey, Group]) -> List[Mismatch]:
    """Per group, the first sequence number whose ranks' op, sizes or dtypes differ; the odd ranks against the
    majority. One rank is the baseline; the others are compared with it entry by entry (cheap), and only a
    sequence number that differs is grouped by what each rank called."""
    found = []
    for group in groups.values():
        ranks = sorted(group.by_rank)
        if len(ranks) < 2:
            continue
        base = group.by_rank[ranks[0]]
        raw_base = {seq: list(map(_RAW, entries)) for seq, entries in base.items()}
        bad: Set[int] = set()
        for rank in ranks[1:]:
            for seq, entries in group.by_rank[rank].items():
                theirs = raw_base.get(seq)    # the same op, sizes and dtypes as they are: equal, nothing to weigh
                if theirs is not None and list(map(_RAW, entries)) != theirs \
                        and signature(entries) != signature(base[seq]):
                    bad.add(seq)
        if not bad:
            continue
        seq = min(bad)
        kinds: Dict[str, Tuple[List[int], Dict]] = {}
        for rank in ranks:
            entries = group.by_rank[rank].get(seq)
            if entries:
                kinds.setdefault(repr(signature(entries)), ([], entries[0]))[0].append(rank)
        by_sig = sorted(((what, ranks_, entry) for what, (ranks_, entry) in kinds.items()),
                        key=lambda k: (-len(k[1]), k[1]))
        found.append(Mismatch(group, seq, by_sig, len(bad) - 1))
    return found
