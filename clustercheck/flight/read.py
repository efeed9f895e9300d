"""Flight Recorder dumps read without running anything they hold: the JSON form with json, the pickle form with an
unpickler that builds only the plain values a dump is made of and refuses every class (a pickle that names one,
os.system's reduce among them, is refused, never called). torch.load and pickle.load are never used.

What cannot be judged is said with the file, one line each: a dump cut short or corrupt, a file that is not a dump,
a recorder version this code does not know, a rank its name does not give, and dumps of two jobs in one directory
(their recorder versions, process groups or world sizes differ, two files claim one rank, or their records lie
further apart in time than any collective waits).
"""

from __future__ import annotations

import gc
import io
import json
import os
import pickle
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from clustercheck.flight.formats import (DUMP_KEYS, ENTRY_KEYS, KNOWN_VERSIONS, MAX_DUMP_BYTES, SUFFIXES)

_JSON_HEAD = re.compile(rb'^\s*\{\s*"(?:comm_lib_version|entries|nccl_version|nccl_comm_state)"\s*:')
_RANK = re.compile(r"(\d+)$")
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
    path: str
    rank: int
    form: str
    version: str
    pg_config: Dict
    pg_status: Dict
    entries: List[Dict]
    comm_lib: str = ""

    @property
    def span_ns(self) -> Tuple[int, int]:
        return (self.entries[0]["time_created_ns"], self.entries[-1]["time_created_ns"]) if self.entries else (0, 0)

    @property
    def timeout_ns(self) -> int:
        return max((e.get("timeout_ms") or 0 for e in self.entries[-50:]), default=0) * 1_000_000


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
        return PlainUnpickler(io.BytesIO(data)).load()
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


def dump_of(doc, where: str, rank: int, form: str) -> RankDump:
    """One rank's dump from its document as loaded (a file's, or what a rank's hook answered `clustercheck stacks`
    with, in the JSON form's shapes); Unreadable naming what is wrong with it."""
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
    if form == "json":
        for entry in entries:
            entry["process_group"] = tuple(entry["process_group"])
    try:
        status = _as_ints(doc.get("pg_status") or {})
    except (TypeError, ValueError, AttributeError):
        raise Unreadable("its pg_status is not numbers") from None
    return RankDump(where, rank, form, version, doc.get("pg_config") or {}, status, entries,
                    str(doc.get("comm_lib_version") or doc.get("nccl_version") or ""))


def _config_key(dump: RankDump) -> Tuple:
    """The job's process groups as the dump's pg_config says (NCCL fills it; Gloo leaves one empty row)."""
    return tuple(sorted((str(name), str(cfg.get("desc")), str(cfg.get("ranks")))
                        for name, cfg in dump.pg_config.items() if isinstance(cfg, dict) and cfg.get("ranks") != "[]"))


def _record_key(dump: RankDump) -> Tuple:
    ends = dump.entries[:1] + dump.entries[-1:]
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
    spans = sorted((d for d in kept if d.entries), key=lambda d: d.span_ns[0])
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
        kept = [d for d in kept if d in best or not d.entries]
    return kept, odd


def from_answers(answers: List[Tuple[str, int, Dict]]) -> FlightRead:
    """[(where, rank, document)] that live ranks answered with (`clustercheck stacks`), one job's kept."""
    result, dumps = FlightRead(), []
    for where, rank, doc in answers:
        if doc.get("problem"):
            result.unreadable.append((where, f"its record could not be read on the node: {doc['problem']}"))
            continue
        try:
            dumps.append(dump_of(doc, where, rank, "json"))
        except Unreadable as why:
            result.unreadable.append((where, str(why)))
    result.dumps, result.other_job = one_job(dumps)
    return result


def read_dumps(paths: List[str]) -> FlightRead:
    """Every dump among the files (each path a file torch's recorder wrote), one job's kept. Where one folder holds
    a rank's two forms (`<prefix>3` and `<prefix>3.json`), the JSON is read and the pickle is not."""
    enabled = gc.isenabled()
    gc.disable()         # millions of small containers, none of them cyclic: the collector would only slow this
    try:
        return _read_dumps(paths)
    finally:
        if enabled:
            gc.enable()


def _read_dumps(paths: List[str]) -> FlightRead:
    result = FlightRead()
    dumps: List[RankDump] = []
    names = set(paths)
    for path in paths:
        if path + ".json" in names:
            result.notes.append(f"{path}: its JSON form beside it is read instead")
            continue
        try:
            with open(path, "rb") as handle:
                form = form_of(handle.read(16))
            dumps.append(read_dump(path, form or "json"))
        except Unreadable as why:
            result.unreadable.append((path, str(why)))
        except OSError as exc:
            result.unreadable.append((path, f"cannot be read ({exc.strerror})"))
    result.dumps, result.other_job = one_job(dumps)
    return result
