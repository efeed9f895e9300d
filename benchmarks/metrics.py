"""Results where operators look (issue 39): what the metrics cost.

    python benchmarks/metrics.py             # needs prometheus-pushgateway (scripts/test.sh installs it)

1. node-check with and without --textfile (a fresh process each, as Slurm's HealthCheckProgram runs it), medians
   of --repeat runs: target, the textfile adds at most 5%.
2. A push from a 1,000-node preflight (simulated results: every stage's checks on every node, a tenth of the
   nodes with a finding, the device, storage and bench figures): the registry built, then one request to a real
   Pushgateway on loopback; its size and time. Target: one request of bounded size, at most 1 s.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

from prometheus_client import generate_latest  # noqa: E402

from clustercheck.core.result import Finding, Status  # noqa: E402
from clustercheck.metrics.build import finding_samples, registry_of, run_samples  # noqa: E402
from clustercheck.metrics.export import push  # noqa: E402
from tests.prometheus_servers import free_port, wait_ready  # noqa: E402

CHECKS = {"env": ["reach", "hostname.unique", "packages.same", "shm", "memlock", "nofile", "clock", "gpu.health",
                  "ib.ports", "topology"],
          "device": ["device.gemm.bfloat16", "device.h2d", "device.bits", "device.links", "device.dcgm"],
          "storage": ["storage.write", "storage.read", "storage.space"], "net": ["net.ports", "net.names"],
          "bench": ["bench.busbw", "bench.pairwise.node"], "smoke": ["smoke.train"]}


def simulated(num_nodes: int):
    nodes = [f"gpu{i:04d}" for i in range(num_nodes)]
    samples = []
    all_findings = []
    for stage, checks in CHECKS.items():
        findings = []
        for check in checks:
            bad = [n for i, n in enumerate(nodes) if i % 10 == hash(check) % 10]
            findings.append(Finding(check, Status.FAIL, check, [], "", bad))
            findings.append(Finding(check, Status.OK, check, [], "", [n for n in nodes if n not in bad]))
        samples += finding_samples(stage, findings)
        all_findings += findings
    for i, node in enumerate(nodes):
        for device in range(8):
            labels = {"node": node, "device": str(device), "dtype": "bfloat16"}
            samples += [("clustercheck_device_flops", labels, 7.8e14), ("clustercheck_device_flops_peers_median",
                                                                         labels, 7.8e14)]
        for phase in ("write", "read"):
            samples.append(("clustercheck_storage_bytes_per_second", {"node": node, "phase": phase}, 2e9))
    for size in range(3, 31):
        samples.append(("clustercheck_bench_busbw_bytes_per_second",
                        {"collective": "all_reduce", "size_bytes": str(2 ** size)}, 3.6e11))
    samples += run_samples(all_findings, 900.0, nodes, nodes[::10])
    return samples


def node_check_s(textfile: str, repeat: int):
    def once(args):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "clustercheck", "node-check", *args], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, cwd=ROOT)
        return time.perf_counter() - start
    plain, written = [], []
    for _ in range(repeat):
        plain.append(once([]))
        written.append(once(["--textfile", textfile]))
    return statistics.median(plain), statistics.median(written)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="clustercheck-bench-metrics.")
    gateway = None
    try:
        plain_s, textfile_s = node_check_s(work, args.repeat)
        start = time.perf_counter()
        registry = registry_of(simulated(args.nodes))
        build_s = time.perf_counter() - start
        size = len(generate_latest(registry))
        port = free_port()
        gateway = subprocess.Popen(["prometheus-pushgateway", f"--web.listen-address=127.0.0.1:{port}"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=work)
        wait_ready(f"http://127.0.0.1:{port}/-/ready")
        pushes = []
        for _ in range(3):
            start = time.perf_counter()
            finding = push(f"http://127.0.0.1:{port}", registry, "bench")
            pushes.append(time.perf_counter() - start)
            assert finding.status is Status.OK, finding.summary
        push_s = statistics.median(pushes)
    finally:
        if gateway:
            gateway.terminate()
            gateway.wait(10)
        shutil.rmtree(work, ignore_errors=True)
    print(f"metrics benchmark: node-check medians of {args.repeat} runs; a {args.nodes}-node push, "
          f"{os.cpu_count()} CPUs\n")
    print("| measure | value | ratio | target |")
    print("|---|---|---|---|")
    print(f"| node-check --textfile | {textfile_s:.3f} s | {textfile_s / plain_s:.3f}x of node-check | <= 1.05x |")
    print(f"| node-check (reference) | {plain_s:.3f} s | 1.000x | |")
    print(f"| building the registry of {args.nodes} nodes | {build_s:.3f} s | | |")
    print(f"| one push to a real Pushgateway ({size / 1e6:.1f} MB of exposition) | {push_s:.3f} s | | <= 1 s, one "
          f"request |")


if __name__ == "__main__":
    main()
