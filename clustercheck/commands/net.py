import json
import sys

import click

from clustercheck.net import check_net
from clustercheck.net.gather import DEFAULT_MASTER_PORT, NetOptions
from clustercheck.net.render import render_markdown, render_terminal, to_json
from clustercheck.options import cluster_options, fanout_options, load_nodes
from clustercheck.report import write_report


@click.command()
@cluster_options
@click.option("--master-port", type=click.IntRange(1, 65535), default=DEFAULT_MASTER_PORT, show_default=True,
              help="The rendezvous port (MASTER_PORT) tested on the first node.")
@click.option("--samples", type=click.IntRange(0, 16), default=2, show_default=True,
              help="Ports sampled from each node's ephemeral range (where NCCL and Gloo listen).")
@click.option("--attempt-timeout", type=click.FloatRange(0.1, 60), default=3.0, show_default=True,
              help="Seconds before an unanswered connection counts as filtered.")
@click.option("--links", is_flag=True, help="Also measure round trip and throughput of every pair (in rounds).")
@click.option("--stream-s", type=click.FloatRange(0.05, 30), default=0.5, show_default=True,
              help="Seconds of the throughput stream per pair (with --links).")
@click.option("--node-ssh", is_flag=True,
              help="Also check that the first node logs in to the others with SSH (what pdsh needs).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of the screen.")
@click.option("--report", is_flag=True, help="Also write a Markdown report into --reports-dir.")
@click.option("--reports-dir", default="reports", show_default=True, type=click.Path(file_okay=False))
@click.option("-v", "--verbose", is_flag=True, help="List the checks that passed too.")
def net(master_port, samples, attempt_timeout, links, stream_s, node_ssh, as_json, report, reports_dir, verbose,
        **opts):
    """Check that every node reaches every other on the ports training uses.

    Every node listens on the rendezvous port (the first node) and on ports sampled
    from its ephemeral range; every other node connects to them, all at once. Also
    names, interfaces (what to set NCCL_SOCKET_IFNAME to) and MTU.

    \b
    Example:
      clustercheck net nodes.txt
      clustercheck net nodes.txt --master-port 29400 --links --node-ssh --report

    Exit code: 0 ready, 1 warnings, 2 not ready, 64 bad input.
    """
    nodes = load_nodes(**opts)
    options = NetOptions(master_port=master_port, samples=samples, attempt_timeout_s=attempt_timeout, links=links,
                         stream_s=stream_s, node_ssh=node_ssh)
    result = check_net(nodes, fanout_options(**opts), options)
    if as_json:
        click.echo(json.dumps(to_json(result.facts, result.findings), indent=1, default=str))
    else:
        click.echo(render_terminal(result.facts, result.findings, verbose))
    if report:
        path = write_report("net", render_markdown(result.facts, result.findings,
                                                   "clustercheck " + " ".join(sys.argv[1:])), reports_dir)
        click.echo(f"report: {path}", err=as_json)
    sys.exit(result.exit_code)
