"""One rank's Flight Recorder entries summarised for the judge, so that a thousand ranks' dumps are judged without
keeping two million entries whole: per process group, the collectives of its current incarnation as parallel lists
(sequence numbers, what was called: op, sizes and dtypes, and when it was created), built with C-level maps over the
entries, never a Python loop or a dict per entry. The dump's first and last entries are kept whole; an entry wanted
whole later (a desync's call site) is taken again from the dump it came from (`RankDump.collective`)."""

from __future__ import annotations

import operator
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from itertools import compress, islice, repeat
from typing import Dict, List, Optional, Tuple

GroupKey = Tuple[str, str]       # (pg name, desc) as every entry's process_group says

# what the ranks of one collective must agree on, as the entry says it: (profiling_name, input_sizes, output_sizes,
# input_dtypes, output_dtypes)
CALL = operator.itemgetter("profiling_name", "input_sizes", "output_sizes", "input_dtypes", "output_dtypes")
_PG = operator.itemgetter("process_group")
_P2P = operator.itemgetter("is_p2p")
_TIME = operator.itemgetter("time_created_ns")
_FEW_GROUPS = 16         # up to this many groups in one dump, each is picked out by one C-level pass


@dataclass
class Track:
    """One rank's collectives in one process group (the entries not point-to-point of its current incarnation), in
    the order recorded: their sequence numbers never decrease."""
    seqs: List[int]
    calls: List[Tuple]               # CALL of each
    times: List[int]                 # time_created_ns of each
    pg_id: object                    # the pg_id of the group's last entry on this rank (pg_status is by pg_id)
    contiguous: bool                 # seqs are seqs[0], seqs[0] + 1, ...: one entry each, none missing

    def at(self, seq: int) -> range:
        """The positions of the entries with this sequence number."""
        if self.contiguous:
            index = seq - self.seqs[0] if self.seqs else -1
            return range(index, index + 1) if 0 <= index < len(self.seqs) else range(0)
        return range(bisect_left(self.seqs, seq), bisect_right(self.seqs, seq))

    def by_seq(self) -> Dict[int, List[Tuple]]:
        """sequence number -> the calls recorded with it."""
        out: Dict[int, List[Tuple]] = {}
        for seq, call in zip(self.seqs, self.calls):
            out.setdefault(seq, []).append(call)
        return out


def by_group(entries: List[Dict], form: str) -> Dict[GroupKey, List[Dict]]:
    """The entries of each process group, the groups in the order their first entries come (JSON writes a group
    as a list: made a tuple, as the pickle has it)."""
    keys = list(map(tuple, map(_PG, entries))) if form == "json" else list(map(_PG, entries))
    groups = dict.fromkeys(keys)
    if len(groups) == 1:
        return {keys[0]: entries}
    if len(groups) <= _FEW_GROUPS:
        return {key: list(compress(entries, map(operator.eq, keys, repeat(key)))) for key in groups}
    out: Dict[GroupKey, List[Dict]] = {}
    for key, entry in zip(keys, entries):
        out.setdefault(key, []).append(entry)
    return out


def collectives(entries: List[Dict], seq_key: str) -> List[Dict]:
    """The group's entries not point-to-point, of its last incarnation on this rank. A process group destroyed and
    made again under the same name and description (the check inside the job's own, then the job's; an elastic
    restart) counts its collectives from 1 again, in the same recorder: matched with the earlier one's, they would
    read as a desync. A sequence number below the one before it starts a new incarnation."""
    flags = list(map(_P2P, entries))
    kept = list(compress(entries, map(operator.not_, flags))) if any(flags) else entries
    seqs = list(map(operator.itemgetter(seq_key), kept))
    if all(map(operator.le, seqs, islice(seqs, 1, None))):
        return kept
    start = max(i for i in range(1, len(seqs)) if seqs[i] < seqs[i - 1])
    return kept[start:]


def track_of(entries: List[Dict], seq_key: str) -> Track:
    kept = collectives(entries, seq_key)
    seqs = list(map(operator.itemgetter(seq_key), kept))
    contiguous = bool(seqs) and seqs[-1] - seqs[0] == len(seqs) - 1 and all(map(operator.lt, seqs,
                                                                               islice(seqs, 1, None)))
    return Track(seqs, list(map(CALL, kept)), list(map(_TIME, kept)), entries[-1].get("pg_id", -1), contiguous)


def tracks_of(entries: List[Dict], form: str, seq_key: str) -> Dict[GroupKey, Track]:
    """Every process group's Track on this rank; KeyError, TypeError or AttributeError where an entry lacks the
    fields or is not a dict."""
    return {key: track_of(group, seq_key) for key, group in by_group(entries, form).items()}


def whole(entry: Dict, form: str) -> Dict:
    """An entry as the judge reads it: the JSON form's process_group as a tuple."""
    if form == "json" and isinstance(entry.get("process_group"), list):
        return dict(entry, process_group=tuple(entry["process_group"]))
    return entry


def from_call(call: Tuple, seq_key: str, seq: int, time_ns: int) -> Dict:
    """An entry made again from its Track alone (its dump no longer says the same): no frames, so no call site."""
    name, input_sizes, output_sizes, input_dtypes, output_dtypes = call
    return {"profiling_name": name, "input_sizes": input_sizes, "output_sizes": output_sizes,
            "input_dtypes": input_dtypes, "output_dtypes": output_dtypes, seq_key: seq, "time_created_ns": time_ns}


def pick(entries: List[Dict], form: str, seq_key: str, key: GroupKey, track: Track, index: int) -> Optional[Dict]:
    """The entry at `index` of the group's Track among a dump's entries, None where they no longer hold it (the
    file was written again since it was summarised)."""
    group = by_group(entries, form).get(key)
    kept = collectives(group, seq_key) if group else []
    if index < len(kept) and kept[index].get(seq_key) == track.seqs[index] and CALL(kept[index]) == track.calls[index]:
        return whole(kept[index], form)
    return None
