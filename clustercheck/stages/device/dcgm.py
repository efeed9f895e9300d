"""NVIDIA DCGM's diagnostic (`dcgmi diag -r 1|2|3`), read and judged per GPU.

Read from its JSON (`-j`: DCGM 3.x writes "DCGM GPU Diagnostic" with per-GPU `gpu_ids`, 4.x writes
"DCGM Diagnostic" with per-entity `entity_id`) or from the table it prints without `-j`. A test that
failed names its GPUs; a test that was skipped is UNKNOWN, never OK (DCGM skips what it may not
run: the memory and PCIe plugins on some parts, EUD where it is not installed); what DCGM itself
reports as an internal error of a test is said as such, not as a fault of the GPU. Judging only.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from clustercheck.core.result import Finding, Status

# Known results that are not a verdict on the GPU: (pattern of the test or its warning, label).
NOT_THE_GPU = [
    (re.compile(r"internal error during the test", re.I), "an internal error of DCGM's test (NVIDIA/DCGM#253), "
                                                          "not a verdict on the GPU"),
    (re.compile(r"Persistence mode .* is disabled", re.I), "a setting, not a fault: persistence mode is off "
                                                           "(nvidia-smi -pm 1)"),
]
SKIPPED_BECAUSE = [
    (re.compile(r"^EUD", re.I), "EUD (the extended utility diagnostics) is not installed or not enabled"),
]


@dataclass
class DiagResult:
    test: str
    category: str
    status: str                          # Pass, Fail, Skip, Warn
    gpus: Optional[List[int]] = None     # None: the whole node (or every GPU)
    warnings: List[str] = field(default_factory=list)


def parse_diag(text: str) -> List[DiagResult]:
    """dcgmi diag's results, from its JSON or its table; [] when the text is neither."""
    try:
        doc = json.loads(text)
    except ValueError:
        return _from_table(text)
    body = doc.get("DCGM Diagnostic") or doc.get("DCGM GPU Diagnostic") or {} if isinstance(doc, dict) else {}
    found = []
    for category in body.get("test_categories") or []:
        for test in category.get("tests") or []:
            for result in test.get("results") or []:
                gpus = _gpus_of(result)
                warnings = [w.get("warning", "") if isinstance(w, dict) else str(w)
                            for w in result.get("warnings") or []]
                found.append(DiagResult(test.get("name", "?"), category.get("category", ""),
                                        str(result.get("status", "?")).strip(), gpus, warnings))
    return found


def _gpus_of(result: Dict) -> Optional[List[int]]:
    if "entity_id" in result and result.get("entity_group", "GPU") == "GPU":
        return [int(result["entity_id"])]
    ids = str(result.get("gpu_ids", "")).strip()
    return [int(i) for i in re.findall(r"\d+", ids)] if ids else None


def _from_table(text: str) -> List[DiagResult]:
    """The table dcgmi diag prints: "| Targeted Power | Pass - GPUs: 0, 2, 3 |", "|  | Fail - GPU: 1 |",
    "| memory | Pass |" then "|  | GPU3: Fail |", and "| Warning | ... |" lines wrapped over several rows."""
    found: List[DiagResult] = []
    category, test, warning = "", "", None
    for line in text.splitlines():
        section = re.match(r"^[|+]-+\s+(\w[\w ]*?)\s+-+[+|]", line)
        if section:
            category, warning = section.group(1), None
            continue
        cells = re.match(r"^\|(.*?)\|(.*)\|$", line)
        if not cells or category in ("", "Metadata") or line.startswith("+="):
            continue
        name, value = cells.group(1).strip(), cells.group(2)[1:]
        if name in ("Warning", "Info") or (not name and warning is not None and not _status_of(value)):
            if name == "Warning":
                warning = value
                if found:
                    found[-1].warnings.append(warning)
            elif name == "Info":
                warning = None
            elif found and found[-1].warnings:   # a warning wrapped over rows: joined once it is whole
                found[-1].warnings[-1] += "\0" + value
            continue
        if name:
            test, warning = name, None
        status = _status_of(value)
        if status and test:
            found.append(DiagResult(test, category, status[0], status[1]))
    for result in found:
        result.warnings = [_unwrap(w.split("\0")) for w in result.warnings]
    return _per_gpu_or_summary(found)


def _unwrap(rows: List[str]) -> str:
    """A cell's text from the rows it was wrapped over: a row filled to the cell's width was cut mid-text
    (joined as is), a shorter one at a space (joined with one)."""
    text = rows[0].rstrip()
    for before, row in zip(rows, rows[1:]):
        full = len(before.rstrip()) >= len(before) - 2     # the last two columns are the cell's padding
        text += ("" if full or row.startswith(" ") else " ") + row.rstrip()
    return re.sub(r" {2,}", " ", text).strip()


def _status_of(value: str):
    """("Fail", [1]) from "Fail - GPU: 1", ("Pass", None) from "Pass - All" or "Pass", ("Pass", [3]) from
    "GPU3: Pass"."""
    match = re.match(r"^\s*(Pass|Fail|Skip|Warn)\b(?:\s*-\s*(All|GPUs?:\s*([\d,\s]+)))?\s*$", value)
    if match:
        return match.group(1), ([int(i) for i in re.findall(r"\d+", match.group(3))] if match.group(3) else None)
    match = re.match(r"^\s*GPU(\d+):\s*(Pass|Fail|Skip|Warn)\s*$", value)
    return (match.group(2), [int(match.group(1))]) if match else None


def _per_gpu_or_summary(found: List[DiagResult]) -> List[DiagResult]:
    """Where a test has per-GPU rows, its summary row is dropped when it says Pass ("| memory | Pass |");
    a summary Fail or Skip stays: the test as a whole did not pass, whatever each GPU's row says."""
    per_gpu = {r.test for r in found if r.gpus}
    return [r for r in found if not (r.gpus is None and r.test in per_gpu and r.status == "Pass")]


def _label(result: DiagResult, table) -> str:
    text = " ".join([result.test] + result.warnings)
    return next((label for pattern, label in table if pattern.search(text)), "")


def judge_dcgm(node: str, answer: Optional[Dict]) -> List[Finding]:
    """What the node's probe brought back from dcgmi (None: DCGM is not installed there: nothing said)."""
    if not answer:
        return []
    level = answer.get("level", 1)
    if answer.get("skipped"):
        return [Finding("device.dcgm", Status.UNKNOWN, f"dcgmi diag -r {level} not run on {node}: {answer['skipped']}",
                        [], "run it where it can run (MIG off), or rely on the measured figures", [node])]
    found = judge_diag(node, parse_diag(answer.get("output") or ""), level)
    if answer.get("exit") not in (0, None) and not any(f.status is Status.FAIL for f in found):
        found.append(Finding("device.dcgm", Status.UNKNOWN, f"dcgmi diag -r {level} on {node} exited "
                                                            f"{answer['exit']} and no test says why",
                             [line for line in (answer.get("stderr") or "").splitlines()[-3:] if line.strip()],
                             "run dcgmi diag by hand on that node (is nv-hostengine running?)", [node]))
    return found


def judge_diag(node: str, results: List[DiagResult], level: int) -> List[Finding]:
    """One finding per failed test (its GPUs named), one for what was skipped, one OK for what passed."""
    if not results:
        return [Finding("device.dcgm", Status.UNKNOWN, f"dcgmi diag -r {level} on {node}: no result could be read",
                        [], "run `dcgmi diag -r 1` on the node by hand", [node])]
    findings = []
    for result in [r for r in results if r.status == "Fail"]:
        gpus = f", GPU {', '.join(map(str, result.gpus))}" if result.gpus else ""
        label = _label(result, NOT_THE_GPU)
        findings.append(Finding("device.dcgm", Status.UNKNOWN if label else Status.FAIL,
                                f"dcgmi diag -r {level}: {result.test} failed on {node}{gpus}"
                                + (f" ({label})" if label else ""), result.warnings[:3] or [result.category],
                                "rerun dcgmi diag -r 3 on that node; a failed hardware test: drain it and replace "
                                "the GPU" if not label else "fix the setting or rerun; not a hardware verdict", [node]))
    odd = [r for r in results if r.status not in ("Pass", "Fail", "Skip")]
    if odd:
        findings.append(Finding("device.dcgm", Status.WARN if all(r.status == "Warn" for r in odd) else Status.UNKNOWN,
                                f"dcgmi diag -r {level} on {node}: {len(odd)} test(s) neither passed nor failed",
                                [f"{r.test}: {r.status}" + (f": {r.warnings[0]}" if r.warnings else "") for r in odd],
                                "read DCGM's warning; rerun dcgmi diag -r 3 on that node", [node]))
    skipped = [r for r in results if r.status == "Skip"]
    if skipped:
        findings.append(Finding("device.dcgm", Status.UNKNOWN, f"dcgmi diag -r {level} skipped "
                                                               f"{len(skipped)} test(s) on {node}",
                                [f"{r.test}" + (f": {_label(r, SKIPPED_BECAUSE)}" if _label(r, SKIPPED_BECAUSE)
                                                else "") for r in skipped],
                                "a skipped test is not a pass: enable it (dcgmi diag -p <plugin>.is_allowed=true) "
                                "or check it another way", [node]))
    passed = sorted({r.test for r in results if r.status == "Pass"})
    if passed and not any(f.status is Status.FAIL for f in findings):
        findings.append(Finding("device.dcgm", Status.OK, f"dcgmi diag -r {level} on {node}: {len(passed)} test(s) "
                                                          f"passed ({', '.join(passed[:6])}"
                                                          f"{', ...' if len(passed) > 6 else ''})"))
    return findings
