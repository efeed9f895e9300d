"""The options of `clustercheck net`: dataclass fields that are also its flags (runner/options.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List

import click

from clustercheck.runner.options import FiniteRange, opt, rdzv_port_option
from clustercheck.stages.net.facts import DEFAULT_MASTER_PORT
from clustercheck.stages.net.sampling import DEFAULT_PEERS


@dataclass
class NetOptions:
    master_port: int = opt("--master-port", default=DEFAULT_MASTER_PORT, type=click.IntRange(1, 65535),
                           help="MASTER_PORT, tested on every node (any may be MASTER_ADDR).")
    rdzv_port: int = rdzv_port_option()
    samples: int = opt("--samples", default=2, type=click.IntRange(0, 16),
                       help="Ports sampled from each node's ephemeral range (where NCCL and Gloo listen).")
    attempt_timeout_s: float = opt("--attempt-timeout", default=3.0, type=FiniteRange(0.1, 60),
                                   help="Seconds before an unanswered connection counts as filtered.")
    links: bool = opt("--links", is_flag=True, default=False,
                      help="Also measure round trip and throughput of every pair (in rounds).")
    stream_s: float = opt("--stream-s", default=0.5, type=FiniteRange(0.05, 30),
                          help="Seconds of the throughput stream per pair (with --links).")
    node_ssh: bool = opt("--node-ssh", is_flag=True, default=False,
                         help="Also check that the first node logs in to the others with SSH (what pdsh needs).")
    mesh: str = opt("--mesh", default="auto", type=click.Choice(["auto", "full", "sampled"]),
                    help="Which pairs connect: full (every ordered pair), sampled (each node to and from --mesh-peers "
                         "random peers, every node to the master), auto (full up to 128 nodes).")
    mesh_peers: int = opt("--mesh-peers", default=DEFAULT_PEERS, type=click.IntRange(2, 64),
                          help="Peers per node in a sampled mesh (each is tested inbound and outbound by this many).")
    start_timeout_s: float = 30.0    # for a listener to report ready, counted once all were started

    @property
    def launch_ports(self) -> List[int]:
        return sorted({self.master_port, self.rdzv_port}, key=[self.master_port, self.rdzv_port].index)
