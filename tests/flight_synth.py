"""Synthesized Flight Recorder dumps for the reader's tests, shaped as tests/data/flight-recorder's real ones (torch
2.13.0, recorder "2.10": the same keys, frames per entry) with the oddities a real job's can have: a rank that
stops, a rank that calls one collective with other sizes, point-to-point entries beside the collectives, a group
destroyed and made again (its count starts at 1 again), a ring buffer that dropped a rank's oldest entries, a
group's count in pg_status ahead of its entries. Written as pickles or as JSON (lists for tuples, no frames)."""

import json
import os
import pickle

TP = 4
BASE_NS = 1_790_000_000_000_000_000


def frames(rank, line):
    return [{"name": "all_reduce", "filename": "/site-packages/torch/distributed/distributed_c10d.py", "line": 3245},
            {"name": "wrapper", "filename": "/site-packages/torch/distributed/c10d_logger.py", "line": 83},
            {"name": "train_step", "filename": f"/job/train_r{rank % 2}.py", "line": line}]


def entry(rank, record, pg, op, seq, sizes, done, p2p=False, p2p_seq=0):
    return {"frames": frames(rank, 100 + record % 7), "record_id": record, "pg_id": int(pg[0]),
            "process_group": pg, "thread_name": "pt_main_thread", "thread_id": "140000000000000",
            "collective_seq_id": seq, "p2p_seq_id": p2p_seq, "op_id": seq, "profiling_name": f"nccl:{op}",
            "time_created_ns": BASE_NS + record * 1_000_000 + rank, "input_sizes": sizes,
            "input_dtypes": ["Float"] * len(sizes), "output_sizes": sizes, "output_dtypes": ["Float"] * len(sizes),
            "state": "completed" if done else "scheduled", "time_discovered_started_ns": None,
            "time_discovered_completed_ns": None, "retired": done, "timeout_ms": 600000, "is_p2p": p2p}


def rank_entries(rank, steps, stop=None, odd=None, p2p=False, restart=None, drop=0):
    """One rank's entries: `steps` steps of all_reduce, broadcast (world), all_reduce (its group of TP), barrier
    (world); `stop` (rank, step): that rank records nothing from that step's world all_reduce on; `odd` (rank,
    step): that rank's all_reduce of that step has other sizes; `p2p`: a send to the next rank every step;
    `restart`: the world group made again before that step (its count from 1); `drop`: the oldest entries lost."""
    tp = rank // TP
    world, group = ("0", "default_pg"), (str(1 + tp), f"tp{tp}")
    seq = {world: 0, group: 0}
    out, record, p2p_seq = [], 0, 0
    for step in range(steps):
        if restart is not None and step == restart:
            seq[world] = 0
        plan = [("all_reduce", world, [[1024, 8 if odd == (rank, step) else 4]]), ("broadcast", world, [[16]]),
                ("all_reduce", group, [[32]]), ("barrier", world, [])]
        for number, (op, pg, sizes) in enumerate(plan):
            if stop is not None and stop[0] == rank and (step, number) >= (stop[1], 0):
                return out[drop:]
            seq[pg] += 1
            out.append(entry(rank, record, pg, op, seq[pg], sizes, True))
            record += 1
        if p2p:
            p2p_seq += 1
            out.append(entry(rank, record, world, "send", seq[world], [[64]], True, p2p=True, p2p_seq=p2p_seq))
            record += 1
    if out:
        out[-1] = dict(out[-1], state="scheduled", retired=False)
    return out[drop:]


def config(ranks):
    cfg = {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(ranks)))}}
    for tp in range((ranks + TP - 1) // TP):
        members = [r for r in range(tp * TP, tp * TP + TP) if r < ranks]
        cfg[str(1 + tp)] = {"name": str(1 + tp), "desc": f"tp{tp}", "ranks": str(members)}
    return cfg


def write(folder, ranks=8, steps=12, form="pickle", status=None, **how):
    """The dumps of one job into folder; `status` (rank -> pg_status); the rest as rank_entries takes it.
    Returns the paths, in rank order."""
    os.makedirs(folder, exist_ok=True)
    paths = []
    for rank in range(ranks):
        entries = rank_entries(rank, steps, drop=how.get("drop", {}).get(rank, 0),
                               **{k: v for k, v in how.items() if k != "drop"})
        doc = {"version": "2.10", "pg_config": config(ranks), "comm_lib_version": "2.21.5",
               "pg_status": (status or {}).get(rank, {}), "entries": entries}
        path = os.path.join(folder, f"nccl_trace_rank_{rank}" + (".json" if form == "json" else ""))
        if form == "json":
            for e in entries:
                e.pop("frames")
            doc["pg_status"] = {pg: {k: str(v) for k, v in fields.items()} for pg, fields in doc["pg_status"].items()}
            data = json.dumps(doc).encode()
        else:
            data = pickle.dumps(doc, protocol=2)
        with open(path, "wb") as handle:
            handle.write(data)
        paths.append(path)
    return paths


# every scenario the equality tests read both ways: (name, write's keywords)
SCENARIOS = [
    ("clean", {}),
    ("stop", {"stop": (5, 9)}),
    ("stop-in-group", {"stop": (6, 10)}),
    ("desync", {"odd": (3, 7)}),
    ("desync-and-stop", {"odd": (2, 4), "stop": (7, 8)}),
    ("p2p", {"p2p": True, "stop": (1, 6)}),
    ("restart", {"restart": 5, "stop": (4, 9)}),
    ("dropped", {"drop": {0: 9, 3: 2, 5: 17}, "stop": (2, 11)}),
    ("status-ahead", {"stop": (3, 8), "status": {0: {"0": {"last_enqueued_collective": 40,
                                                            "last_started_collective": -1,
                                                            "last_completed_collective": 30}}}}),
    ("json-desync", {"form": "json", "odd": (1, 3)}),
    ("json-stop", {"form": "json", "stop": (0, 5), "p2p": True}),
]
