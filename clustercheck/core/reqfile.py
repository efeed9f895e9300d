"""Reading the files people already have that say which packages an environment holds, as pip and conda write them:

- pip's requirements files (https://pip.pypa.io/en/stable/reference/requirements-file-format/): `pip freeze`,
  `pip list --format=freeze`, `uv pip freeze`, pip-compile's locked files (lines continued with a backslash,
  `--hash=` options after a requirement, `# via` comments), extras and environment markers, `-r FILE` includes and
  `-c FILE` constraints resolved relative to the file that names them, `-e` editables, global options (ignored);
- `pip list --format=json`: a JSON list of {"name", "version"};
- `conda list --export`: `name=version=build` lines; a `pypi_0` build was installed by pip and is required, any
  other is a conda package (many are not Python: libgcc, openssl) and is held only where the node's Python has it;
- an `environment.yml`: its `pip:` section, read as a requirements file (its conda section is not held: those are
  conda's packages, not the interpreter's distributions).

Every line read becomes a `Wanted`; a line that names no package clustercheck can see (an editable local directory)
is kept as skipped and said; anything else that is not a requirement is bad input naming the file and line.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, replace
from typing import Dict, List, Optional, Tuple

import yaml     # PyYAML: environment.yml is YAML
from packaging.specifiers import SpecifierSet
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from clustercheck.core.errors import InputError
from clustercheck.core.inputs import read_text_file
from clustercheck.core.requirements import Wanted, parse_requirement

WHAT = "requirements file (pip freeze, pip-compile, pip list --format=json, conda list --export, environment.yml)"
INCLUDE = {"-r": False, "--requirement": False, "-c": True, "--constraint": True}   # option: is it a constraint
EDITABLE = ("-e", "--editable")
COMMENT = re.compile(r"(^|\s+)#.*$")        # pip: a # at the start of a line or after whitespace
CONDA = re.compile(r"^([A-Za-z0-9_][A-Za-z0-9_.+\-]*)=([^=<>!~\s]+)(?:=(\S+))?$")   # conda list --export
MAX_DEPTH = 16                              # -r chains deeper than this are a loop


@dataclass
class RequirementsFile:
    path: str
    wanted: Dict[str, Wanted] = field(default_factory=dict)     # by PEP 503 name
    skipped: List[str] = field(default_factory=list)            # "file:line: value (why)"
    files: List[str] = field(default_factory=list)              # this file and every one it includes

    def add(self, want: Wanted) -> None:
        """A package named twice (a requirement and a constraint, two includes) must meet both ranges."""
        have = self.wanted.get(want.name)
        if have is not None:
            specifier = str(SpecifierSet(have.specifier) & SpecifierSet(want.specifier))   # one ==1.0 of two
            want = replace(want if not want.constraint else have, specifier=specifier,
                           constraint=have.constraint and want.constraint)
        self.wanted[want.name] = want


def read_requirements_file(path: str, what: str = WHAT) -> RequirementsFile:
    """The packages a file wants, in any of the formats above; InputError names the file and line of a bad one."""
    text = read_text_file(path, what)
    result = RequirementsFile(path)
    head = text.lstrip()
    if head.startswith("["):
        _pip_list_json(text, path, result)
    elif head.startswith("{"):
        raise InputError(f"not a {what}: a JSON object (pip list --format=json writes a list)", path)
    elif path.endswith((".yml", ".yaml")) or re.search(r"^dependencies:", text, re.M):
        _environment_yml(text, path, result)
    else:
        _lines(text, path, result, constraint=False, depth=0)
    if not result.wanted:
        why = f" ({result.skipped[0]})" if result.skipped else ""
        raise InputError(f"not a {what}: no package in it{why}", path)
    return result


def _pip_list_json(text: str, path: str, result: RequirementsFile) -> None:
    try:
        rows = json.loads(text)
    except ValueError as exc:
        raise InputError(f"not a {WHAT}: broken JSON ({str(exc).split(':')[0]})", path,
                         getattr(exc, "lineno", 0)) from None
    result.files.append(path)
    for index, row in enumerate(rows):
        if not isinstance(row, dict) or not isinstance(row.get("name"), str) or not isinstance(row.get("version"),
                                                                                                str):
            raise InputError(f"entry {index + 1} is not pip list's {{\"name\": ..., \"version\": ...}}", path,
                             value=str(row)[:120])
        name = canonicalize_name(row["name"])
        result.add(Wanted(name, f"=={row['version']}", f"{row['name']}=={row['version']}"))


def _environment_yml(text: str, path: str, result: RequirementsFile) -> None:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise InputError(f"not an environment.yml: broken YAML ({getattr(exc, 'problem', None) or 'unreadable'})",
                         path, mark.line + 1 if mark else 0) from None
    deps = doc.get("dependencies") if isinstance(doc, dict) else None
    if not isinstance(deps, list):
        raise InputError("not an environment.yml: no `dependencies:` list", path)
    sections = [d["pip"] for d in deps if isinstance(d, dict) and isinstance(d.get("pip"), list)]
    if not sections:
        raise InputError("an environment.yml without a `pip:` section: its conda packages are not the "
                         "interpreter's distributions (give a pip freeze or a conda list --export instead)", path)
    result.files.append(path)
    lines = text.splitlines()
    at = 0
    for item in (str(i) for section in sections for i in section):
        at = next((n for n in range(at, len(lines)) if item in lines[n]), at)
        _one(item, path, at + 1, result, constraint=False, depth=0)


def _lines(text: str, path: str, result: RequirementsFile, constraint: bool, depth: int) -> None:
    result.files.append(path)
    for number, line in _logical_lines(text):
        _one(line, path, number, result, constraint, depth)


def _logical_lines(text: str) -> List[Tuple[int, str]]:
    """pip's order (req_file.py's join_lines): a line ending in a backslash is joined to the next as is (numbered by
    its first line), a comment line ends a continued one; then comments are dropped."""
    joined: List[Tuple[int, str]] = []
    parts: List[str] = []
    first = 0
    for number, raw in enumerate(text.splitlines(), 1):
        comment = raw.lstrip().startswith("#")
        if raw.endswith("\\") and not comment:
            if not parts:
                first = number
            parts.append(raw.strip("\\"))
            continue
        line = " " + raw if comment else raw
        joined.append((first, "".join(parts) + line) if parts else (number, line))
        parts = []
    if parts:
        joined.append((first, "".join(parts)))
    cleaned = ((n, COMMENT.sub("", line).strip()) for n, line in joined)
    return [(n, line) for n, line in cleaned if line]


def _one(line: str, path: str, number: int, result: RequirementsFile, constraint: bool, depth: int) -> None:
    option, _, rest = line.partition(" ")
    if "=" in option and option.startswith("--"):
        option, _, rest = line.partition("=")
    elif option[:2] in ("-r", "-c", "-e") and len(option) > 2 and not option.startswith("--"):
        option, rest = option[:2], line[2:]            # -rbase.txt: optparse's attached value
    if option in INCLUDE:
        _include(rest.strip(), path, number, result, constraint or INCLUDE[option], depth)
    elif option in EDITABLE:
        _editable(rest.strip(), path, number, result)
    elif line.startswith("-"):
        return                      # a global option (--index-url, --find-links, --require-hashes ...)
    elif CONDA.match(line):
        _conda(CONDA.match(line), line, path, number, result)
    else:
        want = _requirement(_without_options(line), path, number, constraint)
        if want is None:
            result.skipped.append(f"{path}:{number}: {line[:80]} (a local path or URL without #egg=NAME)")
        else:
            result.add(want)


def _without_options(line: str) -> str:
    """pip's rule: the requirement is the words before the first that starts with a dash (--hash=..., ...)."""
    words = []
    for word in line.split(" "):
        if word.startswith("-"):
            break
        words.append(word)
    return " ".join(words).strip()


def _requirement(text: str, path: str, number: int, constraint: bool) -> Optional[Wanted]:
    egg = _named(text)
    if egg is not None:
        return Wanted(canonicalize_name(egg), "", text, constraint=constraint)
    try:
        return parse_requirement(text, path, number, constraint)
    except InputError:
        if "/" in text or text.startswith((".", "~")):
            return None             # a local directory or an archive's URL: pip installs it, its name is not here
        raise


def _conda(match: "re.Match[str]", text: str, path: str, number: int, result: RequirementsFile) -> None:
    """`name=version=build`: pip's (`pypi_0`) is required; conda's own is held where the node's Python has a
    distribution of that name, and one whose version is not a Python version (jpeg 9e) is no Python package."""
    name, version, build = match.groups()
    try:
        Version(version)
    except InvalidVersion:
        if build == "pypi_0":
            raise InputError("not a Python version in a pip-installed (pypi_0) line", path, number, text) from None
        return
    result.add(Wanted(canonicalize_name(name), f"=={version}", text, constraint=build != "pypi_0"))


def _named(text: str) -> Optional[str]:
    """The package a URL or wheel line installs: `...#egg=NAME`, or a wheel file's own name; None if neither."""
    if "#egg=" in text:
        return re.split(r"[&\[]", text.rpartition("#egg=")[2])[0] or None
    if text.endswith(".whl"):
        try:
            return parse_wheel_filename(text.rpartition("/")[2])[0]
        except InvalidWheelFilename:
            return None
    return None


def _editable(target: str, path: str, number: int, result: RequirementsFile) -> None:
    name = _named(target)
    if name is None:
        result.skipped.append(f"{path}:{number}: -e {target[:80]} (an editable without #egg=NAME: which package?)")
        return
    result.add(Wanted(canonicalize_name(name), "", f"-e {target}"))


def _include(target: str, path: str, number: int, result: RequirementsFile, constraint: bool, depth: int) -> None:
    if not target:
        raise InputError("-r / -c without a file name", path, number)
    if "://" in target:
        result.skipped.append(f"{path}:{number}: {target[:80]} (a URL: not fetched)")
        return
    included = os.path.normpath(os.path.join(os.path.dirname(path), os.path.expanduser(target)))
    if os.path.realpath(included) in {os.path.realpath(f) for f in result.files} or depth >= MAX_DEPTH:
        return                      # read already (two includes of one file, or a loop)
    try:
        text = read_text_file(included, WHAT)
    except InputError as exc:
        raise InputError(f"the file it includes cannot be read: {exc}", path, number, target) from None
    _lines(text, included, result, constraint, depth + 1)


FILE_SUFFIXES = (".txt", ".in", ".yml", ".yaml", ".json", ".lock")


def requirements_argument(value: str, source: str = "--require") -> List[Wanted]:
    """One --require value: a requirement (`flash-attn>=2.6`), or a file of them (`-r FILE`, or a value that is a
    path: it has a `/` or ends .txt, .in, .yml, .yaml, .json, .lock; no package's name does)."""
    text = value.strip()
    if text.startswith(("-r ", "-r=", "--requirement ", "--requirement=")):
        text = re.split(r"[ =]", text, 1)[1].strip()
    elif not ("/" in text or text.endswith(FILE_SUFFIXES)):
        return [parse_requirement(text, source)]
    return list(read_requirements_file(os.path.expanduser(text)).wanted.values())
