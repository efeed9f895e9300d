"""Markdown reports written into a reports directory, one file per run."""

from __future__ import annotations

import os
import time

DEFAULT_DIR = "reports"


def write_report(kind: str, markdown: str, directory: str = DEFAULT_DIR) -> str:
    """Write reports/<kind>-YYYYmmdd-HHMMSS.md (never overwriting) and return its path."""
    os.makedirs(directory, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = os.path.join(directory, f"{kind}-{stamp}.md")
    suffix = 1
    while os.path.exists(path):
        suffix += 1
        path = os.path.join(directory, f"{kind}-{stamp}-{suffix}.md")
    with open(path, "x", encoding="utf-8") as handle:
        handle.write(markdown if markdown.endswith("\n") else markdown + "\n")
    return path
