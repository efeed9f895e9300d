"""The documentation stays true: the command reference is the CLI's own help, the README stays a
front page, and no relative link points at a file that is not there."""

import re
import runpy
import subprocess
import sys
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "docs" / "reference.md"
REGENERATE = "python scripts/reference.py > docs/reference.md"
README_MAX_LINES = 200

LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def _markdown_files():
    return [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))


def _links(text):
    """Every link target outside fenced code blocks and inline code."""
    in_fence = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        for match in LINK.finditer(re.sub(r"`[^`]*`", "", line)):
            yield number, match.group(1)


def _is_relative_file_link(target):
    return not (target.startswith("#") or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("//"))


def test_reference_is_generated_from_the_cli():
    render = runpy.run_path(str(ROOT / "scripts" / "reference.py"))["render"]
    expected = render()
    actual = REFERENCE.read_text(encoding="utf-8") if REFERENCE.exists() else ""
    assert actual == expected, (
        f"docs/reference.md is not what the CLI's --help says now: regenerate it with `{REGENERATE}` "
        "(from the repository root) and commit the result")


def test_reference_renders_the_same_each_time():
    render = runpy.run_path(str(ROOT / "scripts" / "reference.py"))["render"]
    assert render() == render()


def test_readme_is_a_front_page():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < README_MAX_LINES, (
        f"README.md has {len(lines)} lines; keep it under {README_MAX_LINES} and put the detail in docs/")


def test_relative_links_point_at_files_that_exist():
    broken = []
    for path in _markdown_files():
        for number, target in _links(path.read_text(encoding="utf-8")):
            if not _is_relative_file_link(target):
                continue
            file_part = target.split("#", 1)[0].split("?", 1)[0]
            if not file_part:
                continue
            if not (path.parent / file_part).exists():
                broken.append(f"{path.relative_to(ROOT)}:{number}: {target}")
    assert not broken, "links to files that do not exist:\n" + "\n".join(broken)


def test_the_link_check_sees_links():
    text = "see [a](docs/a.md), ![b](b.png) and [c](https://x.org)\n```\n[d](nothing.md)\n```\n`[e](code.md)`\n"
    assert [target for _, target in _links(text)] == ["docs/a.md", "b.png", "https://x.org"]


def test_every_command_loads_by_its_name_and_only_the_one_that_runs_is_imported():
    """The group loads a command's module when it runs (clustercheck/cli.py's COMMANDS): each entry is the command
    of that name, and `clustercheck plan --help` imports no other command's module."""
    from clustercheck.cli import COMMANDS, cli
    ctx = click.Context(cli, info_name="clustercheck")
    assert {name: cli.get_command(ctx, name).name for name in COMMANDS} == {name: name for name in COMMANDS}
    loaded = subprocess.run([sys.executable, "-c", "import sys\nfrom clustercheck.cli import main\n"
                             "try:\n    main(['plan', '--help'])\nexcept SystemExit:\n    pass\n"
                             "print(sorted(m for m in sys.modules if m.startswith('clustercheck.commands.')))"],
                            capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert loaded.stdout.strip().splitlines()[-1] == "['clustercheck.commands.plan']", loaded.stdout + loaded.stderr
