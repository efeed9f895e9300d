"""Fan-out speed: `clustercheck run -- true` against OpenSSH over the same sandbox nodes.

    sudo python benchmarks/fanout.py            # builds a 64-node sandbox "bfan", removes it after
    sudo python benchmarks/fanout.py --keep     # leaves it up for another run

For 1, 8, 32 and 64 nodes, in the same run: the wall time of `clustercheck run` (a fresh
process, as a user runs it) and of `xargs -P 64 ssh -F <sandbox config> HOST true`, both
verifying host keys against the same known_hosts; and the CPU seconds each client spent
per node (sshd's side is not counted for either). Then the latency of one command on an
already open connection. Medians of --repeat runs. Targets (issue 2): 64 nodes in at most
0.8x the OpenSSH wall time, client CPU per node at or below OpenSSH's, and a command on
an open connection in at most 10 ms (median).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from clustercheck.core.inventory import read_inventory  # noqa: E402
from clustercheck.sandbox import Sandbox, down  # noqa: E402
from clustercheck.transport.fanout import Cluster, FanoutOptions  # noqa: E402
from clustercheck.transport.sshconfig import SSHSettings  # noqa: E402

SIZES = (1, 8, 32, 64)


def timed(argv, **kwargs):
    """(wall seconds, CPU seconds of the process and everything it waited for)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kwargs)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])}... failed: {proc.stderr.read().decode()[-500:]}")
    return wall, usage.ru_utime + usage.ru_stime


def raw_exec_ms(transport) -> float:
    """The floor: a bare paramiko exec of `true` on the same connection, no guard, no tool code.

    It measures what the node's sshd and the user's login shell (its rc files) cost per command.
    """
    start = time.perf_counter()
    chan = transport._client.get_transport().open_session()
    chan.exec_command("true")
    chan.recv_exit_status()
    chan.close()
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="leave the sandbox up afterwards")
    parser.add_argument("--name", default="bfan")
    args = parser.parse_args()

    box = Sandbox.up(max(SIZES), args.name)
    work = tempfile.mkdtemp(prefix="clustercheck-bench.")
    rows = []
    try:
        for n in SIZES:
            names = [node.name for node in box.nodes[:n]]
            nodes_file = os.path.join(work, f"nodes{n}.txt")
            with open(nodes_file, "w") as handle:
                handle.write("\n".join(names) + "\n")
            tool, ossh = [], []
            for _ in range(args.repeat):
                tool.append(timed([sys.executable, "-m", "clustercheck", "run", nodes_file,
                                   "-F", box.ssh_config, "--", "true"]))
                with open(nodes_file) as stdin:
                    ossh.append(timed(["xargs", "-P", "64", "-I{}", "ssh", "-F", box.ssh_config, "{}", "true"],
                                      stdin=stdin))
            tool_wall = statistics.median(w for w, _ in tool)
            ossh_wall = statistics.median(w for w, _ in ossh)
            tool_cpu = statistics.median(c for _, c in tool) / n
            ossh_cpu = statistics.median(c for _, c in ossh) / n
            rows.append((n, tool_wall, ossh_wall, tool_wall / ossh_wall, tool_cpu * 1000, ossh_cpu * 1000))

        every = read_inventory(box.nodes_file)
        with Cluster(every, FanoutOptions(ssh=SSHSettings(config_path=box.ssh_config))) as cluster:
            start = time.perf_counter()
            cluster.connect()
            connected = time.perf_counter()
            cluster.run("true", 30)
            phases = (connected - start, time.perf_counter() - connected)

        nodes = every[:1]
        with Cluster(nodes, FanoutOptions(ssh=SSHSettings(config_path=box.ssh_config))) as cluster:
            cluster.connect()
            transport = cluster.transports[nodes[0].name]
            transport.run("true", 10)
            latencies, raw = [], []
            for _ in range(50):
                start = time.perf_counter()
                result = transport.run("true", 10)
                latencies.append((time.perf_counter() - start) * 1000)
                assert result.ok, result
                raw.append(raw_exec_ms(transport))
    finally:
        if not args.keep:
            down(args.name)

    print(f"fan-out of `run -- true` over sandbox nodes (median of {args.repeat}; "
          f"{os.cpu_count()} cores; client CPU only)")
    print(f"{'nodes':>5}  {'clustercheck s':>14}  {'OpenSSH s':>9}  {'ratio':>5}  "
          f"{'clustercheck CPU ms/node':>24}  {'OpenSSH CPU ms/node':>19}")
    for n, tw, ow, ratio, tc, oc in rows:
        print(f"{n:>5}  {tw:>14.3f}  {ow:>9.3f}  {ratio:>5.2f}  {tc:>24.1f}  {oc:>19.1f}")
    n, tw, ow, ratio, tc, oc = rows[-1]
    print(f"target 64 nodes <= 0.8x OpenSSH wall: {ratio:.2f}x -> {'met' if ratio <= 0.8 else 'MISSED'}")
    print(f"  where the time goes at {len(every)} nodes (in-process): connect + log in {phases[0]:.2f} s, "
          f"then `true` everywhere {phases[1]:.2f} s (the nodes' sshd and login shells, same work as OpenSSH's)")
    print(f"target CPU/node <= OpenSSH: {tc:.1f} vs {oc:.1f} ms -> {'met' if tc <= oc else 'MISSED'}")
    median, floor = statistics.median(latencies), statistics.median(raw)
    print(f"command on an open connection: median {median:.1f} ms, p90 "
          f"{sorted(latencies)[int(len(latencies) * 0.9)]:.1f} ms (50 runs) -> "
          f"{'met' if median <= 10 else 'MISSED'} (target <= 10 ms)")
    print(f"  floor, bare paramiko exec of `true` on the same connection: median {floor:.1f} ms "
          f"(sshd + the login shell's rc files); clustercheck's own share: {median - floor:.1f} ms")


if __name__ == "__main__":
    main()
