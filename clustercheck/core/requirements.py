"""A package requirement as people write it (`flash-attn>=2.6`, `bitsandbytes`, `torch==2.5.1`,
`tomli>=1.1; python_version < "3.11"`), read with `packaging` (PyPA's own specifier library), and held against the
version a node has."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from packaging.markers import InvalidMarker, Marker, UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from clustercheck.core.errors import InputError

# The nodes are Linux: what a marker asks of the platform, said for them rather than for where clustercheck runs.
LINUX = {"os_name": "posix", "sys_platform": "linux", "platform_system": "Linux"}


@dataclass(frozen=True)
class Wanted:
    name: str                 # PEP 503: flash-attn
    specifier: str = ""       # ">=2.6", "==2.5.1", "" for any version
    text: str = ""            # as the user wrote it
    marker: str = ""          # 'python_version < "3.11"': wanted only where it holds
    constraint: bool = False  # a -c constraint or a conda package: the range holds where it is installed, none needed

    def allows(self, version: Optional[str]) -> bool:
        """Whether a node with this version (None: not installed) has what is wanted."""
        if version is None:
            return self.constraint
        if not self.specifier:
            return True
        try:
            return SpecifierSet(self.specifier).contains(Version(version), prereleases=True)
        except InvalidVersion:
            return False

    def applies(self, python: Optional[str]) -> bool:
        """Whether the marker holds on a Linux node whose interpreter is `python` ("3.11.4"; None: unknown, and a
        requirement is then held, never silently dropped)."""
        if not self.marker or not python:
            return True
        env = dict(LINUX, python_full_version=python, python_version=".".join(python.split(".")[:2]))
        try:
            return Marker(self.marker).evaluate(env)
        except (InvalidMarker, UndefinedComparison, UndefinedEnvironmentName):
            return True

    @property
    def pinned(self) -> Optional[str]:
        """The version of an == pin (a pip freeze line), else None."""
        parts = [s for s in SpecifierSet(self.specifier)] if self.specifier else []
        return parts[0].version if len(parts) == 1 and parts[0].operator in ("==", "===") else None


def parse_requirement(text: str, source: str = "command line", line: int = 0, constraint: bool = False) -> Wanted:
    """A requirement, or InputError naming where it came from and the value (`flash-attn>=2.6`, `x>=`)."""
    stripped = text.strip()
    try:
        requirement = Requirement(stripped)
    except InvalidRequirement as exc:
        raise InputError(f"not a package requirement ({str(exc).splitlines()[0]})", source, line, stripped) from None
    return Wanted(canonicalize_name(requirement.name), str(requirement.specifier), stripped,
                  str(requirement.marker) if requirement.marker else "", constraint)
