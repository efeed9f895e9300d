"""Files that are outputs clustercheck already reads, recognised by their own structure and judged as the
stages judge them: `nvidia-smi -q -x` (GPU health), `dcgmi diag` (device), kernel logs with NVRM Xid lines
(GPU health), nccl-tests tables (bench's reading). Pure: the texts are read already."""

from __future__ import annotations

import re
from typing import List

from clustercheck.core.inventory import Node
from clustercheck.core.result import Finding, Status
from clustercheck.core.thresholds import EnvThresholds
from clustercheck.node.facts import Probed
from clustercheck.node.gpu_health import GpuFacts, gpu_health
from clustercheck.onnode import gpuprobe, kernlog
from clustercheck.outputs.dcgm import judge_dcgm_diag
from clustercheck.outputs.dcgm_read import parse_diag
from clustercheck.outputs.nccl_tests import PLACEMENTS, read_tables

KINDS = ("nvidia-smi -q -x", "dcgmi diag", "kernel log (Xid)", "nccl-tests")


def kind_of(text: str) -> str:
    if "<nvidia_smi_log" in text:
        return KINDS[0]
    if re.search(r'"DCGM (?:GPU )?Diagnostic"|\|\s*Diagnostic\s*\|\s*Result\s*\|', text):
        return KINDS[1]
    if re.search(r"NVRM: Xid \(", text):
        return KINDS[2]
    if re.search(r"^#\s+size\s+count\s+type|Avg bus bandwidth", text, re.M):
        return KINDS[3]
    return ""


def _gpu_health(name: str, facts: dict) -> List[Finding]:
    probed = Probed(Node(name), facts=facts)       # a recorded document: no transport was crossed
    return gpu_health(GpuFacts([probed], EnvThresholds()))


def judge_recorded(path: str, text: str) -> List[Finding]:
    """What clustercheck's own judges say of a recorded output ([] when the file is none of them)."""
    kind = kind_of(text)
    name = path.rsplit("/", 1)[-1]
    if kind == KINDS[0]:
        try:
            info = gpuprobe.parse_nvidia_smi_xml(text)
        except ValueError as exc:
            return [Finding("explain.recorded", Status.UNKNOWN, f"{name}: nvidia-smi XML that cannot be read "
                                                                f"({exc})", [], "")]
        return _gpu_health(name, {"gpu": info})
    if kind == KINDS[1]:
        return judge_dcgm_diag(name, parse_diag(text), 0)     # the parsed document, judged as the device stage does
    if kind == KINDS[2]:
        events, not_kept = kernlog.xid_events(text.splitlines())
        return _gpu_health(name, {"gpu": {"gpus": []}, "kernel_log": {"readable": True, "source": name,
                                                                       "xid": events, "xid_not_kept": not_kept}})
    if kind == KINDS[3]:
        tables = read_tables(text)
        rows = [row for table in tables for row in table.rows]
        if not rows:
            return [Finding("explain.recorded", Status.UNKNOWN, f"{name}: an nccl-tests output with no readable "
                                                                f"row", [], "")]
        def busbw(row):
            return max((row[p]["busbw"] for p in PLACEMENTS if isinstance(row.get(p), dict)), default=0.0)
        best = max(rows, key=busbw)
        if not re.search(r"# Avg bus bandwidth\s*:", text):    # nccl-tests prints it after the last size
            return [Finding("explain.recorded", Status.UNKNOWN, f"{name}: an nccl-tests output cut before its end "
                                                                f"(no 'Avg bus bandwidth' line after {len(rows)} "
                                                                f"sizes): the test hung there, or the output was cut",
                            [], "rerun it to its end; a hang at one size: clustercheck bench names the slow node")]
        return [Finding("explain.recorded", Status.OK, f"{name}: nccl-tests, {len(rows)} sizes; the largest bus "
                                                       f"bandwidth {busbw(best):.2f} GB/s at {best['size']:,} bytes "
                                                       f"(clustercheck bench --baseline {name} compares a run with "
                                                       f"it)", [], "")]
    return []
