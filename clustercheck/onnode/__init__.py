"""Node-side programs: everything clustercheck runs on the nodes, shipped from here alone.

Two ways to travel:
- the probes and readers are standard-library files that travel inside the command line itself (compressed,
  base64, with the helpers HELPERS names registered before them), so running one costs a single exec on the node
  and leaves no file behind to clean up;
- the programs torchrun starts (bench's worker, and the reference trainer with its entry, hang hook and rank
  faults) are written into the node's run directory: `bench_files()` and `trainer_files()` give their bytes under
  the names they have there.

What each module is:
- the probes: env_probe.py (what the node runs), net_probe.py (listeners, connections, link quality, SSH),
  device_probe.py (each device under load), storage_probe.py (a directory written and read from every rank slot),
  stacks_probe.py (the Python stacks of chosen processes);
- their helpers: nodelib.py (files, commands and names under deadlines, interfaces, the environment, one JSON
  line), gpuprobe.py (NVIDIA GPUs by pynvml or nvidia-smi), gpusample.py (clocks, power, throttling while loaded),
  kernlog.py (Xid events from the kernel log), fabric.py (RDMA ports from sysfs), dstate.py (what a process waits
  on in the kernel), mounts.py (where a path lives, an OSError said), sweep.py (what a launch leaves, undone);
- NCCL's: nccl_log_reader.py reads its whole log into per-rank summaries (the path it took), with
  nccl_log_prefix.py (where a line came from), nccl_log_info.py (what an INFO line says of its set-up) and
  nccl_log_connections.py (its connection lines); nccl_ras_client.py asks its RAS for the job's state;
- what torchrun starts: bench_worker.py (pair rounds and collective sweeps) with rounds.py (the rounds of disjoint
  pairs and the slow-node search), train_entry.py (the trainer's hooks, then its main()), hang.py (what a rank
  says when asked why it stopped), rank_faults.py (faults a rank makes on purpose, for the sandbox),
  buildlocks.py (the extension build locks a rank holds), dsconfig.py (the user's DeepSpeed config, "auto"
  resolved).

The reference trainer is a package of its own (reference_train/) that knows nothing of
clustercheck: its files are read from where it is installed, never imported.
"""

import base64
import functools
import importlib.util
import os
import shlex
import zlib
from typing import Dict, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
# The helper modules each program imports, in the order they must be registered.
HELPERS = {"env_probe": ("nodelib", "gpuprobe", "kernlog", "fabric", "sweep"), "net_probe": ("nodelib",),
           "device_probe": ("nodelib", "gpuprobe", "gpusample"), "storage_probe": ("nodelib", "dstate", "mounts"),
           "nccl_log_reader": ("nccl_log_prefix", "nccl_log_info", "nccl_log_connections")}

# argv[1] is "name:blob,name:blob,...": the helpers become importable modules, the last
# entry runs as __main__ with argv as if the file itself had been run.
_BOOTSTRAP = (
    "import sys,zlib,base64,types\n"
    "parts=[p.split(':',1) for p in sys.argv[1].split(',')]\n"
    "src=lambda b:zlib.decompress(base64.b64decode(b))\n"
    "for n,b in parts[:-1]:\n"
    " m=types.ModuleType(n);exec(compile(src(b),n+'.py','exec'),m.__dict__);sys.modules[n]=m\n"
    "n,b=parts[-1];sys.argv=[n+'.py']+sys.argv[2:]\n"
    "exec(compile(src(b),n+'.py','exec'),{'__name__':'__main__'})"
)


def source(name: str) -> bytes:
    """The bytes of node-side program `name` (e.g. "env_probe.py")."""
    with open(os.path.join(HERE, name), "rb") as handle:
        return handle.read()


@functools.lru_cache(maxsize=None)
def _packed(name: str) -> str:
    return base64.b64encode(zlib.compress(source(name + ".py"), 9)).decode("ascii")


def inline_command(python: str, name: str, args: Sequence[str] = ()) -> str:
    """A shell command that runs program `name` ("env_probe") with `python` and `args` on the node."""
    name = name[:-3] if name.endswith(".py") else name
    bundle = ",".join(f"{n}:{_packed(n)}" for n in (*HELPERS.get(name, ("nodelib",)), name))
    argv = [python, "-c", _BOOTSTRAP, bundle, *args]
    return " ".join(shlex.quote(a) for a in argv)


# The reference trainer's files, as shipped into each node's run directory (the trainer imports
# dsconfig from beside itself); the built-in DeepSpeed configs are among them.
TRAINER_FILES = ("train.py", "model.py", "data.py", "checks.py", "checkpoint.py", "parallel.py", "hf.py",
                 "ds_config_zero1.json", "ds_config_zero2.json", "ds_config_zero3.json",
                 "ds_config_zero3_offload.json")
TRAINER_ENTRY = "train_entry.py"   # what torchrun starts: the hooks, then the trainer's main()


def trainer_directory() -> str:
    """Where the reference_train package is installed (found without importing it)."""
    spec = importlib.util.find_spec("reference_train")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the reference_train package is not installed beside clustercheck")
    return list(spec.submodule_search_locations)[0]


def trainer_files() -> Dict[str, bytes]:
    """The reference trainer and the tool's side of it (entry, hang hook, rank faults, DeepSpeed config reader,
    build lock records)."""
    where = trainer_directory()
    files = {}
    for name in TRAINER_FILES:
        with open(os.path.join(where, name), "rb") as handle:
            files[name] = handle.read()
    for name in (TRAINER_ENTRY, "hang.py", "rank_faults.py", "dsconfig.py", "buildlocks.py"):
        files[name] = source(name)
    return files


BENCH_WORKER = "clustercheck_bench_worker.py"   # what torchrun starts for bench


def bench_files() -> Dict[str, bytes]:
    """bench's worker and the modules it imports from beside itself, under the names it imports them by."""
    return {BENCH_WORKER: source("bench_worker.py"), "clustercheck_rounds.py": source("rounds.py"),
            "clustercheck_hang.py": source("hang.py"), "clustercheck_rank_faults.py": source("rank_faults.py")}
