"""The one table of causes: every row of every error space (space, what it matches, kind, code, the source it is
taken from), gathered from the space modules, checked when it is imported, and read by `first_space(line)`.

Precedence is data, never a position in a list: spaces carry an order (a scheduler's verdict before what it
interrupted, NCCL's WARN families before the CUDA call they name, a specific library's message before the errno
it carries, the project's own patterns last), and within a space the row whose kind has the best rank
(kinds.py) wins. A new cause is a row in its space's module.

The import-time check (spaces.check) fails when a row names a kind or a space that does not exist, when two rows
of one space collide (the same pattern, or the same code leading to two kinds), or when a pattern is not one RE2
can run (the prefilter that `clustercheck explain` streams with is built from the rows).
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Tuple

from clustercheck.vocabulary import (cuda, kernel, libraries, messages, mpi, nccl, nvml, own, rdma, scheduler,
                                     storage, system, trainers)
from clustercheck.vocabulary.kinds import KINDS
from clustercheck.vocabulary.spaces import SPACES, Row, VocabularyError, check

__all__ = ["ROWS", "SPACES", "Row", "VocabularyError", "best_in", "check", "first_space", "prefilter_source"]


ROWS: List[Row] = [*nccl.ROWS, *messages.ROWS, *scheduler.ROWS, *mpi.ROWS, *rdma.ROWS, *trainers.ROWS, *storage.ROWS,
                   *kernel.ROWS, *cuda.ROWS, *libraries.ROWS, *nvml.ROWS, *system.ROWS, *own.ROWS]
check(ROWS)
# Each row's pattern is compiled the first time RE2's set says it matched a line (Python's re reports where): a
# start of the tool that reads no log line (most commands) does not pay for compiling 400 patterns.
_COMPILED: Dict[int, "re.Pattern[str]"] = {}


def _compiled(index: int) -> "re.Pattern[str]":
    pattern = _COMPILED.get(index)
    if pattern is None:
        pattern = _COMPILED[index] = re.compile(ROWS[index].match)
    return pattern


WARNED_CAUSE = re.compile("|".join(f"(?:{row.match})" for row in ROWS if row.warns))
try:   # RE2's set matches every row at once in linear time: a line is read once, not once per row
    import re2

    _SET = re2.Set.SearchSet(re2.Options())
    for _row in ROWS:
        try:
            _SET.Add(_row.match)
        except re2.error as exc:
            raise VocabularyError(f"row {_row.code!r} of space {_row.space!r}: RE2 cannot run it ({exc})") from None
    _SET.Compile()

    def _matching(line: str) -> List[int]:
        return _SET.Match(line) or []
except ImportError:    # pragma: no cover - the package depends on google-re2; the same rows, one by one
    def _matching(line: str) -> List[int]:
        return [i for i in range(len(ROWS)) if _compiled(i).search(line)]


def prefilter_source() -> str:
    """One pattern any line a row names matches (RE2 syntax): explain's streaming reader is built from it."""
    return "|".join(f"(?:{row.match})" for row in ROWS)


def _best(found: List[int], line: str) -> Optional[Tuple[Row, "re.Match[str]"]]:
    """Of rows of one space that matched: the best kind's rank, then the earliest in the line, then the longest
    (the row that reads more of it: "CANCELLED AT t DUE TO TIME LIMIT" over "CANCELLED AT t DUE TO T")."""
    matched = [(ROWS[i], m) for i in found for m in [_compiled(i).search(line)] if m]
    return min(matched, key=lambda rm: (KINDS[rm[0].kind].rank, rm[1].start(), -rm[1].end())) if matched else None


def best_in(space: str, line: str) -> Optional[Tuple[Row, "re.Match[str]"]]:
    """The row of one space a line shows."""
    return _best([i for i in _matching(line) if ROWS[i].space == space], line)


def first_space(line: str) -> Optional[Tuple[Row, "re.Match[str]"]]:
    """The row a line shows in the first space (by order) that names it; None when no row does."""
    found = _matching(line)
    for space in sorted({ROWS[i].space for i in found}, key=lambda name: SPACES[name].order):
        best = _best([i for i in found if ROWS[i].space == space], line)
        if best:
            return best
    return None
