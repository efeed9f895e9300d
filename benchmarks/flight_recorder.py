"""Time clustercheck's Flight Recorder reader and judge beside torch's own analyzer, on the same synthesized dumps.

    python3 benchmarks/flight_recorder.py                      # 1,024 ranks x 2,000 entries (issue 50: <= 5 s)
    python3 benchmarks/flight_recorder.py --ranks 64 --entries 500 --torch-timeout 120

The dumps are pickles shaped as tests/data/flight-recorder's real ones (torch 2.13.0, recorder "2.10"): the same
keys, 3 frames per entry shared as torch's pickler shares them, but with NCCL's names and a filled pg_config
(`nccl:all_reduce`, ranks per group), since torch's analyzer cannot read Gloo's dumps (it finds no group in their
empty pg_config: KeyError). Every step is all_reduce, broadcast and barrier on the world and all_reduce in the
rank's tensor-parallel group of 8; the last rank stops before the last step's world all_reduce. They go to a temp
dir, removed at the end. torch's analyzer runs in a subprocess bounded by --torch-timeout (it is quadratic in the
entries: at full size it may not finish); its time includes its own import of torch.
"""

import argparse
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

TP = 8
FRAMES = [{"name": "all_reduce", "filename": "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py",
           "line": 3245}, {"name": "wrapper", "filename": "/usr/lib/python3/site-packages/torch/distributed/"
                                                          "c10d_logger.py", "line": 83},
          {"name": "train_step", "filename": "/job/train.py", "line": 120}]


def entries_of(rank, count, stop):
    tp = rank // TP
    world_pg, tp_pg = ("0", "default_pg"), (str(1 + tp), f"tp{tp}")
    steps = [("all_reduce", world_pg, [[1024, 1024]]), ("broadcast", world_pg, [[4096]]),
             ("all_reduce", tp_pg, [[2048]]), ("barrier", world_pg, [])]
    seq = {world_pg: 0, tp_pg: 0}
    out = []
    for record in range(count):
        op, pg, sizes = steps[record % len(steps)]
        seq[pg] += 1
        last = record >= count - 1
        out.append({"frames": FRAMES, "record_id": record, "pg_id": int(pg[0]), "process_group": pg,
                    "thread_name": "pt_main_thread", "thread_id": "140000000000000", "collective_seq_id": seq[pg],
                    "p2p_seq_id": 0, "op_id": seq[pg], "profiling_name": f"nccl:{op}",
                    "time_created_ns": 1_790_000_000_000_000_000 + record * 1_000_000, "input_sizes": sizes,
                    "input_dtypes": ["Float"] * len(sizes), "output_sizes": sizes,
                    "output_dtypes": ["Float"] * len(sizes), "state": "scheduled" if last else "completed",
                    "time_discovered_started_ns": None, "time_discovered_completed_ns": None,
                    "retired": not last, "timeout_ms": 600000, "is_p2p": False})
    return out


def write_dumps(folder, ranks, count):
    config = {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(ranks)))}}
    for tp in range(ranks // TP):
        config[str(1 + tp)] = {"name": str(1 + tp), "desc": f"tp{tp}", "ranks": str(list(range(tp * TP, tp * TP + TP)))}
    blobs = {}
    for rank in range(ranks):
        stop = rank == ranks - 1
        key = (rank // TP, stop)
        if key not in blobs:
            entries = entries_of(rank, count, stop)
            if stop:     # this rank never enqueued the last world all_reduce, nor anything after it
                last_world = max(i for i, e in enumerate(entries) if e["profiling_name"] == "nccl:all_reduce"
                                 and e["process_group"][1] == "default_pg")
                entries = entries[:last_world]
                entries[-1] = dict(entries[-1], retired=True, state="completed")
            blobs[key] = pickle.dumps({"version": "2.10", "pg_config": config, "comm_lib_version": "2.21.5",
                                       "pg_status": {}, "entries": entries}, protocol=2)
        with open(os.path.join(folder, f"nccl_trace_rank_{rank}"), "wb") as handle:
            handle.write(blobs[key])


def ours(folder):
    from clustercheck.flight.findings import judge
    from clustercheck.flight.read import read_dumps
    start = time.perf_counter()
    paths = [os.path.join(folder, name) for name in os.listdir(folder)]
    doc, findings = judge(read_dumps(paths))
    took = time.perf_counter() - start
    return took, findings[0].summary if findings else "(no finding)"


def torch_analyzer(folder, timeout_s):
    code = ("import sys, time; t = time.perf_counter()\n"
            "from torch.distributed.flight_recorder.fr_trace import main\n"
            "main([sys.argv[1]])\nprint('TOOK', time.perf_counter() - t)")
    try:
        proc = subprocess.run([sys.executable, "-c", code, folder], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None, f"did not finish in {timeout_s} s"
    took = [float(line.split()[1]) for line in proc.stdout.splitlines() if line.startswith("TOOK")]
    if proc.returncode or not took:
        return None, f"failed: {(proc.stderr.strip().splitlines() or ['?'])[-1][:200]}"
    said = [line for line in (proc.stdout + proc.stderr).splitlines() if "missing ranks" in line][:1]
    return took[0], said[0] if said else "(ran)"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--torch-timeout", type=int, default=300, help="seconds torch's analyzer may take")
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="fr-bench-")
    try:
        start = time.perf_counter()
        write_dumps(folder, args.ranks, args.entries)
        size = sum(os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder))
        print(f"{args.ranks} ranks x {args.entries} entries: {size / 1e6:.0f} MB of pickles written in "
              f"{time.perf_counter() - start:.1f} s")
        took, said = ours(folder)
        print(f"clustercheck read + judge: {took:.2f} s  ({said})")
        torch_took, torch_said = torch_analyzer(folder, args.torch_timeout)
        if torch_took is None:
            print(f"torch's analyzer (fr_trace): {torch_said}")
        else:
            print(f"torch's analyzer (fr_trace): {torch_took:.2f} s  ({torch_said})")
            print(f"ratio torch / clustercheck: {torch_took / took:.1f}x")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
