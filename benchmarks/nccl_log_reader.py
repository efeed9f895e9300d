"""Reading NCCL's own log for the path it took (issue 38): the node-side reader on what 8 ranks of a 1,000-rank
job write, and the capture's node-side step as a whole.

    python benchmarks/nccl_log_reader.py            # no sandbox, no root
    python benchmarks/nccl_log_reader.py --mb-per-rank 8
    sudo python benchmarks/nccl_log_reader.py --sandbox   # the capture's share of a bench on a 2-node sandbox
    python benchmarks/nccl_log_reader.py --ras-nodes 1000  # NCCL's RAS asked on 1,000 nodes: what it adds to the fan-out

The logs are built from a real 2-node IB log (tests/data/nccl-logs/ib-gdr-cumem-2node-h20-nccl-issue-1189.txt):
its lines repeated with the rank and channel numbers a 1,000-rank job prints until each of 8 files holds
--mb-per-rank MB (NCCL_DEBUG=INFO with INIT,NET,ENV,BOOTSTRAP). Targets: well under a second per node; the
references, measured in the same run: Python reading the same lines and doing nothing with them, and `wc -l`.
The capture's cost to bench (target: at most 5% of its wall) is its node-side step: measured here through the
local transport (a real shell, the reader shipped as on a node, the files removed), against bench's wall on the
sandbox (docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

from clustercheck.core.inventory import local_inventory  # noqa: E402
from clustercheck.onnode.nccl_log_reader import summarize_files  # noqa: E402
from clustercheck.ranks.nccl_capture import plan_capture, read_captured  # noqa: E402
from clustercheck.ranks.runs import NodeRun  # noqa: E402
from clustercheck.transport.fanout import Cluster, FanoutOptions  # noqa: E402

RECORDED = os.path.join(ROOT, "tests", "data", "nccl-logs", "ib-gdr-cumem-2node-h20-nccl-issue-1189.txt")


def write_logs(directory: str, ranks: int, size: int) -> int:
    lines = [line for line in open(RECORDED, errors="replace").read().splitlines() if "NCCL" in line]
    for local in range(ranks):
        rank = 992 + local
        with open(os.path.join(directory, f"nccl.node125.{4000 + local}.log"), "w") as handle:
            written, channel = 0, 0
            while written < size:
                for line in lines:
                    text = (line.replace("[0]", f"[{local}]").replace(" 0[", f" {rank}[")
                            .replace("Channel 00", f"Channel {channel % 32:02d}") + "\n")
                    handle.write(f"node125:{4000 + local}:{5000 + local} " + text.split(" ", 1)[-1]
                                 if text.count(":") > 2 else text)
                    written += len(text)
                channel += 1
    return sum(os.path.getsize(os.path.join(directory, n)) for n in os.listdir(directory))


def median_time(func, repeat: int) -> float:
    walls = []
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        walls.append(time.perf_counter() - start)
    return statistics.median(walls)


def sandbox_capture_cost(repeat: int) -> None:
    """bench on a 2-node sandbox (Gloo, 2 ranks a node) with and without the capture's plumbing: every rank writes
    a recorded NCCL log where NCCL_DEBUG_FILE says, each node reads and removes its files (the test switch
    CLUSTERCHECK_TEST_CAPTURE_NCCL, as the sandbox test uses it); alternating, medians."""
    from clustercheck.sandbox import Sandbox, down, faults
    box = Sandbox.up(2, "bnccl")
    try:
        recorded = os.path.join(box.dir, "recorded-nccl.log")
        shutil.copy(RECORDED, recorded)
        for node in box.nodes:
            faults.set_env(box, node.name, f"CLUSTERCHECK_TEST_NCCL_LOG={recorded}")
        argv = [sys.executable, "-m", "clustercheck", "bench", box.nodes_file, "-F", box.ssh_config, "--python",
                sys.executable, "--json", "-b", "1K", "-e", "64K", "-n", "2", "-w", "1", "--pairwise", "off",
                "--nproc-per-node", "2"]
        walls = {"without": [], "with": []}
        for _ in range(repeat):
            for mode in walls:
                env = dict(os.environ, **({"CLUSTERCHECK_TEST_CAPTURE_NCCL": "1"} if mode == "with" else {}))
                start = time.perf_counter()
                subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
                walls[mode].append(time.perf_counter() - start)
    finally:
        down("bnccl")
    without, with_capture = statistics.median(walls["without"]), statistics.median(walls["with"])
    print(f"bench on a 2-node sandbox, medians of {repeat} alternating runs: {with_capture:.2f} s with the capture, "
          f"{without:.2f} s without: {with_capture / without:.3f}x (target at most 1.05x)")


def ras_report(nodes: int, per_node: int) -> bytes:
    """A `SET FORMAT json` report of a nodes x per_node job, built from the one NCCL's RAS documentation records
    (tests/data/nccl-diag/nccl-docs-ras-json-2.29.1.json): its rank and missing-rank entries repeated per rank,
    one rank missing and two a collective behind, as a job stuck in an AllReduce shows."""
    doc = json.load(open(os.path.join(ROOT, "tests", "data", "nccl-diag", "nccl-docs-ras-json-2.29.1.json")))
    comm = doc["communicators"][0]
    rank, missing = comm["ranks"][0], comm["missing_ranks"][0]
    ranks = []
    for index in range(nodes * per_node):
        entry = json.loads(json.dumps(rank))
        entry.update(rank=index, host=f"10.1.{index // per_node // 250}.{index // per_node % 250}", pid=1000 + index,
                     cuda_dev=index % per_node, nvml_dev=index % per_node)
        entry["collective_counts"]["AllReduce"] = 6650 - (index in (17, 18))
        ranks.append(entry)
    comm.update(size=len(ranks), ranks=ranks[1:], ranks_count=len(ranks) - 1, missing_ranks=[missing],
                missing_ranks_count=1)
    return json.dumps(doc, indent=2).encode()


def ras_cost(nodes: int, repeat: int) -> None:
    """What asking RAS on every node adds to the fan-out: the on-node client (each node's runs in parallel, so one
    client's wall) against a replaying port with a report of the job's size, and the judge over every node's
    answer; the reference: a plain connect and read of the same bytes."""
    import socket
    from clustercheck.nccl.ras_judge import judge_ras
    from clustercheck.onnode.nccl_ras_client import ask
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from ras_replay import start_in_thread
    report = ras_report(nodes, 8)
    port = start_in_thread(report)
    raw = start_in_thread(report, mode="")

    def plain():
        with socket.create_connection(("127.0.0.1", raw)) as sock:
            sock.sendall(b"STATUS\n")
            while sock.recv(1 << 16):
                pass
    answer = ask(f"127.0.0.1:{port}", 30)
    assert answer["answered"], answer
    client_s = median_time(lambda: ask(f"127.0.0.1:{port}", 30), repeat)
    plain_s = median_time(plain, repeat)
    replies = {f"node{i:04d}": json.loads(json.dumps(answer)) for i in range(nodes)}
    judge_s = median_time(lambda: judge_ras(replies, hung=True), repeat)
    size = len(json.dumps(answer))
    print(f"NCCL RAS on {nodes:,} nodes x 8 ranks: a {len(report) / 1e6:.1f} MB report per node, {size:,} bytes back "
          f"from each; medians of {repeat}\n")
    print("| measure | seconds | ratio | target |")
    print("|---|---|---|---|")
    print(f"| one node's client (handshake, JSON, read into its shape) | {client_s:.3f} | {client_s / plain_s:.1f}x of "
          f"reading the bytes | |")
    print(f"| a plain connect and read of the same report | {plain_s:.3f} | 1.0x | |")
    print(f"| the judge over {nodes:,} nodes' answers | {judge_s:.3f} | | |")
    print(f"| added to the fan-out (client + judge) | {client_s + judge_s:.3f} | | under 2 s |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb-per-rank", type=int, default=4)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--sandbox", action="store_true", help="the capture's share of a bench on a 2-node sandbox")
    parser.add_argument("--ras-nodes", type=int, default=0, help="NCCL's RAS asked on this many nodes")
    args = parser.parse_args()
    if args.ras_nodes:
        return ras_cost(args.ras_nodes, args.repeat)
    if args.sandbox:
        return sandbox_capture_cost(args.repeat)
    work = tempfile.mkdtemp(prefix="clustercheck-bench-nccl_log_reader.")
    try:
        total = write_logs(work, args.ranks, args.mb_per_rank * 2 ** 20)
        files = [os.path.join(work, n) for n in sorted(os.listdir(work))]
        summary = summarize_files(files)

        def plain_read():
            for path in files:
                with open(path, errors="replace") as handle:
                    for _ in handle:
                        pass
        reader_s = median_time(lambda: summarize_files(files), args.repeat)
        plain_s = median_time(plain_read, args.repeat)
        wc_s = median_time(lambda: subprocess.run(["wc", "-l", *files], stdout=subprocess.DEVNULL), args.repeat)
        [node] = local_inventory()
        copies = tempfile.mkdtemp(prefix="clustercheck-bench-ncclpath-node.")

        def node_step():
            for path in files:
                shutil.copy(path, copies)
            with Cluster([node], FanoutOptions()) as cluster:
                read_captured(cluster, [node], {node.name: copies}, plan_capture({}), {node.name: NodeRun(node.name)},
                              {})
        copy_s = median_time(lambda: [shutil.copy(p, copies) for p in files] and
                             [os.remove(os.path.join(copies, os.path.basename(p))) for p in files], args.repeat)
        step_s = median_time(node_step, args.repeat)
        shutil.rmtree(copies, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ranks = len(summary["ranks"])
    print(f"NCCL path reader: {args.ranks} ranks' INFO logs of {args.mb_per_rank} MB each ({total / 1e6:,.1f} MB, "
          f"{ranks} rank summaries), medians of {args.repeat} runs, {os.cpu_count()} CPUs\n")
    print("| measure | seconds | ratio | target |")
    print("|---|---|---|---|")
    print(f"| the reader (onnode/nccl_log_reader.py) on every line | {reader_s:.3f} | {reader_s / plain_s:.1f}x of reading "
          f"the lines | well under 1 s |")
    print(f"| Python reading the same lines, nothing done | {plain_s:.3f} | 1.0x | |")
    print(f"| `wc -l` on the files | {wc_s:.3f} | {wc_s / plain_s:.2f}x | |")
    print(f"| the capture's node-side step (ship the reader, read, remove; local transport) | "
          f"{max(step_s - copy_s, 0):.3f} | | compare with bench's wall |")


if __name__ == "__main__":
    main()
