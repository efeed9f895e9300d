"""An earlier measurement to compare with: a `bench --json` document, a preflight report, or the
output of NVIDIA's nccl-tests (`all_reduce_perf` and friends) as users have kept it for years:
the current format (redop and root columns, #wrong), the old one (each test its own columns, an
error column), with Open MPI's `--tag-output` or srun's `-l` prefix on every line, NCCL's own log
lines in between.

Which collective an nccl-tests table measured is read from the table itself where its columns
tell (SHAPES below), else from its "Collective test starting" line, the file's name or the user's
--collective; the baseline says which, and a table that cannot be told is refused, never guessed.

Every source becomes bus bandwidth per collective and message size, so a comparison is always
at the same sizes: an average over 8 B to 16 GB and one over 1 KB to 64 MB are different things.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

from clustercheck.core.errors import InputError
from clustercheck.display.report_files import read_document
from clustercheck.outputs.nccl_tests import COLLECTIVES, PLACEMENTS, LogTable, peak_cell, read_tables


@dataclass
class Baseline:
    path: str
    kind: str                                                   # "bench --json", "preflight report", "nccl-tests"
    busbw: Dict[str, Dict[int, float]] = field(default_factory=dict)   # collective -> size -> GB/s
    told: Dict[str, str] = field(default_factory=dict)          # nccl-tests: collective -> what said it was that one

    def describe(self) -> str:
        told = "; ".join(f"{name}, from {how}" for name, how in self.told.items())
        return f"{self.kind} {self.path}" + (f" ({told})" if told else "")


def by_size(rows: List[Dict]) -> Dict[int, float]:
    return {row["size"]: peak_cell(row) for row in rows if any(row.get(p) for p in PLACEMENTS)}


# ---- what a table's columns say ------------------------------------------------------------------
# How each collective's rows read, from nccl-tests' src/<name>.cu: the redop cell (a reduction such
# as sum, "none", empty under a redop header, or no redop column), the root cell (a rank, -1, or no
# root column), and whether the size is count x type size x ranks (the count is one rank's part:
# *GetCollByteCount, printed as max(send, recv) bytes and the param count) or count x type size.
# Before nccl-tests 2.13 (2022) every test printed its own columns; since, every table has both, and
# from 2.13.2 on a collective without a reduction says "none" where 2.13.0-1 left the cell empty.
SHAPES: Dict[str, Set[Tuple[str, str, bool]]] = {
    "all_reduce": {("op", "-1", False), ("op", "absent", False)},
    "reduce_scatter": {("op", "-1", True), ("op", "absent", True)},
    "reduce": {("op", "rank", False)},
    "broadcast": {("none", "rank", False), ("blank", "rank", False), ("absent", "rank", False)},
    "all_gather": {("none", "-1", True), ("blank", "-1", True), ("absent", "absent", True)},
    "alltoall": {("none", "-1", True), ("blank", "-1", True), ("blank", "absent", True)},   # old: empty cells
    "sendrecv": {("op", "-1", False), ("absent", "absent", False)},      # current: prints sum, like all_reduce
}
# busbw / algbw, for any number of ranks above one: all_reduce 2(n-1)/n; the gathers (n-1)/n, or 1 in
# nccl-tests before June 2020, whose all_gather and reduce_scatter algbw already held the factor; the
# rest 1. Printed with two decimals, so told only from an algbw of 1 GB/s up.
FACTORS = {"all_reduce": (1.0, 2.0), "reduce_scatter": (0.5, 1.0), "all_gather": (0.5, 1.0),
           "alltoall": (0.5, 1.0), "broadcast": (1.0, 1.0), "reduce": (1.0, 1.0), "sendrecv": (1.0, 1.0)}
TYPE_BYTES = {"int8": 1, "uint8": 1, "char": 1, "f8e4m3": 1, "f8e5m2": 1, "half": 2, "bfloat16": 2,
              "int32": 4, "uint32": 4, "int": 4, "float": 4, "int64": 8, "uint64": 8, "double": 8}

def _kinds(table: LogTable) -> Tuple[Set[str], Set[str], List[str]]:
    """What the redop and root cells can be (several where rows disagree or no header says), and in words."""
    redops = {row.get("redop") for row in table.rows}
    roots = {row.get("root") for row in table.rows}
    if redops == {None}:
        redop = {"blank", "absent"} if table.columns is None else {"blank" if "redop" in table.columns else "absent"}
        words = ["an empty redop column" if redop == {"blank"} else "no redop column"]
    else:
        redop = {"none" if r == "none" else "op" for r in redops}
        words = [f"redop {'/'.join(sorted(map(str, redops)))}"]
    root = {"absent" if r is None else "-1" if r < 0 else "rank" for r in roots}
    numbers = sorted(r for r in roots if r is not None)
    words.append(f"root {'/'.join(map(str, numbers))}" if numbers else "no root column")
    return redop, root, words


def _spread(table: LogTable) -> Tuple[Set[bool], List[str]]:
    """Whether size = count x type size x ranks (True) or count x type size (False), where the rows agree."""
    ratios = {row["size"] / (row["count"] * TYPE_BYTES[row["type"]]) for row in table.rows
              if row["count"] and row["type"] in TYPE_BYTES}
    if len(ratios) != 1 or not float(next(iter(ratios))).is_integer():
        return {True, False}, []
    ratio, example = int(ratios.pop()), next(r for r in table.rows if r["count"] and r["type"] in TYPE_BYTES)
    unit = f"size = count x {TYPE_BYTES[example['type']]} B"
    return {ratio > 1}, [f"{unit} x {ratio}" if ratio > 1 else unit]


def _factor(table: LogTable) -> Optional[float]:
    cells = [row[p] for row in table.rows for p in PLACEMENTS if row.get(p)]
    best = max(cells, key=lambda cell: cell["algbw"], default=None)
    return best["busbw"] / best["algbw"] if best and best["algbw"] >= 1.0 else None


def fitting(table: LogTable) -> Tuple[List[str], str]:
    """The collectives whose tables look like this one, and what in its columns says so."""
    redop, root, words = _kinds(table)
    spread, spread_words = _spread(table)
    factor = _factor(table)
    fits = [name for name, shapes in SHAPES.items()
            if any(r in redop and o in root and s in spread for r, o, s in shapes)
            and (factor is None or FACTORS[name][0] - 0.02 <= factor <= FACTORS[name][1] + 0.02)]
    factor_words = [f"busbw/algbw {factor:.2f}"] if factor is not None else []
    return fits, ", ".join(words + spread_words + factor_words)


def named_in(path: str) -> List[str]:
    """Collectives the file's name names (all_gather_perf.log, nccl_allgather.log), longest first."""
    name = os.path.basename(path).lower().replace("-", "_")
    return [c for c in sorted(COLLECTIVES, key=len, reverse=True) if c in name or c.replace("_", "") in name]


def tell(table: LogTable, path: str, collective: Optional[str], alone: bool) -> Tuple[str, str]:
    """(collective, what said so): the command line (--collective), the table's "Collective test starting" line,
    its columns where they fit one collective only, the file's name; what contradicts the columns is refused."""
    fits, columns = fitting(table)
    either = " or ".join(fits) if fits else f"none of {', '.join(COLLECTIVES)}"
    if collective:
        if collective not in fits:
            raise InputError(f"the collective given on the command line does not fit the table at line {table.line}: "
                             f"its columns ({columns}) are those of {either}", path, value=collective)
        return collective, "the command line"
    if table.starting:
        if table.starting not in COLLECTIVES:
            raise InputError(f"the table at line {table.line} is {table.starting}_perf's, a collective clustercheck "
                             f"does not measure (it measures {', '.join(COLLECTIVES)})", path)
        if table.starting not in fits:
            raise InputError(f"its \"Collective test starting: {table.starting}_perf\" line and the table's columns "
                             f"({columns}: {either}) disagree; pass --collective to say which", path, table.line)
        return table.starting, f"its \"Collective test starting: {table.starting}_perf\" line"
    if len(fits) == 1:
        return fits[0], f"the table's columns: {columns}"
    for name in named_in(path) if alone else []:
        if name in fits:
            return name, "the file's name"
    example = f"{fits[0] if fits else 'all_reduce'}_perf.txt"
    raise InputError(f"an nccl-tests table, but which collective? Its columns ({columns}) are those of {either}, and "
                     f"neither a \"Collective test starting\" line nor the file's name says which: pass --collective "
                     f"NAME (bench: --baseline-collective), or name the file after it (like {example})",
                     path, table.line)


def read_nccl_tests(text: str, path: str, collective: Optional[str] = None) -> Baseline:
    tables = read_tables(text)
    if not tables:
        raise InputError("neither clustercheck JSON nor nccl-tests output (no table rows: size count type redop "
                         "[root] time algbw busbw #wrong ...)", path)
    if collective and len(tables) > 1:
        raise InputError(f"a collective given on the command line names that of a file with one table; this one has "
                         f"{len(tables)} (lines {', '.join(str(t.line) for t in tables)}): one run per file", path,
                         value=collective)
    baseline = Baseline(path, "nccl-tests")
    for table in tables:
        name, how = tell(table, path, collective, alone=len(tables) == 1)
        if name in baseline.busbw:
            raise InputError(f"two tables of {name} in one file (the second at line {table.line}): one run per file",
                             path)
        baseline.busbw[name], baseline.told[name] = by_size(table.rows), how
    return baseline


def busbw_of(bench_doc: Dict) -> Dict[str, Dict[int, float]]:
    """collective -> size -> busbw of the rows of a `bench --json` document (or a report's bench part)."""
    busbw: Dict[str, Dict[int, float]] = {}
    for stage in bench_doc.get("stages") or []:
        for row in stage.get("rows") or []:
            if any(row.get(p) and "busbw" in row[p] for p in PLACEMENTS):
                busbw.setdefault(row["collective"], {})[row["size"]] = peak_cell(row)
    return busbw


def read_baseline(path: str, collective: Optional[str] = None) -> Baseline:
    """Any of the three; bad input names the file. collective: what an nccl-tests table holds where it cannot
    be told otherwise (--collective)."""
    what = "a `clustercheck bench --json` document, a preflight report or nccl-tests output"
    doc, text = read_document(path, what)
    if doc is None:
        return read_nccl_tests(text, path, collective)
    if doc.get("command") == "bench":
        return Baseline(path, "bench --json", busbw_of(doc))
    if doc.get("command") == "preflight":
        return Baseline(path, "preflight report", busbw_of(doc.get("bench") or {}))
    raise InputError(f"not {what}", path)


def compare(old: Dict[int, float], new: Dict[int, float]) -> List[Tuple[int, float, float]]:
    """(size, old, new) at every size both measured, smallest first."""
    return [(size, old[size], new[size]) for size in sorted(set(old) & set(new)) if old[size] > 0]
