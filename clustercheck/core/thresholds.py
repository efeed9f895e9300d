"""Thresholds the judges use: defaults, overridable in a TOML file.

    # clustercheck.toml (read from the current directory, or --config PATH)
    [env]
    shm_min_gib = 1.0          # /dev/shm smaller than this fails (Docker's default is 64 MB)
    disk_min_gib = 20          # free space of the working directory, warn below
    clock_warn_s = 1.0         # skew from the other nodes
    clock_fail_s = 5.0
    gpu_temp_warn_c = 85
    nofile_min = 4096          # open files (soft limit), warn below
    required = ["torch"]       # packages every node must have, with a range where given: "flash-attn>=2.6"
    fail_packages = []         # packages outside the training stack whose difference between nodes fails
    warn_packages = []         # training-stack packages whose difference only warns
    gpu_held_fail_share = 0.1  # a process of another job holding more than this share of a GPU's memory fails

    [bench]
    expected_busbw = 380.0     # GB/s all_reduce should reach (0: the published table, bench/expected.py)
    expected_fraction = 0.9    # below this fraction of it is a finding

Values are data, never code; an unknown key or a wrong type is bad input, named by
file and line.
"""

from __future__ import annotations

import math
import os
import re
import sys
from dataclasses import dataclass, field, fields
from typing import Dict, List, Optional

from clustercheck.core.errors import InputError
from clustercheck.core.inputs import read_text_file
from clustercheck.core.requirements import parse_requirement

LARGEST = 1e12   # no threshold a user means is larger; beyond it comparisons mean nothing

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - depends on the interpreter
    import tomli as tomllib

DEFAULT_FILE = "clustercheck.toml"


@dataclass
class EnvThresholds:
    shm_min_gib: float = 1.0
    disk_min_gib: float = 20.0
    clock_warn_s: float = 1.0
    clock_fail_s: float = 5.0
    gpu_temp_warn_c: float = 85.0
    nofile_min: int = 4096
    required: List[str] = field(default_factory=lambda: ["torch"])
    fail_packages: List[str] = field(default_factory=list)
    warn_packages: List[str] = field(default_factory=list)
    gpu_held_fail_share: float = 0.1


@dataclass
class BenchThresholds:
    expected_busbw: float = 0.0
    expected_fraction: float = 0.9


@dataclass
class Config:
    env: EnvThresholds = field(default_factory=EnvThresholds)
    bench: BenchThresholds = field(default_factory=BenchThresholds)
    source: str = "defaults"


SECTIONS = {"env": EnvThresholds, "bench": BenchThresholds}


def _line_of(text: str, key: str, section: bool = False) -> int:
    pattern = rf"^\s*\[\s*{re.escape(key)}\s*\]" if section else rf"^\s*{re.escape(key)}\s*="
    for number, line in enumerate(text.splitlines(), 1):
        if re.match(pattern, line):
            return number
    return 0


def _coerce(value, default, source, line, key):
    """value checked against the type of the default; ints are fine where floats are expected."""
    if isinstance(default, list):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise InputError(f"{key} must be a list of names", source, line, repr(value))
        for text in value:    # a requirement (name and range), or for the others a bare name: bad input names it
            if parse_requirement(text, source, line).specifier and key != "required":
                raise InputError(f"{key} takes package names, not version ranges", source, line, text)
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            (isinstance(default, int) and not isinstance(value, int)):
        wanted = "a whole number" if isinstance(default, int) else "a number"
        raise InputError(f"{key} must be {wanted}", source, line, repr(value))
    if not math.isfinite(value) or value > LARGEST:
        raise InputError(f"{key} must be a finite number (at most {LARGEST:g})", source, line, repr(value))
    if value < 0:
        raise InputError(f"{key} must not be negative", source, line, repr(value))
    return float(value) if isinstance(default, float) else value


def parse_config(text: str, source: str) -> Config:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        match = re.search(r"line (\d+)", str(exc))
        raise InputError(f"not valid TOML ({exc})", source, int(match.group(1)) if match else 0) from None
    config = Config(source=source)
    for section, values in data.items():
        if section not in SECTIONS:
            raise InputError(f"unknown section [{section}] (known: {', '.join(SECTIONS)})", source,
                             _line_of(text, section, section=True), section)
        if not isinstance(values, dict):
            raise InputError(f"{section} must be a table ([{section}])", source, _line_of(text, section), section)
        target = getattr(config, section)
        known = {f.name: f for f in fields(target)}
        for key, value in values.items():
            line = _line_of(text, key)
            if key not in known:
                raise InputError(f"unknown setting in [{section}] (known: {', '.join(known)})", source, line, key)
            setattr(target, key, _coerce(value, getattr(target, key), source, line, key))
    env = config.env
    if env.clock_fail_s < env.clock_warn_s:
        raise InputError("clock_fail_s must not be below clock_warn_s", source, _line_of(text, "clock_fail_s"),
                         str(env.clock_fail_s))
    if not 0 < env.gpu_held_fail_share <= 1:
        raise InputError("gpu_held_fail_share must be above 0 and at most 1", source,
                         _line_of(text, "gpu_held_fail_share"), str(env.gpu_held_fail_share))
    if not 0 < config.bench.expected_fraction <= 1:
        raise InputError("expected_fraction must be above 0 and at most 1", source,
                         _line_of(text, "expected_fraction"), str(config.bench.expected_fraction))
    return config


def load_config(path: Optional[str]) -> Config:
    """The file named, else ./clustercheck.toml when present, else the defaults."""
    if path is None:
        if not os.path.exists(DEFAULT_FILE):
            return Config()
        path = DEFAULT_FILE
    text = read_text_file(path, "thresholds file (UTF-8 TOML)")
    return parse_config(text, path)


def as_dict(config: Config) -> Dict:
    return {name: {f.name: getattr(getattr(config, name), f.name) for f in fields(getattr(config, name))}
            for name in SECTIONS}
