"""The `clustercheck sandbox` command (its --help is the reference: docs/reference.md)."""

import sys

import click
from tabulate import tabulate

from clustercheck.core.errors import EXIT_FAIL
from clustercheck.sandbox import Sandbox, SandboxError, down, faults, list_sandboxes
from clustercheck.sandbox.cluster import MAX_NODES
from clustercheck.sandbox.slurm import slurm_conf, up_with_slurm
from clustercheck.sandbox.storage import serve

name_option = click.option("--name", default="cc0", show_default=True,
                           help="Sandbox name: the prefix of its nodes, links and namespaces.")


def _fail(exc: SandboxError):
    click.echo(f"Error: {exc}", err=True)
    sys.exit(EXIT_FAIL)


@click.group()
def sandbox():
    """A cluster of network-namespace nodes with real sshd on this host (root).

    \b
    Example:
      sudo clustercheck sandbox up 4
      clustercheck run /run/clustercheck-sandbox/cc0/nodes.txt \\
          -F /run/clustercheck-sandbox/cc0/ssh_config -- hostname
      sudo clustercheck sandbox fault drop cc0-n2 29500
      sudo clustercheck sandbox down
    """


@sandbox.command()
@click.argument("num_nodes", type=click.IntRange(1, MAX_NODES))
@name_option
@click.option("--shared-hostkey", is_flag=True, default=False,
              help="One host key for all nodes (quicker to build; for size tests).")
@click.option("--slurm", is_flag=True, default=False,
              help="Also run Slurm: munge, a slurmctld and a slurmd in every node, one partition (slurm-wlm, munge).")
@click.option("--storage", is_flag=True, default=False,
              help="Also serve a network filesystem (sshfs over the nodes' own links) mounted on every node.")
@click.option("--gpus", type=click.IntRange(0, 64), default=0, show_default=True,
              help="With --slurm: GRES gpu count each node declares (stand-in device files).")
def up(num_nodes, name, shared_hostkey, slurm, storage, gpus):
    """Build NUM_NODES nodes (replacing a sandbox of the same name)."""
    try:
        box = (up_with_slurm(num_nodes, name, shared_hostkey, gpus) if slurm
               else Sandbox.up(num_nodes, name, shared_hostkey=shared_hostkey))
        shared = serve(box) if storage else ""
    except SandboxError as exc:
        _fail(exc)
    click.echo(f"sandbox {box.name}: {len(box.nodes)} nodes in {box.subnet}")
    click.echo(f"  nodes file:  {box.nodes_file}")
    click.echo(f"  ssh config:  {box.ssh_config}")
    click.echo(f"  known_hosts: {box.known_hosts}")
    if shared:
        click.echo(f"  shared filesystem on every node: {shared} (sshfs over each node's link)")
    click.echo(f"try: clustercheck run {box.nodes_file} -F {box.ssh_config} -- hostname")
    if slurm:
        click.echo(f"Slurm: export SLURM_CONF={slurm_conf(box)}; then salloc -N {num_nodes} clustercheck preflight")


@sandbox.command("down")
@name_option
def down_command(name):
    """Remove the sandbox and everything it made, even after a crash."""
    removed = down(name)
    click.echo(f"removed {len(removed)} items of sandbox {name}" if removed else f"nothing of sandbox {name} was left")


@sandbox.command()
@name_option
def status(name):
    """Nodes, addresses, sshd state and faults."""
    if name not in list_sandboxes():
        click.echo(f"no sandbox {name} (up: {', '.join(list_sandboxes()) or 'none'})")
        sys.exit(EXIT_FAIL)
    box = Sandbox.load(name)
    click.echo(f"sandbox {box.name}: {len(box.nodes)} nodes in {box.subnet}; files in {box.dir}")
    click.echo(tabulate(box.status(), headers="keys"))


@sandbox.command()
@click.argument("knob", type=click.Choice(faults.knob_names()))
@click.argument("node")
@click.argument("value", required=False)
@name_option
def fault(knob, node, value, name):
    """Make a fault on NODE: slow MBIT, drop PORT[:HIGH], reject PORT[:HIGH], mtu MTU,
    set-env VAR=VALUE, hide PROGRAM, read-only DIR, small-disk DIR:KIB (a tmpfs of that size over DIR),
    cpu-quota CPUS (its sessions get at most that many CPUs),
    nvidia-smi XML (a stand-in printing a recorded nvidia-smi -q -x),
    kernel-log FILE (the node's /dev/kmsg), loopback-hostname, stop-sshd, start-sshd, blackhole, crash,
    drain REASON and resume (Slurm's node state), or clear (undo all)."""
    func, value_name, kind = faults.KNOBS[knob]
    try:
        box = Sandbox.load(name)
        if value_name:
            if value is None:
                raise click.UsageError(f"{knob} needs {value_name}")
            try:
                func(box, node, kind(value))
            except ValueError:
                raise click.UsageError(f"{value_name} must be {faults.form_of(value_name)}: {value!r}") from None
        else:
            func(box, node)
    except SandboxError as exc:
        _fail(exc)
    click.echo(f"{node}: {', '.join(box.faults.get(box.node(node).name, [])) or 'no faults'}")
