"""The clustercheck command: a group that only registers commands and maps errors to exit codes."""

from __future__ import annotations

import faulthandler
import importlib
import os
import signal
import sys

import click

from clustercheck import __version__
from clustercheck.core import threads
from clustercheck.core.errors import (EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_UNKNOWN, InputError, NotChecked,
                                      caused_by_interrupt)
from clustercheck.runner import interrupt
from clustercheck.runner.crash import report_crash, write_stacks


# Each command's module, loaded when that command runs: `clustercheck bench` loads bench's stages, not explain's
# vocabulary or the sandbox's (the whole set costs about 0.7 s of imports, a third of it the command's own).
COMMANDS = {
    "preflight": "clustercheck.commands.preflight:preflight", "bench": "clustercheck.commands.bench:bench",
    "env": "clustercheck.commands.env:env", "device": "clustercheck.commands.device:device",
    "storage": "clustercheck.commands.storage:storage", "net": "clustercheck.commands.net:net",
    "node-check": "clustercheck.commands.nodecheck:node_check", "launch": "clustercheck.commands.launch:launch",
    "plan": "clustercheck.commands.plan:plan", "run": "clustercheck.commands.run:run",
    "sandbox": "clustercheck.commands.sandbox:sandbox", "sbatch": "clustercheck.commands.sbatch:sbatch",
    "diff": "clustercheck.commands.diff:diff", "explain": "clustercheck.commands.explain:explain",
    "smoke": "clustercheck.commands.smoke:smoke", "stacks": "clustercheck.commands.stacks:stacks",
}


class Commands(click.Group):
    """The group whose commands load on first use (click's documented lazy group)."""

    def list_commands(self, ctx: click.Context):
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str):
        if name not in COMMANDS:
            return None
        if name not in self.commands:
            module, attribute = COMMANDS[name].split(":")
            self.commands[name] = getattr(importlib.import_module(module), attribute)
        return self.commands[name]


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="clustercheck")
def cli():
    """Is this cluster ready to train? Which node, link or setting to fix if not.

    NODES_FILE lists one node per line ([user@]host[:port] slots=N python=PATH
    ifname=IF); a DeepSpeed hostfile works as is, Slurm ranges (gpu[01-08])
    expand. Without a file, the local machine is a one-node cluster.
    """


STOP_THREADS_S = 2.0     # how long the interrupted tool waits for its threads to stop


def _exit_interrupted() -> None:
    """Exit 130 once the remote commands are stopped: every thread the tool started is stopped and joined first
    (core/threads.py), so the interpreter exits as it normally does; a thread still in a blocking call at the
    deadline would make its shutdown abort (SIGABRT, "FATAL: exception not rethrown", read as a crash): then,
    and only then, the process ends at once, saying which threads."""
    left = threads.stop_all(STOP_THREADS_S)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if left:
        try:
            path = write_stacks(left)
            sys.stderr.write(f"Interrupted: {len(left)} thread(s) still in a blocking call after {STOP_THREADS_S:g} s "
                             f"({', '.join(sorted(set(left))[:4])}): exiting at once; where they were is in "
                             f"{path or '(no file could be written)'}.\n")
            sys.stderr.flush()
        finally:
            os._exit(EXIT_INTERRUPTED)
    sys.exit(EXIT_INTERRUPTED)


def main(argv=None) -> None:
    interrupt.install()
    faulthandler.register(signal.SIGUSR1, all_threads=True)   # kill -USR1 <pid>: where every thread is
    try:
        cli.main(args=argv, prog_name="clustercheck", standalone_mode=False)
    except InputError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("Interrupted: remote commands were stopped.", err=True)
        _exit_interrupted()
    except click.ClickException as exc:
        exc.show()
        sys.exit(EXIT_BAD_INPUT)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except NotChecked as exc:
        click.echo(f"UNKNOWN: {exc}", err=True)
        sys.exit(EXIT_UNKNOWN)
    except Exception as exc:   # a failure of clustercheck itself: exit 3, one line, the traceback in a file
        if caused_by_interrupt(exc):     # a Ctrl-C that Python re-raised as another error (a module loading)
            click.echo("Interrupted: remote commands were stopped.", err=True)
            _exit_interrupted()
        sys.exit(report_crash(exc))
