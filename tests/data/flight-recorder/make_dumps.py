"""Make real PyTorch Flight Recorder dumps on one machine: 4 gloo ranks on 127.0.0.1, three scenarios.

    python3 tests/data/flight-recorder/make_dumps.py tests/data/flight-recorder

Each scenario starts 4 ranks (subprocesses of this file, backend gloo, init_method tcp://127.0.0.1:PORT, a free
port), with TORCH_FR_BUFFER_SIZE=2000 and TORCH_FR_DUMP_TEMP_FILE=<scenario>/pickle/nccl_trace_rank_ (the prefix
torch's analyzer reads: prefix + rank). Every rank runs 3 steps of: all_reduce (world), broadcast (world, from 0),
all_reduce (its pair: group "tp0" = ranks 0,1 or "tp1" = ranks 2,3), barrier (world); on the third step:

  hang-world     rank 2 stops before the world all_reduce; ranks 0, 1, 3 wait in it
  hang-subgroup  rank 3 stops before its tp1 all_reduce; rank 2 waits in it; ranks 0, 1 wait in the barrier
  mismatch       rank 1 calls the world all_reduce with 8 floats, the others with 4 (Gloo aborts a peer)

Every rank dumps its record (torch._C._distributed_c10d._dump_fr_trace(), a pickle, and _dump_fr_trace_json())
at one deadline, as ProcessGroupNCCL's watchdog does on a timeout (TORCH_NCCL_DUMP_ON_TIMEOUT): Gloo has no
watchdog that dumps, so the waiting ranks issue the collective with async_op=True and poll it until the deadline
(the record is the one a blocking call makes: a blocking call is the same work waited on; a dump from a second
thread while the main one waits in a blocking gloo call did not return here). Every process is bounded in time
and killed at the end; nothing listens beyond 127.0.0.1.
"""

import datetime
import os
import signal
import socket
import subprocess
import sys
import time

WORLD = 4
HANG_STEP = 2          # the third step (0-based)
SCENARIOS = ("hang-world", "hang-subgroup", "mismatch")
DEADLINE_S = 5.0       # after the last warm-up barrier: when every rank dumps
RANK_LIMIT_S = 90


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def dump(out, rank):
    import torch
    c10d = torch._C._distributed_c10d
    prefix = os.environ["TORCH_FR_DUMP_TEMP_FILE"]
    with open(f"{prefix}{rank}", "wb") as handle:
        handle.write(c10d._dump_fr_trace())
    json_dir = os.path.join(os.path.dirname(os.path.dirname(prefix)), "json")
    with open(os.path.join(json_dir, f"{os.path.basename(prefix)}{rank}.json"), "wb") as handle:
        handle.write(c10d._dump_fr_trace_json())


def rank_main(scenario, rank, port, out):
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=60))
    pairs = [dist.new_group([0, 1], group_desc="tp0"), dist.new_group([2, 3], group_desc="tp1")]
    pair = pairs[rank // 2]
    deadline = None

    def wait(work):
        """The work done, or the deadline: dump and leave (the rank is stuck in this collective)."""
        while deadline is not None and not work.is_completed():
            if time.time() > deadline:
                dump(out, rank)
                os._exit(0)
            time.sleep(0.01)
        work.wait()

    def stop():
        """This rank stops outside any collective (a data loader stuck, a rank that went on elsewhere)."""
        time.sleep(max(0.0, deadline - time.time()))
        dump(out, rank)
        time.sleep(3)          # the others dump before this rank's exit closes their connections
        os._exit(0)

    for step in range(3):
        if step == HANG_STEP:
            dist.barrier()
            deadline = time.time() + DEADLINE_S
        hang = step == HANG_STEP
        if hang and scenario == "hang-world" and rank == 2:
            stop()
        size = 8 if hang and scenario == "mismatch" and rank == 1 else 4
        if hang and scenario == "mismatch":
            if rank == 1:
                time.sleep(1.0)            # the others' all_reduce is recorded and dumped before Gloo aborts
            work = dist.all_reduce(torch.ones(size), async_op=True)
            dump(out, rank)
            try:
                work.wait()
                print(f"rank {rank}: the all_reduce of {size} floats returned", file=sys.stderr, flush=True)
            except RuntimeError as exc:
                print(f"rank {rank}: {exc}", file=sys.stderr, flush=True)
            time.sleep(2)          # every rank's outcome is said before the first exit closes connections
            os._exit(0)
        wait(dist.all_reduce(torch.ones(size), async_op=True))
        wait(dist.broadcast(torch.ones(4), src=0, async_op=True))
        if hang and scenario == "hang-subgroup" and rank == 3:
            stop()
        wait(dist.all_reduce(torch.ones(2), group=pair, async_op=True))
        wait(dist.barrier(async_op=True))
    dist.destroy_process_group()


def run_scenario(scenario, out):
    for sub in ("pickle", "json"):
        os.makedirs(os.path.join(out, scenario, sub), exist_ok=True)
    env = dict(os.environ, TORCH_FR_BUFFER_SIZE="2000",
               TORCH_FR_DUMP_TEMP_FILE=os.path.join(out, scenario, "pickle", "nccl_trace_rank_"))
    port = free_port()
    log = open(os.path.join(out, scenario, "ranks.log"), "w")
    procs = [subprocess.Popen([sys.executable, __file__, "--rank", scenario, str(rank), str(port), out], env=env,
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True) for rank in range(WORLD)]
    try:
        for proc in procs:
            proc.wait(timeout=RANK_LIMIT_S)
    except subprocess.TimeoutExpired:
        print(f"{scenario}: a rank ran past {RANK_LIMIT_S} s", file=sys.stderr)
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
    print(scenario, [proc.returncode for proc in procs])


if __name__ == "__main__":
    if sys.argv[1] == "--rank":
        rank_main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    else:
        for name in (sys.argv[2:] or SCENARIOS):
            run_scenario(name, os.path.abspath(sys.argv[1]))
