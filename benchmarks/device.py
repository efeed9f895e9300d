"""`clustercheck device` speed: its matmul and copy figures against a bare torch loop, and its wall on 8 nodes
against 1.

    python benchmarks/device.py                 # the figures' part only, on this machine
    sudo python benchmarks/device.py --sandbox  # also the wall: builds an 8-node sandbox "bdev", removes it after

In the same run, alternating: the probe's own measurement (clustercheck/onnode/device_probe.py: gemm_rate and
copy_rate, on this machine's device) and a bare loop of the same shapes (torch.mm into a preallocated result,
Tensor.copy_ of the same buffers) timed with nothing around it. Target (issue 28): the probe's figures at least
0.97x of the bare loop's. With --sandbox, `clustercheck device` (a fresh process, as a user runs it) over 1
sandbox node and over 8; the measurement window is fixed (--seconds), so the ratio is what fanning out costs.
Medians of --repeat runs.
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

import torch  # noqa: E402

from clustercheck.onnode import device_probe  # noqa: E402

NUM_NODES = 8


def calls_per_second(run, sync, seconds: float) -> float:
    """run() repeated for `seconds` with nothing around it, after one warm-up call."""
    run()
    sync()
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        run()
        calls += 1
    sync()
    return calls / (time.perf_counter() - start)


def bare_gemm(device: str, dtype, size: int, seconds: float, sync) -> float:
    a, b = torch.randn(size, size, device=device).to(dtype), torch.randn(size, size, device=device).to(dtype)
    if dtype == torch.float8_e4m3fn:    # cuBLASLt's fp8 takes the second operand column-major, scales, bf16 out
        b, one = b.t().contiguous().t(), torch.ones((), device=device)
        run = lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)  # noqa: E731
    else:
        out = torch.empty(size, size, device=device, dtype=dtype)
        run = lambda: torch.mm(a, b, out=out)  # noqa: E731
    return 2.0 * size ** 3 * calls_per_second(run, sync, seconds)


def bare_copy(device: str, nbytes: int, seconds: float, sync) -> float:
    src, dst = torch.ones(nbytes // 4, device=device), torch.empty(nbytes // 4, device=device)
    return nbytes * calls_per_second(lambda: dst.copy_(src), sync, seconds)


def figures(repeat: int, seconds: float):
    cuda = torch.cuda.is_available()
    device = "cuda:0" if cuda else "cpu"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    size = device_probe.GPU_SIZE if cuda else device_probe.CPU_SIZE
    nbytes = device_probe.COPY_MIB["cuda" if cuda else "cpu"] * 2 ** 20
    # a GPU: the training dtypes (fp8 where the GPU has it); a CPU: the fp32 the probe measures there
    dtypes = ["float32"] if not cuda else ["bfloat16", "float16", "float32"] + (
        [] if device_probe.fp8_missing(torch, 1) else ["fp8"])

    def both(dtype):
        return (lambda: device_probe.gemm_rate(torch, device, dtype, size, seconds, sync),
                lambda: bare_gemm(device, dtype, size, seconds, sync))

    measures = {f"gemm {name}": both(device_probe.dtype_of(torch, name)) for name in dtypes}
    measures["copy"] = (lambda: device_probe.copy_rate(torch, lambda: torch.ones(nbytes // 4, device=device),
                                                       lambda: torch.empty(nbytes // 4, device=device), nbytes,
                                                       seconds, sync),
                        lambda: bare_copy(device, nbytes, seconds, sync))
    rows = {key: ([], []) for key in measures}
    for round_ in range(repeat):
        for key, (probe, bare) in measures.items():
            order = (0, 1) if round_ % 2 == 0 else (1, 0)     # who goes first alternates: no order bias
            for which in order:
                rows[key][which].append((probe, bare)[which]())
    return device, size, {k: (statistics.median(a), statistics.median(b)) for k, (a, b) in rows.items()}


def named_in(stdout: str):
    """The nodes a `device --json` run's findings name (a clean sandbox: none), and its exit code's verdict."""
    import json
    doc = json.loads(stdout)
    return sorted({n for f in doc["findings"] if f["status"] != "OK" for n in f.get("nodes") or []} |
                  {f["check"] for f in doc["findings"] if f["status"] != "OK" and not f.get("nodes")})


def sandbox_walls(repeat: int, name: str, clean_runs: int):
    from clustercheck.sandbox import Sandbox, down
    box = Sandbox.up(NUM_NODES, name)
    work = tempfile.mkdtemp(prefix="clustercheck-bench.")
    try:
        walls, named = {}, []
        every = os.path.join(work, "nodes-all.txt")
        with open(every, "w") as handle:
            handle.write("\n".join(node.name for node in box.nodes) + "\n")
        for _ in range(clean_runs):
            proc = subprocess.run([sys.executable, "-m", "clustercheck", "device", every, "-F", box.ssh_config,
                                   "--python", sys.executable, "--seconds", "3", "--json"], stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True)
            named.append(named_in(proc.stdout))
        for count in (1, NUM_NODES):
            nodes = os.path.join(work, f"nodes{count}.txt")
            with open(nodes, "w") as handle:
                handle.write("\n".join(node.name for node in box.nodes[:count]) + "\n")
            runs = []
            for _ in range(repeat):
                start = time.perf_counter()
                subprocess.run([sys.executable, "-m", "clustercheck", "device", nodes, "-F", box.ssh_config,
                                "--python", sys.executable, "--seconds", "3"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
                runs.append(time.perf_counter() - start)
            walls[count] = statistics.median(runs)
        return walls, named
    finally:
        down(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.0, help="each measurement's budget")
    parser.add_argument("--sandbox", action="store_true", help="also the wall on 8 sandbox nodes against 1")
    parser.add_argument("--name", default="bdev")
    parser.add_argument("--clean-runs", type=int, default=20, help="with --sandbox: runs on all 8 clean nodes, "
                                                                    "each must name nobody")
    args = parser.parse_args()
    device, size, found = figures(args.repeat, args.seconds)
    model = device_probe.cpu_model() if device == "cpu" else torch.cuda.get_device_name()
    print(f"device benchmark: {device} ({model}), medians of {args.repeat} alternating runs of {args.seconds:g} s, "
          f"matmul n={size}\n")
    print("| measure | probe | bare loop | ratio | target |")
    print("|---|---|---|---|---|")
    for key, (probe, bare) in found.items():
        unit, scale = ("GB/s", 1e-9) if key == "copy" else ("TFLOPS", 1e-12) if device != "cpu" else ("GFLOPS", 1e-9)
        print(f"| {key} | {probe * scale:,.1f} {unit} | {bare * scale:,.1f} {unit} | {probe / bare:.3f}x | >= 0.97x |")
    if args.sandbox:
        walls, named = sandbox_walls(max(1, args.repeat // 2), args.name, args.clean_runs)
        print(f"| `clustercheck device --seconds 3`, 1 node | {walls[1]:.1f} s | | 1.00x | |")
        print(f"| `clustercheck device --seconds 3`, {NUM_NODES} nodes | {walls[NUM_NODES]:.1f} s | | "
              f"{walls[NUM_NODES] / walls[1]:.2f}x of 1 node | reported |")
        blamed = [n for n in named if n]
        print(f"| clean runs on {NUM_NODES} nodes naming anyone | {len(blamed)} of {len(named)} | | | 0 |")
        for names in blamed:
            print(f"|   named | {', '.join(names)} | | | |")


if __name__ == "__main__":
    main()
