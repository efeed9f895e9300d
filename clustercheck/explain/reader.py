"""A user's own job logs read as the classifier reads a run: every line that could say something, with the node
and rank it came from, streamed in chunks so that a 1 GB log is read at disk speed in bounded memory.

Where a line came from is recovered from what the log says: torchrun's `[rank3]:` and `[default1]:`, srun's
`--label` (`3: `), Open MPI's `--tag-output` (`[1,3]<stderr>:`), a host prefix (pdsh, DeepSpeed's launcher:
`gpu-node-2: `), NCCL's `host:pid:tid [dev]`, Ray's `(pid=N, ip=10.0.0.2)`, or the file's own name in a
directory of per-rank files (`node3-rank12.log`, `slurm-1234_5.out`). What cannot be told is one node, the file.

Bad input is said before anything is read: a missing path, a directory of more files than a job writes, an
empty or binary file, a log that is not UTF-8 (UTF-16 from Windows) are exit 64 naming the file.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator, List, Optional, Tuple

try:   # RE2 (google-re2) scans for many words at once in linear time: Python's re would be 10x slower here
    import re2 as fast_re
    _OPTIONS = fast_re.Options()
    _OPTIONS.max_mem = 64 << 20     # the table's rows make a large automaton: room for its DFA
except ImportError:    # pragma: no cover - the package depends on it; a slower scan, the same lines
    fast_re = re

from clustercheck.core.errors import InputError
from clustercheck.explain.recorded import kind_of as recorded_kind
from clustercheck.flight.read import form_of as flight_form
from clustercheck.onnode import nccl_log_prefix, nccl_log_reader
from clustercheck.failure.lines import STRUCTURE
from clustercheck.vocabulary import ends
from clustercheck.vocabulary.table import prefilter_source

CHUNK = 8 * 2 ** 20
MAX_LINE = 64 * 1024          # a longer line is read cut (said in the result)
MAX_FILES = 4096              # a directory with more is not one job's logs
KEPT_PER_NODE = 20000         # lines kept per node: the first half and the last half of those that matter
TAIL_LINES = 12               # the last lines of each file, as they are: where a log without an end stopped
SNIFF = 64 * 1024
NUL = b"\0"
RECORDED_MAX = 64 * 2 ** 20    # an nvidia-smi XML of 8 GPUs is ~100 KB; a dcgmi run a few KB
LINES_TOO = ("kernel log (Xid)",)   # recorded outputs whose lines the classifier reads as well

# A line worth the classifier's reading: one a row of the vocabulary's table names, or one of the shapes the
# classifier reads (errors in their own words, launchers' summaries). NCCL's own lines go to the path reader
# (nccl_lines). Everything else (progress, losses, NCCL's INFO) is skipped in C speed, never decoded.
CANDIDATE = fast_re.compile(("(?m)" + "|".join([prefilter_source(), STRUCTURE, ends.prefilter_source()])).encode(),
                            **({"options": _OPTIONS} if fast_re is not re else {}))
# NCCL's own INFO lines (and those a poster stripped of their prefix) go to the path reader alone: an INFO line is
# never a failure (a plugin NCCL did not find and the dlerror it quotes), NCCL says its errors with WARN. One
# exception: a connect NCCL retries (socket.cc's "connect ... returned Connection refused, retrying") is the only
# word of an unreachable peer in a log cut before NCCL gives up, so the classifier weighs it with the rest
_RETRY = re.compile(rb"NCCL INFO .*returned .*retrying")
_NCCL_BARE = re.compile(b"(?m)" + nccl_log_prefix.BARE_SOURCE.encode()
                        + rb"|\d\] (?:[\w/.-]+:\d+ )?(?:INFO|WARN) |FI_HMEM capability")
_NCCL_BARE_SCAN = fast_re.compile(_NCCL_BARE.pattern)      # over a whole chunk: RE2 is 6x faster there


@dataclass
class LogView:
    """What the logs said, node by node (each node's lines as the classifier reads them)."""

    lines: Dict[str, List[str]] = field(default_factory=dict)
    files: List[str] = field(default_factory=list)
    bytes_read: int = 0
    candidates: int = 0
    cut_lines: int = 0
    skipped: List[str] = field(default_factory=list)     # files in a directory that are not logs, and why
    recorded: Dict[str, str] = field(default_factory=dict)   # file -> its text: an output clustercheck reads
    nccl_ranks: Dict = field(default_factory=dict)            # NCCL's own lines, read by onnode/nccl_log_reader.py
    nccl_job: Dict = field(default_factory=dict)
    total_lines: int = 0                                      # every line of every file read as a log
    ends: List[Tuple[str, str]] = field(default_factory=list)  # (node, line): the job's own word that it ended well
    tails: Dict[str, List[str]] = field(default_factory=dict)  # file -> its last lines
    flight: List[str] = field(default_factory=list)     # PyTorch Flight Recorder dumps: explain/flight_view.py

    def add(self, node: str, line: str) -> None:
        kept = self.lines.setdefault(node, [])
        if len(kept) >= KEPT_PER_NODE:      # keep the first half as it is, the rest a sliding window
            del kept[KEPT_PER_NODE // 2]
        kept.append(line)


def input_files(paths: List[str]) -> List[str]:
    """The files to read: each path a file, or a directory of files (two levels down); bad input names the path."""
    files: List[str] = []
    for path in paths:
        if not os.path.exists(path):
            raise InputError("no such file or directory", path)
        if os.path.isdir(path):
            found = []
            for root, dirs, names in os.walk(path):
                depth = root[len(path):].count(os.sep)
                dirs[:] = [d for d in dirs if not d.startswith(".")] if depth < 1 else []
                found += [os.path.join(root, n) for n in sorted(names) if not n.startswith(".")]
                if len(found) > MAX_FILES:
                    raise InputError(f"a directory of more than {MAX_FILES:,} files is not one job's logs: name "
                                     f"the rank logs, or a directory holding only them", path)
            if not found:
                raise InputError("an empty directory: no log to read", path)
            files += found
        else:
            files.append(path)
    return files


def check_text(path: str, head: bytes, in_directory: bool) -> str:
    """Why this file cannot be read as a log ("" when it can)."""
    if not head:
        return "an empty file"
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "UTF-16 text (a Windows log?): convert it to UTF-8 (iconv -f UTF-16 -t UTF-8)"
    if b"\0" in head:
        return f"a binary file (a NUL byte at offset {head.index(NUL)})"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:      # not a character cut by the sniff's end
            bad = sum(1 for b in head if b >= 0x80) / len(head)
            if bad > 0.01:
                return f"not UTF-8 text (byte {head[exc.start:exc.start + 1]!r} at offset {exc.start})"
    return ""


# ---- where a line came from ------------------------------------------------------------------------------
_MPI = re.compile(r"^\[\d+,(\d+)\]<std(?:out|err)>:\s?")
_SRUN = re.compile(r"^\s{0,3}(\d{1,5}): ")
_HOST = re.compile(r"^(\d{1,3}(?:\.\d{1,3}){3}|[a-z0-9][a-z0-9-]*(?:\.[a-z0-9-]+)*)\s?: (?=\S)")
_NCCL_HOST = re.compile(r"^([A-Za-z0-9][\w.-]*):\d+:\d+ \[(\d+)\]")
_RAY = re.compile(r"^\((?:\w+ )?pid=\d+(?:, ip=([\d.]+))?\)\s?")
_FILE_RANK = re.compile(r"(?:rank|proc|task|worker)[_-]?(\d+)", re.I)


def origin(line: str, default_node: str) -> Tuple[str, str]:
    """(node, the line as the classifier reads it): launcher prefixes turned into the rank markers it knows,
    a host prefix into the node."""
    node = default_node
    match = _RAY.match(line)
    if match:
        node, line = match.group(1) or node, line[match.end():]
    match = _MPI.match(line)
    if match:
        return node, f"[rank{match.group(1)}]: {line[match.end():]}"
    match = _SRUN.match(line)
    if match and not line.lstrip().startswith(("0x", "1:1")):
        return node, f"[rank{int(match.group(1))}]: {line[match.end():]}"
    match = _HOST.match(line)
    if match and re.search(r"\d|-", match.group(1)) and not match.group(1).isdigit():   # a host name, not a word
        node, line = match.group(1), line[match.end():]
    match = _NCCL_HOST.match(line)
    if match:
        return match.group(1), line
    return node, line


def node_of_file(path: str, several: bool) -> str:
    """A per-rank file's node (its name without the rank part), else the file."""
    stem = os.path.splitext(os.path.basename(path))[0]
    if not several:
        return "log"
    return _FILE_RANK.sub("", stem).strip("-_.") or stem


def rank_of_file(path: str) -> Optional[int]:
    match = _FILE_RANK.search(os.path.basename(path))
    return int(match.group(1)) if match else None


# ---- streaming -------------------------------------------------------------------------------------------
def chunks(handle) -> Iterator[Tuple[bytes, bool]]:
    """(whole lines, cut) read CHUNK bytes at a time; a line longer than a chunk comes alone, its start only (cut)."""
    carry = b""
    while True:
        chunk = handle.read(CHUNK)
        if not chunk and not carry:
            return
        if not chunk:
            yield carry, False
            return
        cut = chunk.rfind(b"\n")
        if cut >= 0:            # the common case: the chunk's whole lines after the carried start, copied once
            data, carry = b"".join((carry, memoryview(chunk)[:cut + 1])), chunk[cut + 1:]
            yield data, False
            continue
        data = carry + chunk
        cut = data.rfind(b"\n")
        if cut >= 0:
            data, carry = data[:cut + 1], data[cut + 1:]
            yield data, False
        elif len(data) > MAX_LINE:       # one line longer than a chunk: read its start, skip to its end
            yield data[:MAX_LINE], True
            carry = b""
            for rest in iter(lambda: handle.read(CHUNK), b""):
                if b"\n" in rest:
                    carry = rest[rest.index(b"\n") + 1:]
                    break
        else:
            carry = data


def candidate_lines(data: bytes) -> Iterator[Tuple[bytes, bool]]:
    """(line, cut) for each line of a chunk that a CANDIDATE word is in: the other lines are never decoded."""
    last = -1
    for match in CANDIDATE.finditer(data):
        start = data.rfind(b"\n", 0, match.start()) + 1
        if start <= last:
            continue
        end = data.find(b"\n", match.end())
        end = len(data) if end < 0 else end
        last = end
        yield data[start:min(end, start + MAX_LINE)], end - start > MAX_LINE


def nccl_lines(data: bytes) -> Tuple[List[bytes], Optional[Callable[[bytes], bool]]]:
    """The lines of a chunk for the path reader, and which of them NCCL wrote (None: all of them): where NCCL's lines
    are most of the chunk (NCCL_DEBUG=INFO at a large job's start), nccl_log_reader.read_nccl_lines asks once per
    distinct line; where they are a few (a training log), they are picked out in C, and the lines whose prefix a poster
    stripped are looked for by RE2 over the chunk, no Python per line."""
    sample = data[:1 << 16]
    if sample.count(b"NCCL") * 2 > sample.count(b"\n"):
        return data.split(b"\n"), _nccl_line
    if _NCCL_BARE_SCAN.search(data) is not None:
        return [line for line in data.split(b"\n") if _nccl_line(line)], None
    return ([line for line in data.split(b"\n") if b"NCCL" in line], None) if b"NCCL" in data else ([], None)


def _nccl_line(line: bytes) -> bool:
    return b"NCCL" in line or _NCCL_BARE.search(line) is not None


def _line_text(line: bytes) -> str:
    return line[:MAX_LINE].decode("utf-8", "replace").rstrip("\r")


def _add_candidates(view: LogView, found, node: str, file_rank: Optional[int]) -> None:
    for raw, cut in found:
        if b"WARN" not in raw and (b"NCCL INFO" in raw or _NCCL_BARE.search(raw)) and not _RETRY.search(raw):
            continue                     # NCCL's own INFO is the path's, never a failure
        line = _line_text(raw)
        view.candidates += 1
        view.cut_lines += cut
        where, said = origin(line, node)
        if ends.ended_well(said):        # the launcher's or trainer's word that the job ended well: not a cause
            view.ends.append((where, said))
            continue
        if file_rank is not None and not said.startswith("[rank"):
            said = f"[rank{file_rank}]: {said}"
        view.add(where, said)


def read_logs(paths: List[str]) -> LogView:
    files = input_files(paths)
    view = LogView()
    several = len(files) > 1
    for path in files:
        try:
            with open(path, "rb") as handle:
                head = handle.read(SNIFF)
                if flight_form(head):          # a Flight Recorder dump (pickle or JSON): judged apart, never a log
                    view.flight.append(path)
                    continue
                problem = check_text(path, head, several)
                if problem:
                    if path in paths:       # named by the user: bad input; one of a directory's: skipped, said
                        raise InputError(f"cannot be read as a log: {problem}", path)
                    view.skipped.append(f"{path}: {problem}")
                    continue
                view.files.append(path)
                kind = recorded_kind(head.decode("utf-8", "replace"))
                if kind:
                    data = head + handle.read(RECORDED_MAX)
                    view.recorded[path] = data.decode("utf-8", "replace")
                    view.bytes_read += handle.tell()
                    for line in view.recorded[path].splitlines():    # nccl-tests with NCCL_DEBUG=INFO
                        if "NCCL" in line:
                            nccl_log_reader.read_nccl_line(line, view.nccl_ranks, view.nccl_job,
                                                           node_of_file(path, several))
                    if kind in LINES_TOO:     # a kernel log is a node's log too: its lines name causes (OOM killer...)
                        _add_candidates(view, candidate_lines(data), node_of_file(path, several), None)
                    continue
                handle.seek(0)
                node = node_of_file(path, several)
                file_rank = rank_of_file(path) if several else None
                last = b""
                for data, cut_alone in chunks(handle):    # the path NCCL took (onnode/nccl_log_reader.py)
                    lines, wanted = nccl_lines(data)
                    nccl_log_reader.read_nccl_lines(lines, view.nccl_ranks, view.nccl_job, node, wanted, _line_text)
                    found = [(data, True)] if cut_alone else candidate_lines(data)
                    _add_candidates(view, found, node, file_rank)
                    view.total_lines += data.count(b"\n") + (not data.endswith(b"\n"))
                    last = data if data.strip() else last
                view.tails[path] = [_line_text(line) for line in last.rstrip(b"\n").split(b"\n")[-TAIL_LINES:]]
                view.bytes_read += handle.tell()
        except OSError as exc:
            raise InputError(f"cannot read ({exc.strerror})", path) from None
    if not view.files and not view.flight:
        raise InputError("none of the files can be read as a log: " + "; ".join(view.skipped[:3]), paths[0])
    return view
