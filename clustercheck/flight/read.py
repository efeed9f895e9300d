"""Flight Recorder dumps read without running anything they hold: the JSON form with json, the pickle form with an
unpickler that builds only the plain values a dump is made of and refuses every class (a pickle that names one,
os.system's reduce among them, is refused, never called). torch.load and pickle.load are never used.

What cannot be judged is said with the file, one line each: a dump cut short or corrupt, a file that is not a dump,
a recorder version this code does not know, a rank its name does not give, and dumps of two jobs in one directory
(their recorder versions, process groups or world sizes differ, two files claim one rank, or their records lie
further apart in time than any collective waits).

Each dump is summarised as it is read (summary.py: per process group, what was called at each sequence number),
so that its entries need not be kept. read_dumps can read them in a pool of worker processes (`workers`); a worker
reads with the same unpickler and hands back only what it built from the dump's plain values.
"""

from __future__ import annotations

import gc
import io
import json
import multiprocessing
import os
import pickle
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple, Union

from clustercheck.flight.formats import (DUMP_KEYS, ENTRY_KEYS, KNOWN_VERSIONS, MAX_DUMP_BYTES, SUFFIXES)
from clustercheck.flight.summary import GroupKey, Track, from_call, pick, tracks_of, whole

_JSON_HEAD = re.compile(rb'^\s*\{\s*"(?:comm_lib_version|entries|nccl_version|nccl_comm_state)"\s*:')
_RANK = re.compile(r"(\d+)$")
FILES_PER_WORKER = 16        # fewer files than this per worker are read here: a pool's start would cost more
_SAFE_GLOBALS = frozenset(("builtins", name) for name in
                          ("dict", "list", "tuple", "set", "frozenset", "str", "int", "float", "bool", "bytes"))


class Unreadable(Exception):
    """One line: why this file cannot be judged."""


class PlainUnpickler(pickle.Unpickler):
    """Builds only dicts, lists, tuples, strings, numbers, booleans and None (what torch's C++ pickler writes a dump
    with: no class at all); any other global a pickle names is refused before it is looked up."""

    def find_class(self, module: str, name: str):
        if (module, name) in _SAFE_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"it names {module}.{name}, which no Flight Recorder dump holds")


def form_of(head: bytes) -> str:
    """"pickle" or "json" where the file's first bytes are a dump's, else ""."""
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return "pickle"
    return "json" if _JSON_HEAD.match(head) else ""


@dataclass
class RankDump:
    """One rank's dump as the judge reads it: its entries summarised per process group (`tracks`), its first and
    last entries whole."""
    path: str
    rank: int
    form: str
    version: str
    pg_config: Dict
    pg_status: Dict
    count: int                          # entries
    first: Optional[Dict]
    last: Optional[Dict]
    timeout_ns: int                     # the longest wait of its last 50 entries
    tracks: Dict[GroupKey, Track]
    comm_lib: str = ""
    held: Optional[List[Dict]] = None   # its entries, where they came in memory (a live rank's answer)

    @property
    def span_ns(self) -> Tuple[int, int]:
        return (self.first["time_created_ns"], self.last["time_created_ns"]) if self.count else (0, 0)

    def collective(self, key: GroupKey, index: int) -> Dict:
        """The entry at `index` of the group's Track, whole (with its frames): from the entries held, else read
        again from the file; made from the Track alone where the file no longer says the same."""
        track, seq_key = self.tracks[key], KNOWN_VERSIONS[self.version].seq_key
        entries = self.held
        if entries is None:
            try:
                entries = _load(self.path, self.form).get("entries")
            except (Unreadable, OSError, AttributeError):
                entries = None
        found = None
        if isinstance(entries, list):
            try:
                found = pick(entries, self.form, seq_key, key, track, index)
            except (KeyError, TypeError, AttributeError):
                found = None
        return found or from_call(track.calls[index], seq_key, track.seqs[index], track.times[index])


@dataclass
class FlightRead:
    dumps: List[RankDump] = field(default_factory=list)          # one job's, one per rank
    unreadable: List[Tuple[str, str]] = field(default_factory=list)   # (file, why)
    other_job: List[Tuple[str, str]] = field(default_factory=list)    # (file, why it is not this job's)
    notes: List[str] = field(default_factory=list)


def rank_of(path: str) -> Optional[int]:
    """The rank torch's file name ends with (`<prefix><rank>`, here with .json or .pkl after it)."""
    stem = os.path.basename(path)
    for suffix in SUFFIXES:
        stem = stem[: -len(suffix)] if stem.endswith(suffix) else stem
    match = _RANK.search(stem)
    return int(match.group(1)) if match else None


def _load(path: str, form: str) -> Dict:
    with open(path, "rb") as handle:
        data = handle.read(MAX_DUMP_BYTES + 1)
    if len(data) > MAX_DUMP_BYTES:
        raise Unreadable(f"over {MAX_DUMP_BYTES >> 20} MB: not one rank's dump")
    try:
        if form == "json":
            return json.loads(data)
        # buffered: the C unpickler reads a BytesIO a few bytes a call, a buffered reader by peeking (4x faster)
        return PlainUnpickler(io.BufferedReader(io.BytesIO(data))).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError,
            MemoryError, RecursionError, UnicodeDecodeError) as exc:
        what = "the pickle" if form == "pickle" else "the JSON"
        raise Unreadable(f"{what} cannot be read, cut short or corrupt ({type(exc).__name__}: {str(exc)[:120]})")


def _as_ints(status: Dict) -> Dict:
    """pg_status with its numbers as numbers (the JSON form writes them as strings)."""
    return {str(pg): {key: int(value) for key, value in fields.items()} for pg, fields in status.items()}


def read_dump(path: str, form: str) -> RankDump:
    rank = rank_of(path)
    if rank is None:
        raise Unreadable("its name does not end with the rank (torch names a dump <prefix><rank>)")
    return dump_of(_load(path, form), path, rank, form)


def dump_of(doc, where: str, rank: int, form: str, hold: bool = False) -> RankDump:
    """One rank's dump from its document as loaded (a file's, or what a rank's hook answered `clustercheck stacks`
    with, in the JSON form's shapes), its entries summarised, and held where `hold`; Unreadable naming what is wrong
    with it."""
    if not isinstance(doc, dict) or any(key not in doc for key in DUMP_KEYS):
        raise Unreadable("not a Flight Recorder dump (no version and entries)")
    version = str(doc["version"])
    if version not in KNOWN_VERSIONS:
        raise Unreadable(f"recorder version {version!r}, which this clustercheck does not know (it reads "
                         f"{', '.join(KNOWN_VERSIONS)}): its fields may mean other things")
    entries = doc["entries"]
    known = KNOWN_VERSIONS[version]
    needed = ENTRY_KEYS + (known.seq_key, known.p2p_seq_key)
    if not isinstance(entries, list) or any(not isinstance(e, dict) or any(k not in e for k in needed)
                                            for e in entries[:1] + entries[-1:]):
        raise Unreadable(f"entries without the fields of version {version}")
    try:
        tracks = tracks_of(entries, form, known.seq_key)
        timeout_ms = max((e.get("timeout_ms") or 0 for e in entries[-50:]), default=0)
    except (KeyError, TypeError, AttributeError):
        raise Unreadable(f"entries without the fields of version {version}") from None
    try:
        status = _as_ints(doc.get("pg_status") or {})
    except (TypeError, ValueError, AttributeError):
        raise Unreadable("its pg_status is not numbers") from None
    first, last = (whole(entries[0], form), whole(entries[-1], form)) if entries else (None, None)
    return RankDump(where, rank, form, version, doc.get("pg_config") or {}, status, len(entries), first, last,
                    timeout_ms * 1_000_000, tracks, str(doc.get("comm_lib_version") or doc.get("nccl_version") or ""),
                    entries if hold else None)


def _config_key(dump: RankDump) -> Tuple:
    """The job's process groups as the dump's pg_config says (NCCL fills it; Gloo leaves one empty row)."""
    return tuple(sorted((str(name), str(cfg.get("desc")), str(cfg.get("ranks")))
                        for name, cfg in dump.pg_config.items() if isinstance(cfg, dict) and cfg.get("ranks") != "[]"))


def _record_key(dump: RankDump) -> Tuple:
    ends = [dump.first, dump.last] if dump.count else []
    return tuple((e["record_id"], e["time_created_ns"]) for e in ends)


def one_job(dumps: List[RankDump]) -> Tuple[List[RankDump], List[Tuple[str, str]]]:
    """The dumps of the job most of them belong to, and the others with why: another recorder version, other
    process groups (pg_config), a rank claimed twice, records further apart in time than any collective waits."""
    def majority(key):
        groups: Dict = {}
        for dump in kept:
            groups.setdefault(key(dump), []).append(dump)
        return max(groups.values(), key=lambda g: (len(g), -min(d.rank for d in g)))

    kept, odd = list(dumps), []
    if not kept:
        return [], []
    for why, key in (("recorder version", lambda d: d.version), ("process groups (pg_config)", _config_key)):
        best = majority(key)
        odd += [(d.path, f"another job's dump: its {why} differ from the other {len(best)} dump(s)'")
                for d in kept if d not in best]
        kept = best
    by_rank: Dict[int, List[RankDump]] = {}
    for dump in kept:
        by_rank.setdefault(dump.rank, []).append(dump)
    for rank, claims in by_rank.items():
        claims.sort(key=lambda d: d.form != "pickle")     # one record in both forms: the pickle has the frames
        same = [d for d in claims[1:] if _record_key(d) == _record_key(claims[0])]
        odd += [(d.path, f"another job's dump: rank {rank} is also {claims[0].path}") for d in claims[1:]
                if d not in same]
    kept = sorted((claims[0] for claims in by_rank.values()), key=lambda d: d.rank)
    spans = sorted((d for d in kept if d.count), key=lambda d: d.span_ns[0])
    wait_ns = max((d.timeout_ns for d in kept), default=0) or 30 * 60 * 10 ** 9
    clusters: List[List[RankDump]] = []
    for dump in spans:      # records of one job overlap in time, or lie within one collective's wait of each other
        if clusters and dump.span_ns[0] - max(d.span_ns[1] for d in clusters[-1]) <= wait_ns:
            clusters[-1].append(dump)
        else:
            clusters.append([dump])
    if len(clusters) > 1:
        best = max(clusters, key=len)
        odd += [(d.path, "another job's dump: its records lie hours apart from the other "
                         f"{len(best)} dump(s)' (more than the {wait_ns / 6e10:.0f} min a collective waits)")
                for cluster in clusters if cluster is not best for d in cluster]
        kept = [d for d in kept if d in best or not d.count]
    return kept, odd


def from_answers(answers: List[Tuple[str, int, Dict]]) -> FlightRead:
    """[(where, rank, document)] that live ranks answered with (`clustercheck stacks`), one job's kept."""
    result, dumps = FlightRead(), []
    for where, rank, doc in answers:
        if doc.get("problem"):
            result.unreadable.append((where, f"its record could not be read on the node: {doc['problem']}"))
            continue
        try:
            dumps.append(dump_of(doc, where, rank, "json", hold=True))
        except Unreadable as why:
            result.unreadable.append((where, str(why)))
    result.dumps, result.other_job = one_job(dumps)
    return result


def read_dumps(paths: List[str], workers: Optional[int] = 1) -> FlightRead:
    """Every dump among the files (each path a file torch's recorder wrote), one job's kept. Where one folder holds
    a rank's two forms (`<prefix>3` and `<prefix>3.json`), the JSON is read and the pickle is not. `workers`: how
    many processes read them (at most one per FILES_PER_WORKER files; None: os.cpu_count(); 1, the default: this
    one, since a pool measured slower here: docs/performance.md, issue 50)."""
    result = FlightRead()
    names, todo = set(paths), []
    for path in paths:
        if path + ".json" in names:
            result.notes.append(f"{path}: its JSON form beside it is read instead")
        else:
            todo.append(path)
    count = min((os.cpu_count() or 1) if workers is None else workers, len(todo) // FILES_PER_WORKER)
    enabled = gc.isenabled()
    gc.disable()         # the summaries coming back are many small containers, none cyclic: no collection needed
    try:
        outcomes = _pooled(todo, count) if count > 1 else None
        if outcomes is None:
            outcomes = [read_file(path) for path in todo]
    finally:
        if enabled:
            gc.enable()
    dumps: List[RankDump] = []
    for outcome in outcomes:
        if isinstance(outcome, RankDump):
            dumps.append(outcome)
        else:
            result.unreadable.append(outcome)
    result.dumps, result.other_job = one_job(dumps)
    return result


def read_file(path: str) -> Union[RankDump, Tuple[str, str]]:
    """One file's dump, else (the file, why it cannot be judged)."""
    enabled = gc.isenabled()
    gc.disable()         # a dump is 100,000 small containers, none of them cyclic: the collector would only slow this
    try:
        with open(path, "rb") as handle:
            form = form_of(handle.read(16))
        return read_dump(path, form or "json")
    except Unreadable as why:
        return path, str(why)
    except OSError as exc:
        return path, f"cannot be read ({exc.strerror})"
    finally:
        if enabled:
            gc.enable()


def _pooled(paths: List[str], count: int) -> Optional[List[Union[RankDump, Tuple[str, str]]]]:
    """read_file of each path in `count` worker processes, in order; None where no pool can be started here (no
    semaphores, no processes left): the caller reads them itself."""
    try:
        pool = multiprocessing.get_context().Pool(count)
    except (OSError, ImportError, ValueError):
        return None
    with pool:
        return pool.map(read_file, paths, chunksize=max(1, len(paths) // (count * 8)))
