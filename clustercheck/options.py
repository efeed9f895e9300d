"""Options every cluster command shares, and turning them into an inventory and a Cluster."""

from __future__ import annotations

from typing import List, Optional

import click

from clustercheck.errors import InputError
from clustercheck.fanout import DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_FANOUT, FanoutOptions
from clustercheck.inventory import Defaults, Node, local_inventory, read_inventory, slurm_inventory
from clustercheck.transport.sshconfig import SSHSettings


def cluster_options(func):
    """NODES_FILE plus the inventory and SSH options, for every command that reaches nodes."""
    decorators = [
        click.argument("nodes_file", required=False, metavar="[NODES_FILE]"),
        click.option("--slurm", is_flag=True,
                     help="Take the nodes of the current Slurm allocation (SLURM_JOB_NODELIST)."),
        click.option("--user", help="Default SSH user (a user@ in the file wins)."),
        click.option("--port", type=click.IntRange(1, 65535), help="Default SSH port (a :port in the file wins)."),
        click.option("--python", "python_path", help="Default interpreter on the nodes (python= in the file wins)."),
        click.option("-F", "--ssh-config", type=click.Path(dir_okay=False),
                     help="ssh_config file to use instead of ~/.ssh/config."),
        click.option("--known-hosts", multiple=True, type=click.Path(dir_okay=False),
                     help="known_hosts file(s) instead of the config's UserKnownHostsFile."),
        click.option("--accept-new-hostkeys", is_flag=True,
                     help="Record unknown host keys (like OpenSSH accept-new); changed keys are still refused."),
        click.option("--fanout", type=click.IntRange(1, 4096), default=DEFAULT_FANOUT, show_default=True,
                     help="Nodes contacted at once."),
        click.option("--connect-timeout", type=click.FloatRange(0.1, 600), default=DEFAULT_CONNECT_TIMEOUT_S,
                     show_default=True, help="Seconds to reach and log in to a node."),
    ]
    for decorator in reversed(decorators):
        func = decorator(func)
    return func


def load_nodes(nodes_file: Optional[str], slurm: bool, user=None, port=None, python_path=None,
               **_ignored) -> List[Node]:
    defaults = Defaults(user=user, port=port, python=python_path)
    if nodes_file and slurm:
        raise InputError("give a nodes file or --slurm, not both", "command line")
    if slurm:
        return slurm_inventory(defaults=defaults)
    if nodes_file:
        return read_inventory(nodes_file, defaults)
    return local_inventory(defaults)


def fanout_options(ssh_config=None, known_hosts=(), accept_new_hostkeys=False, fanout=DEFAULT_FANOUT,
                   connect_timeout=DEFAULT_CONNECT_TIMEOUT_S, **_ignored) -> FanoutOptions:
    return FanoutOptions(fanout=fanout, ssh=SSHSettings(
        config_path=ssh_config, user_known_hosts=list(known_hosts),
        accept_new_hostkeys=accept_new_hostkeys, connect_timeout_s=connect_timeout))
