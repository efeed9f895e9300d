"""Markdown reports written into a reports directory, one file per run."""

from __future__ import annotations

import json
import os
import time
from typing import Dict, Optional, Tuple

from clustercheck.core.errors import InputError

DEFAULT_DIR = "reports"


def check_writable(directory: str, flag: str = "--reports-dir") -> None:
    """The reports directory can take a report: checked before any node is contacted, so that minutes of
    checks are never lost to a directory that cannot be written at the end."""
    try:
        os.makedirs(directory, exist_ok=True)
        probe = os.path.join(directory, f".clustercheck-write-test-{os.getpid()}")
        with open(probe, "x"):
            pass
        os.remove(probe)
    except (OSError, ValueError) as exc:   # ValueError: a NUL in the path
        why = getattr(exc, "strerror", None) or str(exc)
        raise InputError(f"cannot write reports there ({why})", flag, value=directory) from None


def check_name(name: str, flag: str = "--name") -> None:
    """A report's name is one file name: no directory, nothing hidden, printable."""
    if (not name or name in (".", "..") or name.startswith(".") or len(name) > 100
            or any(c in name for c in "/\\") or not name.isprintable()):
        raise InputError("not usable as a report's file name (one name, printable, at most 100 characters, no /)",
                         flag, value=name)


def new_report_path(kind: str, directory: str = DEFAULT_DIR) -> str:
    """reports/<kind>-YYYYmmdd-HHMMSS.md, a name no earlier report has."""
    os.makedirs(directory, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = os.path.join(directory, f"{kind}-{stamp}.md")
    suffix = 1
    while os.path.exists(path):
        suffix += 1
        path = os.path.join(directory, f"{kind}-{stamp}-{suffix}.md")
    return path


def write_report(kind: str, markdown: str, directory: str = DEFAULT_DIR, path: Optional[str] = None) -> str:
    """Write the report (never overwriting one) and return its path."""
    path = path or new_report_path(kind, directory)
    with open(path, "x", encoding="utf-8") as handle:
        handle.write(markdown if markdown.endswith("\n") else markdown + "\n")
    return path


def read_document(path: str, what: str) -> Tuple[Optional[Dict], str]:
    """An earlier report or `--json` output: its JSON object, or None and the text when the file is
    not JSON (an nccl-tests log); bad input names the file."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError as exc:
        raise InputError(f"cannot read {what} ({exc.strerror})", path) from None
    try:
        doc = json.loads(text)
    except ValueError:
        return None, text
    if not isinstance(doc, dict):
        raise InputError(f"not {what}", path)
    return doc, text
