"""clustercheck node probe: what this node runs, as one JSON document on stdout.

Shipped to every node and run with the interpreter that trains there, through the
same non-interactive SSH path a launcher uses. Standard library only, Python 3.6+.
It never raises: what it cannot collect goes into "missing" with the reason.
It does not import torch (that costs seconds) unless --deep is given.

    python3 env_probe.py [--peers n2,n3] [--workdir DIR] [--deep]
"""

import ast
import os
import platform
import re
import resource
import shutil
import sys
import time

try:  # imported as part of the clustercheck package (the tests)
    from .fabric import collect_infiniband
    from .gpuprobe import collect_gpus
    from .kernlog import collect_kernel_log
    from .nodelib import collect_env, collect_host, collect_net, emit_json, read, run
    from .sweep import build_locks, compiling, extensions_root
except ImportError:  # shipped to a node: inline_command registers the helpers beside this program
    from fabric import collect_infiniband
    from gpuprobe import collect_gpus
    from kernlog import collect_kernel_log
    from nodelib import collect_env, collect_host, collect_net, emit_json, read, run
    from sweep import build_locks, compiling, extensions_root

SCHEMA = 1
PACKAGES = ("torch", "deepspeed", "transformers", "peft", "accelerate", "numpy", "triton")
WHEEL_PREFIXES = {"nccl": "nvidia-nccl-", "cudnn": "nvidia-cudnn-"}  # nvidia-nccl-cu12, nvidia-cudnn-cu11, ...


def collect_python(args):
    return {"executable": sys.executable, "version": platform.python_version(),
            "implementation": platform.python_implementation(), "prefix": sys.prefix,
            "virtual_env": sys.prefix != getattr(sys, "base_prefix", sys.prefix),
            "conda_env": os.environ.get("CONDA_DEFAULT_ENV")}


# ---- packages, from metadata: importing torch costs seconds -----------------------
def _normalise(name):
    return re.sub(r"[-_.]+", "_", name).lower()


def installed_distributions():
    """{normalised name: (version, site dir)} as import would find them: first on sys.path wins."""
    found = {}
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            for suffix in (".dist-info", ".egg-info"):
                if name.endswith(suffix) and "-" in name:
                    stem = name[:-len(suffix)]
                    dist, _, version = stem.partition("-")
                    version = version.split("-py")[0]
                    key = _normalise(dist)
                    if key not in found:
                        found[key] = (version, entry)
    return found


def torch_build(site_dir):
    """torch's CUDA build version, read from torch/version.py without importing torch."""
    text = read(os.path.join(site_dir, "torch", "version.py"))
    if text is None:
        return {}
    build = {}
    for line in text.splitlines():
        match = re.match(r"^(cuda|hip|git_version|__version__)\s*(?::[^=]*)?=\s*(.+)$", line)
        if match:
            try:
                build[match.group(1).strip("_")] = ast.literal_eval(match.group(2).strip())
            except (ValueError, SyntaxError):
                pass
    return build


def collect_packages(args):
    dists = installed_distributions()
    versions = {}
    for name in PACKAGES:
        hit = dists.get(_normalise(name))
        versions[name] = hit[0] if hit else None
    for label, prefix in WHEEL_PREFIXES.items():
        hits = sorted((key, value) for key, value in dists.items() if key.startswith(_normalise(prefix)))
        versions[label + "_wheel"] = ("%s %s" % (hits[0][0].replace("_", "-"), hits[0][1][0])) if hits else None
    build = torch_build(dists["torch"][1]) if "torch" in dists else {}
    return {"versions": versions, "torch_build": build,
            "torch_dir": os.path.join(dists["torch"][1], "torch") if "torch" in dists else None}


def collect_nvcc(args):
    nvcc = shutil.which("nvcc") or next((p for p in ("/usr/local/cuda/bin/nvcc",) if os.path.exists(p)), None)
    if nvcc is None:
        return {"path": None, "version": None}
    code, out, err = run([nvcc, "--version"])
    match = re.search(r"release (\d+\.\d+)", out)
    return {"path": nvcc, "version": match.group(1) if match else None}


# ---- limits, storage, tools, log, environment ------------------------------------
def _limit(which):
    soft, hard = resource.getrlimit(which)
    def show(value):
        return "unlimited" if value == resource.RLIM_INFINITY else value
    return {"soft": show(soft), "hard": show(hard)}


def collect_limits(args):
    return {"memlock": _limit(resource.RLIMIT_MEMLOCK), "nofile": _limit(resource.RLIMIT_NOFILE)}


def _space(path):
    stat = os.statvfs(path)
    return {"path": path, "total_bytes": stat.f_blocks * stat.f_frsize, "free_bytes": stat.f_bavail * stat.f_frsize}


def collect_storage(args):
    facts = {}
    facts["shm"] = _space("/dev/shm") if os.path.isdir("/dev/shm") else {"path": "/dev/shm", "missing": True}
    workdir = os.path.abspath(os.path.expanduser(args.get("workdir") or "."))
    if os.path.isdir(workdir):
        facts["workdir"] = _space(workdir)
        facts["workdir"]["writable"] = os.access(workdir, os.W_OK)
    else:
        facts["workdir"] = {"path": workdir, "missing": True}
    return facts


def collect_builds(args):
    """torch's C++ extension build locks (a build killed half way leaves one, and every later start waits on it)."""
    root = extensions_root()
    now = time.time()
    locks = [{"path": path, "age_s": round(now - mtime, 1)} for path, mtime in build_locks(root)] \
        if os.path.isdir(root) else []
    return {"root": root, "locks": locks, "compiling": compiling() if locks else None}


def collect_tools(args):
    return {"pdsh": shutil.which("pdsh"), "path": os.environ.get("PATH", "")}


# ---- --deep: what torch really loads -----------------------------------------------
def collect_deep(args):
    deep = {}
    try:
        import torch
        deep["torch"] = torch.__version__
        deep["torch_file"] = torch.__file__
        deep["cuda_available"] = bool(torch.cuda.is_available())
        deep["device_count"] = torch.cuda.device_count() if deep["cuda_available"] else 0
        deep["cuda_build"] = torch.version.cuda
        try:
            version = torch.cuda.nccl.version()
            deep["nccl"] = ".".join(str(v) for v in version) if isinstance(version, tuple) else str(version)
        except Exception as exc:
            deep["nccl"] = None
            deep["nccl_error"] = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        deep["distributed"] = bool(torch.distributed.is_available())
        deep["backends"] = [b for b in ("nccl", "gloo", "mpi") if getattr(torch.distributed, "is_%s_available" % b,
                                                                          lambda: False)()]
    except Exception as exc:
        deep["torch_error"] = ("%s: %s" % (type(exc).__name__, exc)).splitlines()[0][:300]
    try:
        import deepspeed
        deep["deepspeed"] = deepspeed.__version__
    except ImportError as exc:
        deep["deepspeed_error"] = ("%s: %s" % (type(exc).__name__, exc)).splitlines()[0][:300]
    except Exception as exc:
        deep["deepspeed_error"] = ("%s: %s" % (type(exc).__name__, exc)).splitlines()[0][:300]
    return deep


MISSING = {}
SECTIONS = [("host", collect_host), ("python", collect_python), ("packages", collect_packages),
            ("gpu", collect_gpus), ("nvcc", collect_nvcc), ("net", collect_net),
            ("infiniband", lambda args: collect_infiniband()), ("limits", collect_limits),
            ("storage", collect_storage), ("builds", collect_builds), ("tools", collect_tools),
            ("kernel_log", collect_kernel_log),
            ("env", collect_env)]


def parse_args(argv):
    args = {"peers": "", "workdir": ".", "deep": False}
    index = 0
    while index < len(argv):
        arg = argv[index]
        if arg == "--deep":
            args["deep"] = True
        elif arg in ("--peers", "--workdir") and index + 1 < len(argv):
            args[arg[2:]] = argv[index + 1]
            index += 1
        index += 1
    return args


def probe(argv):
    started = time.time()
    args = parse_args(argv)
    doc = {"schema": SCHEMA, "started": started}
    sections = SECTIONS + ([("deep", collect_deep)] if args["deep"] else [])
    for name, collect in sections:
        try:
            doc[name] = collect(args)
        except Exception as exc:
            doc[name] = None
            MISSING[name] = ("%s: %s" % (type(exc).__name__, exc))[:300]
    doc["missing"] = MISSING
    doc["finished"] = time.time()
    return doc


def main():
    emit_json(lambda: probe(sys.argv[1:]))


if __name__ == "__main__":
    main()
