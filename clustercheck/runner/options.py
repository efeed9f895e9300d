"""Options as dataclass fields that are also command-line flags, and the options every cluster command shares.

A field made with `opt(...)` carries its flag and click settings. `click_options(Cls)` adds
those flags to a command, `from_params(Cls, params)` builds the dataclass from what click
parsed, and `to_args(obj)` turns an instance back into the flags that differ from the
defaults: the "reproduce with" commands of a report come from the options a stage really
ran with, so they cannot drift from the command line.
"""

from __future__ import annotations

import math
import os
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Callable, Dict, List, Optional, Tuple, Type, TypeVar

import click

from clustercheck.core.errors import InputError
from clustercheck.core.inventory import Defaults, Node, local_inventory, read_inventory, slurm_inventory
from clustercheck.display.report_files import check_writable
from clustercheck.metrics.export import check_pushgateway
from clustercheck.ranks.runs import DEFAULT_RDZV_PORT
from clustercheck.transport.fanout import DEFAULT_FANOUT, FanoutOptions
from clustercheck.transport.srun import allocation
from clustercheck.transport.sshconfig import DEFAULT_CONNECT_TIMEOUT_S, SSHSettings

T = TypeVar("T")


LARGEST = 1e9   # no count of seconds, GiB or GB/s a user means is larger; beyond it waits overflow


class FiniteRange(click.FloatRange):
    """A number in range, finite and at most LARGEST: nan passes every comparison and inf or 1e300 overflow
    a wait later, so all are bad input, named with the flag."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        if abs(number) > LARGEST:
            self.fail(f"{value!r} is too large (at most {LARGEST:g})", param, ctx)
        return number


def opt(*decls: str, default: Any = None, show: Optional[Callable[[Any], str]] = None, **click_settings) -> Any:
    """A dataclass field that is also a flag. show: how a value reads back as the flag's argument
    (also how the default is written on the command line, where it is not a plain value)."""
    return field(default=default, metadata={"decls": decls, "click": click_settings, "show": show})


def node_path(flag: str, value: Optional[str]) -> None:
    """A path the user names on the nodes (the same on every node) must be absolute and one line: bad input."""
    if value is not None and (not value.strip() or not os.path.isabs(value) or "\0" in value or "\n" in value):
        raise InputError(f"{flag} must be an absolute path on the nodes (the same on every node)", "command line",
                         value=value)


def argument(default: Any = None) -> Any:
    """A dataclass field that is the command's optional positional argument."""
    return field(default=default, metadata={"argument": True})


def _flagged(cls) -> List:
    return [f for f in fields(cls) if f.metadata.get("decls") or f.metadata.get("argument")]


def _default(f) -> Any:
    return f.default if f.default is not MISSING else f.default_factory()


def borrow(cls: Type, name: str, *decls: str, **changes) -> Any:
    """Field `name` of cls again, under other flags where given (preflight's --smoke-mode is smoke's
    --mode): the same type, default and help, declared once. changes: a new default or click settings."""
    f = {f.name: f for f in fields(cls)}[name]
    settings = dict(f.metadata["click"])
    default = changes.pop("default", _default(f))
    settings.update(changes)
    return field(default=default, metadata={**f.metadata, "decls": decls or f.metadata["decls"], "click": settings,
                                            "borrowed": (cls, name)})


# ---- flags several commands share, declared here once ------------------------------------------
def rdzv_port_option() -> Any:
    return opt("--rdzv-port", default=DEFAULT_RDZV_PORT, type=click.IntRange(1, 65535),
               help="torchrun's c10d rendezvous port: net tests it on every node, bench and smoke use it.")


def deadline_option(default: float, what: str, minimum: float = 1.0) -> Any:
    """--timeout: every command's own deadline, in seconds."""
    return opt("--timeout", default=default, type=FiniteRange(minimum), help=f"Deadline in seconds {what}.")


def stall_window_option(default: float, what: str, deadline_flags: str) -> Any:
    """--stall-window: how long without progress is a hang; None until resolved by resolve_stall_window."""
    return opt("--stall-window", type=FiniteRange(5),
               help=f"{what} Default: {default:g} s, or three quarters of {deadline_flags} where that is shorter; "
                    f"given, it must be below {deadline_flags}.")


def resolve_stall_window(given: Optional[float], default: float, deadlines: Dict[str, float]) -> float:
    """The stall window to use: the default fitted under the shortest deadline, or the given one, which must be
    below every deadline (a window at or past the deadline could never see the stall: the run ends first)."""
    flag, shortest = min(deadlines.items(), key=lambda item: item[1])
    if given is None:
        return min(default, 0.75 * shortest)
    if given >= shortest:
        raise InputError(f"--stall-window must be below {flag} ({shortest:g} s): a stall could never be seen before "
                         f"{flag} ends it", "command line", value=f"{given:g}")
    return given


def click_options(cls: Type, exclude: Tuple[str, ...] = ()) -> Callable:
    """A decorator adding one click option (or the argument) per flagged field of cls, in field order."""
    def decorate(func):
        for f in reversed([f for f in _flagged(cls) if f.name not in exclude]):
            if f.metadata.get("argument"):
                func = click.argument(f.name, required=False, metavar=f"[{f.name.upper()}]")(func)
                continue
            settings = dict(f.metadata["click"])
            default = _default(f)
            settings.setdefault("show_default", default not in (None, False, ()))
            if f.metadata["show"] and default is not None:
                default = f.metadata["show"](default)   # what the user would type: 16M, all_reduce
            func = click.option(*f.metadata["decls"], f.name, default=default, **settings)(func)
        return func
    return decorate


def from_params(cls: Type[T], params: Dict[str, Any], **overrides) -> T:
    """cls built from the parsed params its flagged fields name (other fields keep their defaults)."""
    values = {f.name: params[f.name] for f in _flagged(cls) if f.name in params}
    values.update(overrides)
    return cls(**values)


def _show(f, value: Any) -> str:
    if f.metadata.get("show"):
        return f.metadata["show"](value)
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def to_args(obj: Any) -> List[str]:
    """The flags (unquoted argv words) that give obj's values where they differ from the defaults."""
    args: List[str] = []
    for f, words in _given(obj):
        if f.metadata.get("argument"):
            args.insert(0, words[0])
        else:
            args += words
    return args


def given_flags(obj: Any) -> Dict[str, str]:
    """field name -> how the user gave it ("--params 1B"), for the flags whose values differ from the defaults."""
    return {f.name: " ".join(words) for f, words in _given(obj, long=True) if not f.metadata.get("argument")}


def given_for(obj: Any, cls: Type) -> Dict[str, str]:
    """The flags given to obj (preflight's options) that are cls's fields borrowed (borrow): cls's field name ->
    how the user gave it ("--device-seconds 3" for DeviceOptions' seconds)."""
    return {f.metadata["borrowed"][1]: " ".join(words) for f, words in _given(obj, long=True)
            if f.metadata.get("borrowed", (None,))[0] is cls}


def _given(obj: Any, long: bool = False) -> List[Tuple[Any, List[str]]]:
    """(field, its argv words) for every flagged field of obj whose value differs from the default; long: the flag's
    long name (--collectives, not -c)."""
    found: List[Tuple[Any, List[str]]] = []
    if obj is None:
        return found
    for f in _flagged(type(obj)):
        value = getattr(obj, f.name)
        if value == _default(f) or value is None:
            continue
        if f.metadata.get("argument"):
            found.append((f, [str(value)]))
            continue
        decls = f.metadata["decls"]
        decl = next((d for d in decls if d.startswith("--")), decls[0]) if long else decls[0]
        if "/" in decl:                                   # --pairwise/--no-pairwise
            on, off = decl.split("/")
            found.append((f, [on if value else off]))
        elif f.metadata["click"].get("is_flag"):
            found.append((f, [decl]))
        elif f.metadata["click"].get("multiple"):
            found.append((f, [word for item in value for word in (decl, str(item))]))
        else:
            found.append((f, [decl, _show(f, value)]))
    return found


# ---- the nodes and how to reach them: every cluster command -----------------------------
@dataclass
class ClusterOptions:
    nodes_file: Optional[str] = argument()
    slurm: bool = opt("--slurm", is_flag=True, default=False,
                      help="Take the nodes of the current Slurm allocation (SLURM_JOB_NODELIST); without a nodes "
                           "file inside an allocation (SLURM_JOB_ID set) this is the default.")
    via: str = opt("--via", default="auto", type=click.Choice(["auto", "ssh", "srun"]),
                   help="How commands reach the nodes: srun (job steps in the current allocation, no SSH), ssh, or "
                        "auto: srun for the allocation's own nodes, else ssh.")
    user: Optional[str] = opt("--user", help="Default SSH user (a user@ in the file wins).")
    port: Optional[int] = opt("--port", type=click.IntRange(1, 65535),
                              help="Default SSH port (a :port in the file wins).")
    python_path: Optional[str] = opt("--python", help="Default interpreter on the nodes (python= in the file wins).")
    ssh_config: Optional[str] = opt("-F", "--ssh-config", type=click.Path(dir_okay=False),
                                    help="ssh_config file to use instead of ~/.ssh/config.")
    known_hosts: Tuple[str, ...] = opt("--known-hosts", default=(), multiple=True, type=click.Path(dir_okay=False),
                                       help="known_hosts file(s) instead of the config's UserKnownHostsFile.")
    accept_new_hostkeys: bool = opt("--accept-new-hostkeys", is_flag=True, default=False,
                                    help="Record unknown host keys (like OpenSSH accept-new); changed keys are "
                                         "still refused.")
    fanout: int = opt("--fanout", default=DEFAULT_FANOUT, type=click.IntRange(1, 4096), help="Nodes contacted at once.")
    exec_per_command: bool = opt("--exec-per-command", is_flag=True, default=False,
                                 help="Run each command with its own login on the node instead of one session "
                                      "per node (slower; for a node whose shell breaks the session).")
    connect_timeout_s: Optional[float] = opt(
        "--connect-timeout", type=FiniteRange(0.1, 600),
        help=f"Seconds to reach and log in to a node [default: ConnectTimeout from ssh_config, else "
             f"{DEFAULT_CONNECT_TIMEOUT_S:g}]; given here, it wins over ssh_config.")

    def nodes(self) -> List[Node]:
        defaults = Defaults(user=self.user, port=self.port, python=self.python_path)
        if self.nodes_file and self.slurm:
            raise InputError("give a nodes file or --slurm, not both", "command line")
        if self.nodes_file:
            return read_inventory(self.nodes_file, defaults)
        if self.slurm or allocation():
            if not self.slurm:   # chosen for the user: say so, once, where it cannot spoil --json
                click.echo(f"clustercheck: inside Slurm job {allocation()}: its nodes, reached through srun "
                           f"(give a nodes file, or --via ssh, to choose otherwise)", err=True)
            return slurm_inventory(defaults=defaults)
        return local_inventory(defaults)

    @property
    def srun_job(self) -> Optional[str]:
        """The allocation whose job steps reach the nodes, or None (SSH)."""
        if self.via == "srun" and not allocation():
            raise InputError("not inside a Slurm allocation (SLURM_JOB_ID is not set): run it under salloc or "
                             "sbatch", "--via", value="srun")
        if self.via == "srun" or (self.via == "auto" and allocation() and not self.nodes_file):
            return allocation()
        return None

    @property
    def report_name(self) -> str:
        """What a report of these nodes is called: the nodes file's name, slurm, or local."""
        if self.nodes_file:
            return os.path.splitext(os.path.basename(self.nodes_file))[0]
        return "slurm" if self.slurm or allocation() else "local"

    def fanout_options(self) -> FanoutOptions:
        return FanoutOptions(fanout=self.fanout, session=not self.exec_per_command, srun_job=self.srun_job,
                             ssh=SSHSettings(
            config_path=self.ssh_config, user_known_hosts=list(self.known_hosts),
            accept_new_hostkeys=self.accept_new_hostkeys, connect_timeout_s=self.connect_timeout_s))


cluster_options = click_options(ClusterOptions)


# ---- what a command shows -----------------------------------------------------------------
@dataclass
class OutputOptions:
    as_json: bool = opt("--json", is_flag=True, default=False, help="Print one JSON document instead of the screen.")
    report: bool = opt("--report", is_flag=True, default=False,
                       help="Also write a Markdown report into --reports-dir.")
    reports_dir: str = opt("--reports-dir", default="reports", type=click.Path(file_okay=False),
                           help="Where reports go.")
    verbose: bool = opt("-v", "--verbose", is_flag=True, default=False, help="List the checks that passed too.")
    pushgateway: Optional[str] = opt("--pushgateway", metavar="URL",
                                     help="Also push the results (every check's status per node, the figures, the "
                                          "verdict) to this Prometheus Pushgateway, grouped by job clustercheck and "
                                          "the cluster's name; a gateway that is down is a WARN, never a lost "
                                          "report.")

    def validate(self, writes_report: bool = False) -> None:
        """A report that will be written can be, and a Pushgateway URL is one: found before any node is
        contacted."""
        if self.report or writes_report:
            check_writable(self.reports_dir)
        if self.pushgateway is not None:
            check_pushgateway(self.pushgateway)


output_options = click_options(OutputOptions)
