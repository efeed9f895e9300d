"""`clustercheck storage` speed: its write and read figures against a bare parallel write / fsync / read loop of
the same sizes, and its wall on a sandbox with a network filesystem against its time budget.

    python benchmarks/storage.py [--dir DIR]     # the figures' part only, on DIR (default: a temporary directory)
    sudo python benchmarks/storage.py --sandbox  # also the wall: builds a 3-node sandbox "bsto" with its shared
                                                 # filesystem (sshfs over the nodes' links), removes it after

In the same run, alternating: the probe's own measurement (clustercheck/onnode/storage_probe.py: every slot a
process writing 4 MiB chunks with data syncs at intervals that grow from 8 MiB while they are quick, and at the
end, then reading its file back with the page cache dropped) and a bare loop of the same sizes and slots (processes that write, fsync, drop the cache and
read, timed with nothing around them). Target (issue 29): the probe's figures at least 0.9x of the bare loop's.
With --sandbox, `clustercheck storage` (a fresh process, as a user runs it) on the shared filesystem of 3 nodes
with 2 slots each; its budget is the sum of the phases it waits for (start margin, coherence, three phases of
--seconds + 1 s) and the interpreter's start. Then, in one preflight run (storage, then smoke with the small
preset, checkpoint on the shared filesystem), storage's estimated save and load time against the times smoke's
trainer measures (target: within 25%). Medians of --repeat runs.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from clustercheck.onnode import storage_probe  # noqa: E402

CHUNK = 4 << 20
SECONDS = 8.0      # the probe's phase budget: long enough that every slot writes its whole size here


def bare_slot(path: str, size: int, out) -> None:
    payload = os.urandom(CHUNK)
    start = time.monotonic()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    done = 0
    while done < size:
        done += os.write(fd, payload[:min(CHUNK, size - done)])
    os.fsync(fd)
    os.close(fd)
    wrote = time.monotonic() - start
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    start, got = time.monotonic(), 0
    while True:
        chunk = os.read(fd, CHUNK)
        if not chunk:
            break
        got += len(chunk)
    os.close(fd)
    out.put((done, wrote, got, time.monotonic() - start))


def bare(directory: str, slots: int, size: int):
    """(write B/s, read B/s) of `slots` processes at once, each its own file of `size` bytes."""
    queue = multiprocessing.Queue()
    workers = [multiprocessing.Process(target=bare_slot, args=(os.path.join(directory, f"bare{i}"), size, queue))
               for i in range(slots)]
    for w in workers:
        w.start()
    results = [queue.get() for _ in workers]
    for w in workers:
        w.join()
    for i in range(slots):
        os.unlink(os.path.join(directory, f"bare{i}"))
    return (sum(r[0] for r in results) / max(r[1] for r in results),
            sum(r[2] for r in results) / max(r[3] for r in results))


def probed(directory: str, slots: int, size: int):
    doc = storage_probe.probe(["--dir", directory, "--slots", str(slots), "--size", str(size), "--seconds",
                               f"{SECONDS:g}", "--world", "1"])
    results = doc["slot_results"]
    assert len(results) == slots and all("error" not in r for r in results), doc
    # the same sizes as the bare loop, or the comparison means nothing: a slot the time budget stopped is said
    assert all(r["write_bytes"] == size for r in results), f"the probe's budget of {SECONDS} s stopped a slot early"
    return (sum(r["write_bytes"] for r in results) / max(r["write_s"] for r in results),
            sum(r["read_bytes"] for r in results) / max(r["read_s"] for r in results))


def figures(directory: str, slots: int, size: int, repeat: int) -> None:
    ratios = {"write": [], "read": []}
    for _ in range(repeat):
        (bw, br), (pw, pr) = bare(directory, slots, size), probed(directory, slots, size)
        ratios["write"].append(pw / bw)
        ratios["read"].append(pr / br)
        print(f"  bare {bw / 1e6:8.1f} / {br / 1e6:8.1f} MB/s   probe {pw / 1e6:8.1f} / {pr / 1e6:8.1f} MB/s "
              f"(write / read)")
    for phase, values in ratios.items():
        median = statistics.median(values)
        print(f"probe {phase} / bare loop ({slots} slots x {size >> 20} MiB): {median:.3f}x "
              f"(target >= 0.9: {'met' if median >= 0.9 else 'MISSED'})")


def storage_walls(box, repeat: int) -> None:
    from clustercheck.sandbox.storage import mount_point
    seconds, margin = 3.0, 3.0
    budget = margin + 1.0 + margin + 3 * (seconds + 1) + 2.0     # coherence, three phases, two interpreter starts
    walls = []
    for _ in range(repeat):
        start = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "clustercheck", "storage", box.nodes_file, "-F", box.ssh_config,
                               "--python", sys.executable, "--checkpoint-dir", mount_point(box),
                               "--nproc-per-node", "2", "--seconds", f"{seconds:g}", "--json"],
                              capture_output=True, text=True, timeout=300)
        walls.append(time.monotonic() - start)
        doc = json.loads(proc.stdout)
        print(f"  wall {walls[-1]:.1f} s (stage {doc['wall_s']:.1f} s), exit {proc.returncode}")
    wall = statistics.median(walls)
    print(f"storage on 3 nodes x 2 slots, sshfs: {wall:.1f} s against a budget of {budget:.1f} s: {wall / budget:.2f}x")


def estimate_against_smoke(box, mbit: float) -> None:
    """preflight's storage estimate for smoke's model and mode against the save and load smoke's trainer times, in
    one run. Every node's link is slowed to `mbit` first: on this 2-core host the trainer's own work at a save
    (state dicts, serialising, six ranks on two cores) is the better part of a second, so the storage must take
    seconds for its estimate to be what is measured, as it does on a cluster with a checkpoint of GBs."""
    from clustercheck.sandbox import faults
    from clustercheck.sandbox.storage import mount_point
    nodes = os.path.join(box.dir, "nodes-slots.txt")
    with open(nodes, "w") as handle:
        handle.write("".join(f"{n.name} slots=2\n" for n in box.nodes))
    for node in box.nodes:
        faults.slow_link(box, node.name, mbit)
    with tempfile.TemporaryDirectory() as reports:
        proc = subprocess.run([sys.executable, "-m", "clustercheck", "preflight", nodes, "-F", box.ssh_config,
                               "--python", sys.executable, "--only", "storage,smoke", "--checkpoint-dir",
                               mount_point(box), "--smoke-preset", "small", "--smoke-steps", "8", "--reports-dir",
                               reports, "--json"], capture_output=True, text=True, timeout=900)
    times = json.loads(proc.stdout)["checkpoint_time"]
    print(f"  preflight exit {proc.returncode}: {times}")
    for what in ("save", "load"):
        estimated, measured = times[f"estimated_{what}_s"], times[f"measured_{what}_s"]
        if not estimated or not measured:
            print(f"checkpoint {what}: not measured")
            continue
        off = estimated / measured - 1
        print(f"checkpoint {what} of the small preset under ddp, 3 nodes x 2 ranks, links at {mbit:g} Mbit/s: "
              f"estimated {estimated:.2f} s, smoke measured {measured:.2f} s ({off:+.0%}; target within 25%: "
              f"{'met' if abs(off) <= 0.25 else 'MISSED'})")


def sandbox(repeat: int) -> None:
    from clustercheck.sandbox import Sandbox, down
    from clustercheck.sandbox.storage import serve
    box = Sandbox.up(3, "bsto")
    try:
        serve(box)
        storage_walls(box, repeat)
        estimate_against_smoke(box, 200.0)
    finally:
        down(box.name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", help="where to measure (default: a temporary directory)")
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--size", type=int, default=256 << 20)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--sandbox", action="store_true")
    args = parser.parse_args()
    directory = args.dir or tempfile.mkdtemp(prefix="clustercheck-bench-storage.")
    try:
        figures(directory, args.slots, args.size, args.repeat)
    finally:
        if not args.dir:
            shutil.rmtree(directory, ignore_errors=True)
    if args.sandbox:
        sandbox(max(1, args.repeat // 2))


if __name__ == "__main__":
    main()
