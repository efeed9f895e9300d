"""The launcher wrapper: check the job's nodes from its own ranks, then run the user's script in the same
process, its arguments untouched (runpy, as `python script.py ARGS` would):

    torchrun --nnodes 3 --nproc-per-node 8 ... -m clustercheck.injob --budget 60 -- train.py --lr 3e-4

Bad input (not under a launcher, --budget 0, an unknown option) is one line and exit 64 on every rank, before
any collective. The check's own process group, if it made one, is gone before the script starts.
"""

from __future__ import annotations

import os
import runpy
import shlex
import sys

from clustercheck.core.errors import InputError
from clustercheck.injob.run import apply_policy, bad_input, run_check, start_watch
from clustercheck.injob.launcher import read_job_env
from clustercheck.injob.options import USAGE, parse_wrapper


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["-h"], ["--help"]):
        print(f"{USAGE}\n\n{__doc__.strip()}\n\nThe guide: docs/guides/injob.md")
        return
    try:
        options, script, script_args = parse_wrapper(argv)
        job = read_job_env(os.environ)
        if not os.path.isfile(script):
            raise InputError("the training script does not exist", "command line", value=script)
    except InputError as error:
        bad_input(error)
    command = "python -m clustercheck.injob " + " ".join(shlex.quote(a) for a in argv)
    start_watch(apply_policy(run_check(job, options, command), options, job.rank), options, job)
    sys.argv = [script, *script_args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
