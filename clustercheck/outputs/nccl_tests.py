"""Collectives, their bus-bandwidth factors, and the nccl-tests table, written and read (below the stages:
bench writes and compares it, explain judges a user's recorded output with the same reader).

Each collective declares what its size S means and its bus-bandwidth factor, as in
nccl-tests' doc/PERFORMANCE.md: algbw = S / t, busbw = algbw x factor, GB/s base 10.
The table is printed the way nccl-tests prints it, so numbers can be set side by side; read_tables reads
every table of an output in any of the formats nccl-tests has printed (stages/bench/baseline.py tells which
collective each measured).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple


@dataclass(frozen=True)
class Collective:
    name: str
    factor: Callable[[int], float]     # busbw / algbw for n ranks
    placements: tuple                  # which of out_of_place / in_place torch can express
    about: str


COLLECTIVES: Dict[str, Collective] = {c.name: c for c in [
    # Each rank sends and receives 2(n-1)/n of the data (reduce-scatter then all-gather).
    Collective("all_reduce", lambda n: 2 * (n - 1) / n, ("in_place",), "S = the buffer on each rank"),
    # S is the whole gathered array; each rank receives the (n-1)/n it lacks.
    Collective("all_gather", lambda n: (n - 1) / n, ("out_of_place", "in_place"), "S = the whole gathered array"),
    Collective("reduce_scatter", lambda n: (n - 1) / n, ("out_of_place", "in_place"), "S = the whole input array"),
    Collective("alltoall", lambda n: (n - 1) / n, ("out_of_place",), "S = each rank's whole buffer"),
    # One rank's data crosses each link once.
    Collective("broadcast", lambda n: 1.0, ("in_place",), "S = the buffer, root 0"),
    Collective("reduce", lambda n: 1.0, ("in_place",), "S = the buffer, root 0"),
    Collective("sendrecv", lambda n: 1.0, ("out_of_place",), "S = what each rank sends to the next"),
]}
PLACEMENTS = ("out_of_place", "in_place")


def bandwidths(collective: str, size_bytes: int, time_us: float, nranks: int):
    """(algbw, busbw) in GB/s."""
    algbw = size_bytes / 1e9 / (time_us / 1e6) if time_us > 0 else 0.0
    return algbw, algbw * COLLECTIVES[collective].factor(nranks)


def time_cell(time_us: float) -> str:
    """nccl-tests' time column: two decimals below 100 us, one below 10 ms, none above."""
    if time_us >= 10000.0:
        return "%7.0f" % time_us
    return "%7.1f" % time_us if time_us >= 100.0 else "%7.2f" % time_us


# As nccl-tests prints them (rows: "%12li  %12li  %8s  %6s  %6s", then per placement
# "  %7s  %6.2f  %6.2f  %5g"), checked against real output in tests/data/nccl-tests/.
HEADER = [
    "#" + " " * 62 + "out-of-place" + " " * 23 + "in-place" + " " * 10,
    "#       size         count      type   redop    root     time   algbw   busbw #wrong"
    "     time   algbw   busbw #wrong",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)"
    "  (GB/s)  (GB/s)       ",
]


def format_row(row: Dict) -> str:
    """One line of the table from a worker's row (with bandwidths filled in by add_bandwidths)."""
    root = "%6i" % row["root"]
    line = "%12li  %12li  %8s  %6s  %6s" % (row["size"], row["count"], row["type"], row["redop"], root)
    for placement in PLACEMENTS:
        cell = row.get(placement)
        if cell is None:
            line += "  %7s  %6s  %6s  %5s" % ("N/A", "N/A", "N/A", "N/A")
            continue
        wrong = "N/A" if cell.get("wrong") is None else "%g" % cell["wrong"]
        line += "  %7s  %6.2f  %6.2f  %5s" % (time_cell(cell["time_us"]), cell["algbw"], cell["busbw"], wrong)
    return line


def add_bandwidths(row: Dict) -> Dict:
    for placement in PLACEMENTS:
        cell = row.get(placement)
        if cell is not None:
            cell["algbw"], cell["busbw"] = bandwidths(row["collective"], row["size"], cell["time_us"], row["nranks"])
    return row


def peak_cell(row: Dict) -> float:
    """The row's highest busbw over its placements."""
    return max(row[p]["busbw"] for p in PLACEMENTS if row.get(p))


def peak(rows: Sequence[Dict]) -> Tuple[float, int]:
    """The highest busbw of any row and placement, and its size."""
    best = max(rows, key=peak_cell)
    return peak_cell(best), best["size"]


def avg_busbw(rows: Sequence[Dict]) -> Optional[float]:
    """nccl-tests' "Avg bus bandwidth": the mean busbw over every measured cell of every row."""
    values = [row[p]["busbw"] for row in rows for p in PLACEMENTS if row.get(p) is not None]
    return sum(values) / len(values) if values else None


def format_table(collective: str, rows: Sequence[Dict]) -> List[str]:
    wrong = sum(row[p]["wrong"] or 0 for row in rows for p in PLACEMENTS if row.get(p) is not None)
    average = avg_busbw(rows)
    lines = [f"# {collective}: {COLLECTIVES[collective].about}", *HEADER]
    lines += [format_row(row) for row in rows]
    lines.append("# %-20s : %d %s" % ("Out of bounds values", wrong, "FAILED" if wrong else "OK"))
    lines.append("# %-20s : %g " % ("Avg bus bandwidth", round(average, 4) if average is not None else 0))
    return lines


# One line of an nccl-tests table. The current format has a root column (since nccl-tests 2.10)
# and "#wrong" counts; the old one has no root and a max "error" per placement. Open MPI's
# --tag-output puts "[1,0]<stdout>:" before every line, srun -l "0: ".
_TAG_RE = re.compile(r"^(\[\d+,\d+\]<std(?:out|err)>:|\d+: )")
_ROW_RE = re.compile(r"^\s*(\d+)\s+(\d+)\s+([a-z]\w*)\s+([a-z]\w*)\s+(.*)$")
_CELL_RE = re.compile(r"^(N/A|-?\d+(\.\d*)?(e[-+]?\d+)?)$")


def strip_tag(line: str) -> str:
    return _TAG_RE.sub("", line, count=1)


def parse_row(line: str) -> Optional[Dict]:
    """A table row (either format, tag stripped), or None for any other line; cells that are not
    numbers make it not a row."""
    line = strip_tag(line)
    match = _ROW_RE.match(line)
    if not match or line.lstrip().startswith("#"):
        return None
    cells = match.group(5).split()
    if len(cells) not in (8, 9) or not all(_CELL_RE.match(c) for c in cells):
        return None
    row = {"size": int(match.group(1)), "count": int(match.group(2)), "type": match.group(3),
           "redop": match.group(4)}
    old = len(cells) == 8
    if not old:
        row["root"] = int(float(cells.pop(0)))
    for placement, chunk in zip(PLACEMENTS, (cells[0:4], cells[4:8])):
        if chunk[0] != "N/A":
            row[placement] = {"time_us": float(chunk[0]), "algbw": float(chunk[1]), "busbw": float(chunk[2]),
                              "wrong": None if chunk[3] == "N/A" or old else float(chunk[3])}
            if old and chunk[3] != "N/A":
                row[placement]["error"] = float(chunk[3])
    return row


def parse_table(text: str) -> List[Dict]:
    """Rows of an nccl-tests table (theirs, old or current, tagged or not; or ours)."""
    return [row for row in map(parse_row, text.splitlines()) if row is not None]


def parse_avg_busbw(text: str) -> Optional[float]:
    match = re.search(r"Avg bus bandwidth\s*:\s*([\d.]+)", text)
    return float(match.group(1)) if match else None


# ---- every table of an nccl-tests output, whatever its format ------------------------------------------
_HEADER_RE = re.compile(r"^#\s+size\s+count\s+type\s+(.*?)\s*time\s+algbw")
_STARTING_RE = re.compile(r"Collective test starting: (\w+?)_perf")
_PLAIN_ROW_RE = re.compile(r"^\s*(\d+)\s+(\d+)\s+([a-z]\w*)\s+(.*)$")


@dataclass
class LogTable:
    """One nccl-tests table: its columns between type and time (None: no header line seen), rows, where."""
    line: int
    columns: Optional[Tuple[str, ...]]
    starting: Optional[str] = None          # the name on the "Collective test starting" line before it
    rows: List[Dict] = field(default_factory=list)


def plain_row(line: str, counts_wrong: bool = False) -> Optional[Dict]:
    """A row without a redop cell (old all_gather and sendrecv, old broadcast with its root, the empty redop
    of old alltoall and of 2.13.0-1's non-reductions): size, count, type, [root], then time, algbw, busbw and
    error or (counts_wrong: the header says #wrong) #wrong for each placement."""
    match = _PLAIN_ROW_RE.match(line)
    if not match:
        return None
    cells = match.group(4).split()
    row: Dict = {"size": int(match.group(1)), "count": int(match.group(2)), "type": match.group(3)}
    if len(cells) == 9 and re.fullmatch(r"-?\d+", cells[0]):
        row["root"] = int(cells.pop(0))
    if len(cells) != 8 or not all(_CELL_RE.match(c) for c in cells):
        return None
    for placement, chunk in zip(PLACEMENTS, (cells[0:4], cells[4:8])):
        if "N/A" in chunk[1:3] and chunk[0] != "N/A":
            return None
        if chunk[0] != "N/A":
            row[placement] = {"time_us": float(chunk[0]), "algbw": float(chunk[1]), "busbw": float(chunk[2]),
                              "wrong": float(chunk[3]) if counts_wrong and chunk[3] != "N/A" else None}
            if not counts_wrong and chunk[3] != "N/A":
                row[placement]["error"] = float(chunk[3])
    return row


def _current_row(line: str) -> Optional[Dict]:
    """parse_row, where an N/A among a placement's numbers makes no row rather than a ValueError."""
    try:
        return parse_row(line)
    except ValueError:
        return None


def read_tables(text: str) -> List[LogTable]:
    """The tables of an nccl-tests output, each with the rows under its header (any format, tagged or not)."""
    tables: List[LogTable] = []
    starting, counts_wrong = None, False
    for number, line in enumerate(map(strip_tag, text.splitlines()), 1):
        match = _STARTING_RE.search(line)
        header = _HEADER_RE.match(line)
        if match:
            starting = match.group(1)
        elif header:
            tables.append(LogTable(number, tuple(header.group(1).split()), starting))
            starting, counts_wrong = None, "#wrong" in line
        elif not line.lstrip().startswith("#"):
            row = _current_row(line) or plain_row(line, counts_wrong)
            if row is not None:
                if not tables:
                    tables.append(LogTable(number, None, starting))
                tables[-1].rows.append(row)
    return [table for table in tables if table.rows]
