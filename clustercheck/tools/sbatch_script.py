"""The batch script `clustercheck sbatch` prints: preflight in a Slurm allocation, its exit code the verdict.

Every value that lands on a `#SBATCH` line is checked first: Slurm reads those lines itself, without a
shell, so a newline in --account would start a directive of its own and a bad --time would be
misread or refused only after queueing.
"""

from __future__ import annotations

import re
import shlex
import sys
from typing import Optional, Sequence

from clustercheck.core.errors import InputError

# Slurm's time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S, and the unlimited spellings.
TIME_RE = re.compile(r"^(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+|\d+-\d+:\d{1,2}|\d+-\d+:\d{1,2}:\d{1,2}"
                     r"|UNLIMITED|INFINITE)$")
NAME_RE = re.compile(r"^[A-Za-z0-9_.+-]+(,[A-Za-z0-9_.+-]+)*$")   # partitions (comma lists) and accounts
PATH_RE = re.compile(r"^[A-Za-z0-9_./+@:-]+$")                  # a path Slurm's --output reads as it is

SCRIPT = """#!/bin/bash
#SBATCH --job-name=clustercheck-preflight
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node=1
{gpus}#SBATCH --time={time}
#SBATCH --output={reports}/preflight-%j.out
{extra}
# Runs on the allocation's first node and reaches every node through job steps
# (srun --overlap): no SSH to compute nodes needed. The job's exit code is the verdict:
# 0 READY, 1 READY with warnings, 2 NOT READY, 3 could not check everything.
set -uo pipefail
cd "$SLURM_SUBMIT_DIR"
mkdir -p {reports}
PYTHON=${{CLUSTERCHECK_PYTHON:-{python}}}
command -v "$PYTHON" >/dev/null || PYTHON=python3   # not this path on the node: the one on PATH
"$PYTHON" -m clustercheck preflight --slurm --reports-dir {reports} --name "slurm-$SLURM_JOB_ID"{args}
code=$?
[ "$code" -le 3 ] || code=3   # could not run (127), interrupted (130): could not check, never OK
exit $code
"""


def batch_script(nodes: int, gpus_per_node: int, time_limit: str, partition: Optional[str], account: Optional[str],
                 reports_dir: str, preflight_args: Sequence[str]) -> str:
    """The script, or bad input naming the option and the value Slurm would misread."""
    if not TIME_RE.match(time_limit):
        raise InputError("not a Slurm time limit (minutes, HH:MM:SS, D-HH:MM:SS or UNLIMITED)", "--time",
                         value=time_limit)
    for flag, value in (("--partition", partition), ("--account", account)):
        if value is not None and not NAME_RE.match(value):
            raise InputError("not a Slurm name (letters, digits, _ . + -; partitions comma-separated)", flag,
                             value=value)
    if not PATH_RE.match(reports_dir) or "%" in reports_dir:
        raise InputError("a path Slurm's #SBATCH --output cannot take as it is (no spaces, quotes, % or newlines)",
                         "--reports-dir", value=reports_dir)
    extra = "".join(f"#SBATCH --{key}={value}\n" for key, value in (("partition", partition), ("account", account))
                    if value)
    return SCRIPT.format(nodes=nodes, gpus=f"#SBATCH --gpus-per-node={gpus_per_node}\n" if gpus_per_node else "",
                         time=time_limit, reports=shlex.quote(reports_dir), extra=extra.rstrip("\n"),
                         python=shlex.quote(sys.executable),
                         args="".join(" " + shlex.quote(a) for a in preflight_args))
