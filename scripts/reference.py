"""Print docs/reference.md: every command's --help, from the CLI itself.

    python scripts/reference.py > docs/reference.md

The help is formatted by click at a fixed width (100 columns), so the output is the same on
every run and in every terminal. tests/test_docs.py fails when docs/reference.md differs.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import click  # noqa: E402

WIDTH = 100
COMMAND = "python scripts/reference.py > docs/reference.md"


def _context(cmd: click.Command, name: str, parent: Optional[click.Context]) -> click.Context:
    settings = dict(cmd.context_settings)            # what click's own make_context applies (-h, --help)
    settings.update(terminal_width=WIDTH, max_content_width=WIDTH)
    return click.Context(cmd, info_name=name, parent=parent, **settings)


def _sections(cmd: click.Command, name: str, parent: Optional[click.Context], path: List[str]) -> List[str]:
    ctx = _context(cmd, name, parent)
    help_text = cmd.get_help(ctx).rstrip()
    out = [f"## {' '.join(path)}\n\n```text\n{help_text}\n```\n"]
    if isinstance(cmd, click.Group):
        for sub_name in sorted(cmd.list_commands(ctx)):
            sub = cmd.get_command(ctx, sub_name)
            if sub is None or sub.hidden:
                continue
            out += _sections(sub, sub_name, ctx, path + [sub_name])
    return out


def render() -> str:
    """The whole reference as Markdown, ending with one newline."""
    from clustercheck.cli import cli

    parts = [
        "# Command reference\n",
        f"Generated from the CLI's own `--help` by `{COMMAND}`; do not edit it by hand.\n",
    ]
    parts += _sections(cli, "clustercheck", None, ["clustercheck"])
    return "\n".join(parts)


if __name__ == "__main__":
    sys.stdout.write(render())
