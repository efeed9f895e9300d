"""The options of the check inside the job, and the wrapper's command line:

    torchrun ... -m clustercheck.injob [--budget S] [--on-fail stop|warn] [--reports-dir DIR]
                                       [--pushgateway URL] [--checkpoint-dir DIR] [--quiet]
                                       [--watch [--watch-every N] [--watch-slower X] [--watch-windows K]
                                                [--watch-on-slow stop|warn]] [--stall-dump S] -- train.py ARGS...

Everything after `--` (or from the first word that is not an option) is the user's script and its
arguments, passed through untouched; a launcher's --local_rank before them is the script's, and passed on. Bad input raises InputError naming the option and value. Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from clustercheck.core.errors import InputError

SOURCE = "command line"
POLICIES = ("stop", "warn")
DEFAULT_BUDGET_S = 60.0
DEFAULT_STALL_DUMP_S = 600.0   # past NCCL's and Gloo's usual step times by far, well before their 10-30 min timeouts


@dataclass
class InjobOptions:
    budget_s: float = DEFAULT_BUDGET_S      # the whole check, every rank ends within it
    on_fail: str = "stop"                   # stop: every rank exits 2 before the first step; warn: train on
    reports_dir: str = "reports"            # rank 0 writes the Markdown and JSON report there
    report_name: str = "injob"
    pushgateway: Optional[str] = None
    quiet: bool = False                     # no findings on rank 0's stderr (the one line still)
    checkpoint_dir: Optional[str] = None    # measured by the storage probe when given
    watch: bool = False                     # after the check, time the steps and name a slow rank (stepwatch.py)
    watch_every: int = 20                   # steps in a window: each rank posts its numbers once a window
    watch_slower: float = 1.3               # a rank that makes the steps this much slower is named
    watch_windows: int = 2                  # ... over this many windows in a row
    watch_on_slow: str = "warn"             # stop: every rank exits 2 at the next window; warn: say it, train on
    stall_dump_s: float = DEFAULT_STALL_DUMP_S   # no step this long: each rank writes its Flight Recorder record (0: never)

    def __post_init__(self):
        validate(self)


def validate(options: InjobOptions) -> None:
    budget = options.budget_s
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not math.isfinite(budget) or budget <= 0:
        raise InputError("--budget must be a number of seconds above 0", SOURCE, value=str(budget))
    if options.on_fail not in POLICIES:
        raise InputError(f"--on-fail takes {' or '.join(POLICIES)}", SOURCE, value=str(options.on_fail))
    for name, value, least in (("--watch-every", options.watch_every, 1), ("--watch-windows", options.watch_windows, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise InputError(f"{name} must be a whole number of at least {least}", SOURCE, value=str(value))
    slower = options.watch_slower
    if isinstance(slower, bool) or not isinstance(slower, (int, float)) or not math.isfinite(slower) or slower <= 1:
        raise InputError("--watch-slower must be a factor above 1 (1.3: 30% slower)", SOURCE, value=str(slower))
    stall = options.stall_dump_s
    if isinstance(stall, bool) or not isinstance(stall, (int, float)) or not math.isfinite(stall) or stall < 0:
        raise InputError("--stall-dump must be a number of seconds (0: never dump)", SOURCE, value=str(stall))
    if options.watch_on_slow not in POLICIES:
        raise InputError(f"--watch-on-slow takes {' or '.join(POLICIES)}", SOURCE, value=str(options.watch_on_slow))
    if options.pushgateway is not None:
        from clustercheck.metrics.export import check_pushgateway   # prometheus_client loads only when asked
        check_pushgateway(options.pushgateway)


VALUED = {"--budget": "budget_s", "--on-fail": "on_fail", "--reports-dir": "reports_dir",
          "--report-name": "report_name", "--pushgateway": "pushgateway", "--checkpoint-dir": "checkpoint_dir",
          "--watch-every": "watch_every", "--watch-slower": "watch_slower", "--watch-windows": "watch_windows",
          "--watch-on-slow": "watch_on_slow", "--stall-dump": "stall_dump_s"}
FLAGS = {"--quiet": "quiet", "--watch": "watch"}
# What a launcher puts before the module's own arguments, meant for the training script: DeepSpeed's launcher
# (--local_rank=N unless --no_local_rank) and torch.distributed.launch (--local-rank=N). Passed on to it, first.
FOR_THE_SCRIPT = ("--local_rank", "--local-rank")
USAGE = ("usage: torchrun ... -m clustercheck.injob [--budget SECONDS] [--on-fail stop|warn] [--reports-dir DIR] "
         "[--report-name NAME] [--pushgateway URL] [--checkpoint-dir DIR] [--quiet] [--watch] [--watch-every STEPS] "
         "[--watch-slower FACTOR] [--watch-windows K] [--watch-on-slow stop|warn] [--stall-dump SECONDS] "
         "-- SCRIPT [ARGS...]")


def _budget(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise InputError("--budget must be a number of seconds above 0", SOURCE, value=text)
    return value


def _number(kind):
    """The option's text as a number; text that is none is kept, for validate() to name with its option."""
    def convert(text: str):
        try:
            return kind(text)
        except ValueError:
            return text
    return convert


CONVERT = {"--budget": _budget, "--watch-every": _number(int), "--watch-windows": _number(int),
           "--watch-slower": _number(float), "--stall-dump": _number(float)}


def parse_wrapper(argv: Sequence[str]) -> Tuple[InjobOptions, str, List[str]]:
    """(options, script, the script's arguments) from the wrapper's argv (sys.argv[1:])."""
    values = {}
    passed_on: List[str] = []
    index = 0
    args = list(argv)
    while index < len(args):
        word = args[index]
        if word == "--":
            index += 1
            break
        name, sep, inline = word.partition("=")
        if name in FOR_THE_SCRIPT:
            passed_on += args[index:index + (1 if sep else 2)]
            index += 0 if sep else 1
        elif name in FLAGS and not sep:
            values[FLAGS[name]] = True
        elif name in VALUED:
            if not sep:
                if index + 1 >= len(args):
                    raise InputError(f"{name} needs a value", SOURCE)
                index += 1
                inline = args[index]
            values[VALUED[name]] = CONVERT.get(name, str)(inline)
        elif word.startswith("-"):
            raise InputError(f"unknown option {name} ({USAGE})", SOURCE, value=word)
        else:
            break
        index += 1
    if index >= len(args):
        raise InputError(f"no training script given ({USAGE})", SOURCE)
    return InjobOptions(**values), args[index], passed_on + args[index + 1:]
