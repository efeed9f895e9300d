"""An earlier measurement to compare with: a `bench --json` document, a preflight report, or the
output of NVIDIA's nccl-tests (`all_reduce_perf` and friends) as users have kept it for years:
the current format (a root column, #wrong), the old one (no root, an error column), with
Open MPI's `--tag-output` or srun's `-l` prefix on every line, NCCL's own log lines in between.

Every source becomes bus bandwidth per collective and message size, so a comparison is always
at the same sizes: an average over 8 B to 16 GB and one over 1 KB to 64 MB are different things.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Dict, List, Tuple

from clustercheck.core.errors import InputError
from clustercheck.display.report_files import read_document
from clustercheck.stages.bench.table import COLLECTIVES, PLACEMENTS, parse_table, peak_cell, strip_tag


@dataclass
class Baseline:
    path: str
    kind: str                                                   # "bench --json", "preflight report", "nccl-tests"
    busbw: Dict[str, Dict[int, float]] = field(default_factory=dict)   # collective -> size -> GB/s

    def describe(self) -> str:
        return f"{self.kind} {self.path}"


def by_size(rows: List[Dict]) -> Dict[int, float]:
    return {row["size"]: peak_cell(row) for row in rows if any(row.get(p) for p in PLACEMENTS)}


def _collective_named(text: str, path: str) -> str:
    """nccl-tests' binary, from its "Collective test starting" line, else from the file's name."""
    match = re.search(r"Collective test starting: (\w+?)_perf", "\n".join(map(strip_tag, text.splitlines()[:200])))
    candidates = [match.group(1)] if match else []
    name = os.path.basename(path).lower().replace("-", "_")
    candidates += [c for c in sorted(COLLECTIVES, key=len, reverse=True) if c in name or c.replace("_", "") in name]
    for candidate in candidates:
        if candidate in COLLECTIVES:
            return candidate
    raise InputError("an nccl-tests output, but which collective? Neither a \"Collective test starting: "
                     "<name>_perf\" line nor the file's name says (name it like all_reduce_perf.txt)", path)


def read_nccl_tests(text: str, path: str) -> Baseline:
    rows = parse_table(text)
    if not rows:
        raise InputError("neither clustercheck JSON nor nccl-tests output (no table rows: size count type redop "
                         "[root] time algbw busbw #wrong ...)", path)
    return Baseline(path, "nccl-tests", {_collective_named(text, path): by_size(rows)})


def busbw_of(bench_doc: Dict) -> Dict[str, Dict[int, float]]:
    """collective -> size -> busbw of the rows of a `bench --json` document (or a report's bench part)."""
    busbw: Dict[str, Dict[int, float]] = {}
    for stage in bench_doc.get("stages") or []:
        for row in stage.get("rows") or []:
            if any(row.get(p) and "busbw" in row[p] for p in PLACEMENTS):
                busbw.setdefault(row["collective"], {})[row["size"]] = peak_cell(row)
    return busbw


def read_baseline(path: str) -> Baseline:
    """Any of the three; bad input names the file."""
    what = "a `clustercheck bench --json` document, a preflight report or nccl-tests output"
    doc, text = read_document(path, what)
    if doc is None:
        return read_nccl_tests(text, path)
    if doc.get("command") == "bench":
        return Baseline(path, "bench --json", busbw_of(doc))
    if doc.get("command") == "preflight":
        return Baseline(path, "preflight report", busbw_of(doc.get("bench") or {}))
    raise InputError(f"not {what}", path)


def compare(old: Dict[int, float], new: Dict[int, float]) -> List[Tuple[int, float, float]]:
    """(size, old, new) at every size both measured, smallest first."""
    return [(size, old[size], new[size]) for size in sorted(set(old) & set(new)) if old[size] > 0]
