"""PyTorch Flight Recorder dumps among a user's files (recognised by the reader, never read as logs) judged by the
flight judge: the first collective some ranks never entered, and desyncs, on explain's screen and in its JSON."""

from __future__ import annotations

from typing import Dict, List, Tuple

from clustercheck.core.result import Finding
from clustercheck.flight.findings import judge as judge_dumps
from clustercheck.flight.read import read_dumps


def judge(paths: List[str]) -> Tuple[Dict, List[Finding]]:
    """({} and no finding where no file is a dump) or the dumps' document and findings."""
    if not paths:
        return {}, []
    doc, findings = judge_dumps(read_dumps(paths))
    return {"files": len(paths), **doc}, findings


def screen_lines(doc: Dict) -> List[str]:
    if not doc:
        return []
    groups = ", ".join(f"{g['group']} ({len(g['ranks'])} ranks)" for g in doc["groups"][:6])
    return [f"Flight Recorder: {doc['dumps']} rank(s) of {doc['files']} file(s), recorder "
            f"{'/'.join(doc['versions']) or '?'}; groups: {groups or 'none'}", ""]
