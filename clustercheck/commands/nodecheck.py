"""The `clustercheck node-check` command (its --help is the reference: docs/reference.md)."""

import sys
import time

import click

from clustercheck.core.thresholds import load_config
from clustercheck.display.findings import findings_lines
from clustercheck.runner.options import FiniteRange
from clustercheck.metrics.export import check_textfile_dir
from clustercheck.tools.node_health import check_this_node, npd_code, reason, verdict, write_node_metrics


@click.command("node-check")
@click.option("--workdir", help="Directory jobs run in: checked to exist, free disk measured.")
@click.option("--timeout", "timeout_s", type=FiniteRange(1), default=20.0, show_default=True,
              help="Deadline in seconds for the probe.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="Thresholds file (TOML); default ./clustercheck.toml when present.")
@click.option("--gpus", "expected_gpus", type=click.IntRange(0, 1024),
              help="GPUs this node must have (default: the NVIDIA GPUs on its PCI bus).")
@click.option("--load", "load_s", type=FiniteRange(0, 300), default=0.0, show_default=True,
              help="Also load every GPU for this many seconds (matmul, copies): PCIe links under load, each GPU "
                   "against the others and its model's figure, the same bits. For a prolog or an idle node: it "
                   "competes with a running job.")
@click.option("--reason", "reason_only", is_flag=True, default=False,
              help="Print only the reason (empty when healthy), for scontrol update ... reason=.")
@click.option("--textfile", "textfile_dir", metavar="DIR",
              help="Also write the result for node_exporter's textfile collector: DIR/clustercheck.prom, atomically "
                   "(node_exporter --collector.textfile.directory=DIR serves it with the node's other metrics).")
@click.option("--npd", is_flag=True, default=False,
              help="Exit as Kubernetes' Node Problem Detector custom plugins do: 0 OK (a WARNING too: usable), "
                   "1 a problem (CRITICAL), 2 unknown.")
@click.option("-v", "--verbose", is_flag=True, default=False, help="Also list every check.")
def node_check(workdir, timeout_s, config_path, expected_gpus, load_s, reason_only, textfile_dir, npd, verbose):
    """This node's health in a few seconds, as a Nagios check (for Slurm's HealthCheckProgram or a prolog).

    GPU health (Xid, ECC, retired rows, temperature, GPUs lost), GPU topology and NVLink,
    InfiniBand ports and counters, /dev/shm, memlock and the working directory's disk. Prints one
    line: CLUSTERCHECK OK|WARNING|CRITICAL|UNKNOWN - reason. Exit code 0 OK, 1 WARNING, 2 CRITICAL,
    3 UNKNOWN, 64 bad input.

    \b
    Example (drain the node when it is CRITICAL, exit 2):
      reason=$(clustercheck node-check --reason)
      [ $? -eq 2 ] && scontrol update nodename=$(hostname -s) state=drain reason="$reason"
    """
    if textfile_dir:
        check_textfile_dir(textfile_dir)        # bad input before anything runs
    started = time.time()
    findings = check_this_node(load_config(config_path), workdir, timeout_s, expected_gpus, load_s=load_s)
    code, line = verdict(findings)
    if textfile_dir:
        write_node_metrics(textfile_dir, findings, started)
    click.echo(reason(findings) if reason_only else line)
    if verbose and not reason_only:
        click.echo("\n".join(findings_lines(findings, True)))
    sys.exit(npd_code(findings) if npd else code)
