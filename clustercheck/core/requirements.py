"""A package requirement as people write it (`flash-attn>=2.6`, `bitsandbytes`, `torch==2.5.1`), read with
`packaging` (PyPA's own specifier library), and held against the version a node has."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from clustercheck.core.errors import InputError


@dataclass(frozen=True)
class Wanted:
    name: str                 # PEP 503: flash-attn
    specifier: str = ""       # ">=2.6", "==2.5.1", "" for any version
    text: str = ""            # as the user wrote it

    def allows(self, version: Optional[str]) -> bool:
        """Whether a node with this version (None: not installed) has what is wanted."""
        if version is None:
            return False
        if not self.specifier:
            return True
        try:
            return SpecifierSet(self.specifier).contains(Version(version), prereleases=True)
        except InvalidVersion:
            return False

    @property
    def pinned(self) -> Optional[str]:
        """The version of an == pin (a pip freeze line), else None."""
        parts = [s for s in SpecifierSet(self.specifier)] if self.specifier else []
        return parts[0].version if len(parts) == 1 and parts[0].operator in ("==", "===") else None


def parse_requirement(text: str, source: str = "command line", line: int = 0) -> Wanted:
    """A requirement, or InputError naming where it came from and the value (`flash-attn>=2.6`, `x>=`)."""
    stripped = text.strip()
    try:
        requirement = Requirement(stripped)
    except InvalidRequirement as exc:
        raise InputError(f"not a package requirement ({str(exc).splitlines()[0]})", source, line, stripped) from None
    return Wanted(canonicalize_name(requirement.name), str(requirement.specifier), stripped)
