"""The ranks' records matched by process group and sequence number, judged (pure: the dumps are read already):
the first collective of each group that some ranks never entered, where every other rank waits, which rank stopped
outside any collective; a collective called with another op, other sizes or dtypes at one sequence number (a
desync), the odd ranks named against the majority; a collective every rank entered and none finished. It reads
each rank's entries as summary.py summarised them, per group: what was called at each sequence number."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

from clustercheck.flight.formats import INPUTS_MAY_DIFFER, OUTPUTS_MAY_DIFFER
from clustercheck.flight.read import RankDump
from clustercheck.flight.summary import GroupKey, Track


def op_of(profiling_name: str) -> str:
    """"all_reduce" of "nccl:all_reduce", "send" of "nccl:send 0->1"."""
    return profiling_name.split(":", 1)[-1].split(" ", 1)[0]


def op_name(entry: Dict) -> str:
    return op_of(entry["profiling_name"])


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
    by_rank: Dict[int, Track] = field(default_factory=dict)       # rank -> its collectives in this group
    last_seq: Dict[int, int] = field(default_factory=dict)
    dumps: Dict[int, RankDump] = field(default_factory=dict)      # rank -> its dump, for an entry wanted whole

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


def build_groups(dumps: List[RankDump]) -> Dict[GroupKey, Group]:
    configured = _configured(dumps)
    groups: Dict[GroupKey, Group] = {}
    world = {d.rank for d in dumps}
    for dump in dumps:
        rank = dump.rank
        for key, track in dump.tracks.items():
            group = groups.get(key)
            if group is None:
                members = configured.get(key[0])
                group = groups[key] = Group(key, set(members or ()), members is None)
            if not track.seqs:
                continue
            if group.inferred:
                group.members.add(rank)
            group.by_rank[rank], group.dumps[rank] = track, dump
            last = track.seqs[-1]
            status = dump.pg_status.get(str(track.pg_id))           # the recorder's own count: the ring
            if status and "last_enqueued_collective" in status:     # buffer may have dropped entries
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
        at = [(track, track.at(first)) for track in map(group.by_rank.get, entered) if track is not None]
        calls = [track.calls[i] for track, where in at for i in where]
        op = op_of(calls[0][0]) if calls else "a collective"
        found.append(Incomplete(group, first, op, entered, [r for r in ranks if last[r] < first],
                                sorted(group.members - dumped), min((track.times[i] for track, where in at
                                                                     for i in where), default=0)))
    return sorted(found, key=lambda i: i.created_ns)


def current(dump: RankDump) -> Optional[Dict]:
    """The collective this rank was in when it dumped (its last entry, not finished), else None."""
    return dump.last if dump.last is not None and pending(dump.last) else None


def signature(calls: List[Tuple]) -> Tuple:
    """What the ranks of a collective must agree on, of the calls (summary.CALL) recorded at one sequence number."""
    out = []
    for name, input_sizes, output_sizes, input_dtypes, output_dtypes in calls:
        op = op_of(name)
        out.append((op, None if op in INPUTS_MAY_DIFFER else input_sizes,
                    None if op in OUTPUTS_MAY_DIFFER else output_sizes, input_dtypes, output_dtypes))
    return tuple(out)


@dataclass
class Mismatch:
    group: Group
    seq: int
    by_sig: List[Tuple[str, List[int], Dict]]      # (what, ranks, one entry) majority first
    later: int                                     # mismatching sequence numbers after this one


def _differing(mine: Track, base: Track, raw_base: Optional[Dict[int, List[Tuple]]]) -> Set[int]:
    """The sequence numbers both ranks recorded whose calls differ as they are (op, sizes, dtypes); where both hold
    one entry per number, none missing, the common run is compared at once."""
    if mine.contiguous and base.contiguous:
        low, high = max(mine.seqs[0], base.seqs[0]), min(mine.seqs[-1], base.seqs[-1])
        if low > high:
            return set()
        ours = mine.calls[low - mine.seqs[0]: high - mine.seqs[0] + 1]
        theirs = base.calls[low - base.seqs[0]: high - base.seqs[0] + 1]
        if ours == theirs:
            return set()
        return {low + i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b}
    raw_base = raw_base if raw_base is not None else base.by_seq()
    return {seq for seq, calls in mine.by_seq().items() if seq in raw_base and calls != raw_base[seq]}


def mismatches(groups: Dict[GroupKey, Group]) -> List[Mismatch]:
    """Per group, the first sequence number whose ranks' op, sizes or dtypes differ; the odd ranks against the
    majority. One rank is the baseline; the others are compared with it (cheap: a run of calls at once where it
    can), and only a sequence number that differs is grouped by what each rank called."""
    found = []
    for group in groups.values():
        ranks = sorted(group.by_rank)
        if len(ranks) < 2:
            continue
        base = group.by_rank[ranks[0]]
        everyone_contiguous = all(group.by_rank[r].contiguous for r in ranks)
        raw_base = None if everyone_contiguous else base.by_seq()
        bad: Set[int] = set()
        for rank in ranks[1:]:
            mine = group.by_rank[rank]
            bad |= {seq for seq in _differing(mine, base, raw_base) if seq not in bad and
                    signature(_calls_at(mine, seq)) != signature(_calls_at(base, seq))}
        if not bad:
            continue
        seq = min(bad)
        kinds: Dict[str, Tuple[List[int], Tuple[int, int]]] = {}
        for rank in ranks:
            where = group.by_rank[rank].at(seq)
            if where:
                kinds.setdefault(repr(signature(_calls_at(group.by_rank[rank], seq))), ([], (rank, where[0])))[0] \
                    .append(rank)
        by_sig = sorted(((what, ranks_, group.dumps[rank].collective(group.key, index))
                         for what, (ranks_, (rank, index)) in kinds.items()), key=lambda k: (-len(k[1]), k[1]))
        found.append(Mismatch(group, seq, by_sig, len(bad) - 1))
    return found


def _calls_at(track: Track, seq: int) -> List[Tuple]:
    return [track.calls[i] for i in track.at(seq)]
