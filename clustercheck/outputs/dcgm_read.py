"""`dcgmi diag` output read into one shape, whatever DCGM version wrote it: its JSON (`-j`) or its table.

Follows the structure DCGM's own source defines (dcgmi/Diag.cpp, nvvs/include/NvvsJsonStrings.h, 2.x to 4.6):
- JSON: {"DCGM GPU Diagnostic" (2.x, 3.x) | "DCGM Diagnostic" (4.x): {"test_categories": [{"category", "tests":
  [{"name", "results": [...], "test_summary" (4.x)}]}], "runtime_error" (when dcgmi could not run), "version"
  (3.x)}, "metadata" (4.x: version, driver)}. A result names its GPU as `gpu_ids` (2.x), `gpu_id` (3.3: a number
  under Deployment, a string elsewhere) or `entity_group` / `entity_id` (4.x); its `warnings` are one string
  (2.x-3.2) or a list of objects whose message is under `warning` (or `warnings` in 3.3's Deployment results) with
  its DCGM_FR code as `error_id`; `info` is a string (2.x, 3.x) or a list (4.x).
- Table: section rows (`|-----  Deployment  ---`), a test's row (`| Persistence Mode | Fail |`, `| memory | Warn |`,
  `| PCIe | Fail - GPU: 1 |`), per-GPU rows with an empty name (`|  | GPU3: Fail |`, `|  | Pass - GPUs: 0, 2 |`),
  and message rows named `Error` (2.x, 3.x Deployment), `Warning` / `Warning: GPU0` (plugins; 4.x) and `Info`,
  the message cut every 45 characters, mid-word, over rows with an empty name.
Statuses: Pass, Fail, Warn, Skip, Not Run (4.5+). Reading only, no judging.

A table is read row by row, so a cut one (a log excerpt, a truncated capture) still gives what it shows: rows
before any section header, a last row cut mid-line, and an `Error` / `Warning` row whose test row was cut off
above it (its result is then a test named CUT_TEST, failed: DCGM writes these rows only for a test that did not
pass). `Diag.cut` says which end was missing, for the judge to say what was not seen.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional

CELL = 45     # the table's value column: a message is cut into rows of this many characters
CUT_TEST = "(a test whose row was cut off)"


@dataclass
class Message:
    text: str
    code: Optional[int] = None       # DCGM_FR_* number where the JSON gives it (error_id)
    kind: str = "warning"            # warning, error or info (info never fails a test)
    gpus: Optional[List[int]] = None  # the GPU its row names (4.x "Warning: GPU0")


@dataclass
class DiagResult:
    test: str
    category: str
    status: str                                       # Pass, Fail, Warn, Skip, Not Run
    gpus: Optional[List[int]] = None                  # None: the test as a whole (its summary), or every GPU
    messages: List[Message] = field(default_factory=list)

    @property
    def warnings(self) -> List[str]:
        return [m.text for m in self.messages if m.kind != "info"]


@dataclass
class Diag:
    results: List[DiagResult] = field(default_factory=list)
    version: str = ""             # DCGM's, where the output says it
    runtime_error: str = ""       # dcgmi's own reason for running nothing
    form: str = ""                # "json" or "table"
    cut: List[str] = field(default_factory=list)   # a table's missing ends: "its start", "its end"


def parse_diag(text: str) -> Diag:
    """dcgmi diag's results from its JSON or its table (a Diag with no results when the text is neither)."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            doc = json.loads(stripped)
        except ValueError:
            return Diag(form="json")
        return _from_json(doc) if isinstance(doc, dict) else Diag(form="json")
    return _from_table(text)


# ---- JSON ------------------------------------------------------------------------------------------------
def _from_json(doc: Dict) -> Diag:
    body = doc.get("DCGM Diagnostic") or doc.get("DCGM GPU Diagnostic")
    if not isinstance(body, dict):
        return Diag(form="json")
    metadata = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    diag = Diag(version=str(body.get("version") or doc.get("version") or metadata.get("version") or ""),
                runtime_error=str(body.get("runtime_error") or ""), form="json")
    for category in _list(body.get("test_categories")):
        for test in _list(category.get("tests") if isinstance(category, dict) else None):
            if not isinstance(test, dict):
                continue
            name, group = str(test.get("name", "?")), str(category.get("category", ""))
            for result in _list(test.get("results")):
                if isinstance(result, dict):
                    diag.results.append(DiagResult(name, group, _status(result.get("status")), _gpus_of(result),
                                                   _messages(result)))
            summary = test.get("test_summary")
            if isinstance(summary, dict):
                diag.results.append(DiagResult(name, group, _status(summary.get("status")), None, _messages(summary)))
    return diag


def _list(value) -> list:
    return value if isinstance(value, list) else []


def _status(value) -> str:
    text = str(value or "?").strip()
    return {"pass": "Pass", "fail": "Fail", "warn": "Warn", "skip": "Skip", "not run": "Not Run"}.get(text.lower(), text)


def _gpus_of(result: Dict) -> Optional[List[int]]:
    if "entity_id" in result:
        group = str(result.get("entity_group", "GPU"))
        return [int(result["entity_id"])] if group == "GPU" and str(result["entity_id"]).isdigit() else None
    for key in ("gpu_id", "gpu_ids"):
        ids = result.get(key)
        if isinstance(ids, list):
            return [int(i) for i in ids if str(i).isdigit()] or None
        if ids is not None and str(ids).strip():
            return [int(i) for i in re.findall(r"\d+", str(ids))] or None
    return None


def _messages(entry: Dict) -> List[Message]:
    found: List[Message] = []
    for key, kind in (("warnings", "warning"), ("errors", "error"), ("info", "info")):
        found += _flatten(entry.get(key), kind)
    return found


def _flatten(value, kind: str) -> List[Message]:
    """Messages from a string, a list, or objects whose text is under `warning` (or `warnings`, nested: 3.3)."""
    if isinstance(value, str):
        return [Message(value.strip(), None, kind)] if value.strip() else []
    if isinstance(value, list):
        return [m for item in value for m in _flatten(item, kind)]
    if isinstance(value, dict):
        code = value.get("error_id")
        code = code if isinstance(code, int) and not isinstance(code, bool) else None
        inner = [m for key in ("warning", "warnings", "error", "msg", "message") for m in _flatten(value.get(key), kind)]
        return [Message(m.text, code if m.code is None else m.code, kind) for m in inner]
    return []


# ---- the table -------------------------------------------------------------------------------------------
_SECTION = re.compile(r"^[|+]-{3,}\s+(\w[\w ]*?)\s+-+[+|]")
_ROW = re.compile(r"^\|(.*?)\|(.*)\|\s*$")
_CUT_ROW = re.compile(r"^\|([^|]*)\|(.*\S.*)$")          # a row whose end was cut off (no closing |)
_HEADER = re.compile(r"^\|\s*Diagnostic\s*\|\s*Result\s*\|")
_BORDER = re.compile(r"^\+[-=+]+\+\s*$")
_MESSAGE_ROW = re.compile(r"^(Warning|Error|Info)(?::\s*GPU\s*(\d+))?$")
_STATUS = re.compile(r"^\s*(Pass|Fail|Skip|Warn|Not Run)\b(?:\s*-\s*(All|GPUs?:\s*([\d,\s]+)))?\s*$")
_GPU_STATUS = re.compile(r"^\s*GPU\s*(\d+):\s*(Pass|Fail|Skip|Warn|Not Run)\s*$")


def _from_table(text: str) -> Diag:
    diag = Diag(form="table")
    category, test = "", ""
    message: Optional[List[str]] = None       # the rows of the message being read
    cut: List = []                            # (Message, its rows): joined once every row is read
    lines = [line for line in text.splitlines() if line.strip()]
    for line in lines:
        section = _SECTION.match(line)
        if section:
            category, message = section.group(1), None
            continue
        cells = _ROW.match(line) or (_CUT_ROW.match(line) if line is lines[-1] else None)
        if not cells or line.startswith("+="):
            message = None
            continue
        name, value = cells.group(1).strip(), cells.group(2)[1:] if cells.group(2).startswith(" ") else cells.group(2)
        if category == "Metadata":
            if name == "DCGM Version":
                diag.version = value.strip()
            continue
        if _HEADER.match(line) or name in ("DCGM Version", "Driver Version Detected", "GPU Device IDs Detected"):
            continue                                                # Metadata rows whose section row was cut
        kind = _MESSAGE_ROW.match(name)
        if kind:
            message = [value]
            if not diag.results:                                    # its test's row was cut off above
                diag.results.append(DiagResult(CUT_TEST, category, "Fail"))
            said = Message("", None, kind.group(1).lower(), [int(kind.group(2))] if kind.group(2) else None)
            diag.results[-1].messages.append(said)
            cut.append((said, message))
            continue
        status = _status_of(value)
        if not name and message is not None and not status:
            message.append(value)                                   # a message cut over rows
            continue
        message = None
        if name:
            test = name
        if status and test:
            diag.results.append(DiagResult(test, category, status[0], status[1]))
    for said, rows in cut:
        said.text = _unwrap(rows)
    if diag.results or cut:
        diag.cut = [end for end, seen in (("its start", lines and (_BORDER.match(lines[0]) or _HEADER.match(lines[0])
                                                                   or any(_HEADER.match(x) for x in lines[:4]))),
                                          ("its end", _BORDER.match(lines[-1]))) if not seen]
    return diag


def _status_of(value: str):
    """("Fail", [1]) from "Fail - GPU: 1", ("Pass", None) from "Pass - All" or "Pass", ("Pass", [3]) from
    "GPU3: Pass"."""
    match = _STATUS.match(value)
    if match:
        return match.group(1), ([int(i) for i in re.findall(r"\d+", match.group(3))] if match.group(3) else None)
    match = _GPU_STATUS.match(value)
    return (match.group(2), [int(match.group(1))]) if match else None


def _unwrap(rows: List[str]) -> str:
    """A cell's text from the rows it was cut over: a row filled to the cell's width was cut mid-word (joined as
    is), a shorter one at a space (joined with one)."""
    text = rows[0].rstrip()
    for before, row in zip(rows, rows[1:]):
        full = len(before.rstrip()) >= min(CELL, len(before) - 2)
        text += ("" if full or row.startswith(" ") else " ") + row.rstrip()
    return re.sub(r" {2,}", " ", text).strip()
