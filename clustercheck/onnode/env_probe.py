"""clustercheck node probe: what this node runs, as one JSON document on stdout.

Shipped to every node and run with the interpreter that trains there, through the
same non-interactive SSH path a launcher uses. Standard library only, Python 3.6+.
It never raises: what it cannot collect goes into "missing" with the reason.
It does not import torch (that costs seconds) unless --deep is given.

    python3 env_probe.py [--peers n2,n3] [--workdir DIR] [--deep]
"""

import ast
import json
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
WHEEL_PREFIXES = {"nccl": "nvidia-nccl-", "cudnn": "nvidia-cudnn-"}  # nvidia-nccl-cu12, nvidia-cudnn-cu11, ...
ENV_PATHS = ("LD_LIBRARY_PATH",)
LIBRARIES = {"nccl": "libnccl.so", "cudart": "libcudart.so"}   # what torch's NCCL backend and CUDA runtime load


def collect_python(args):
    return {"executable": sys.executable, "version": platform.python_version(),
            "implementation": platform.python_implementation(), "prefix": sys.prefix,
            "virtual_env": sys.prefix != getattr(sys, "base_prefix", sys.prefix),
            "conda_env": os.environ.get("CONDA_DEFAULT_ENV")}


# ---- packages, from metadata: importing torch costs seconds -----------------------
def _normalise(name):
    """PEP 503's name: flash_attn, Flash-Attn and flash.attn are one distribution, flash-attn."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _metadata_version(path):
    """The Version: field of a distribution's METADATA / PKG-INFO (an .egg-info without one in its name)."""
    for name in ("METADATA", "PKG-INFO"):
        text = read(os.path.join(path, name)) if os.path.isdir(path) else (read(path) if name == "PKG-INFO" else None)
        if text:
            match = re.search(r"^Version:\s*(\S+)", text, re.M)
            if match:
                return match.group(1)
    return None


def _origin(path, site_dirs, entry):
    """How a distribution got there: the installer it names, an editable install (and its commit), or a
    directory outside the site directories (a source tree on sys.path: a legacy develop install)."""
    origin = {}
    installer = (read(os.path.join(path, "INSTALLER")) or "").strip() if os.path.isdir(path) else ""
    if installer:
        origin["via"] = installer[:20]
    direct = read(os.path.join(path, "direct_url.json")) if os.path.isdir(path) else None
    if direct:
        try:
            url = json.loads(direct)
        except ValueError:
            url = {}
        if isinstance(url, dict):
            if (url.get("dir_info") or {}).get("editable"):
                origin["editable"] = url.get("url", "")[:300]
            commit = (url.get("vcs_info") or {}).get("commit_id")
            if commit:
                origin["commit"] = str(commit)[:40]
    if entry not in site_dirs and "editable" not in origin:
        origin["editable"] = entry[:300]
    return origin


def installed_distributions():
    """{PEP 503 name: {"version", "dir" (its sys.path entry), and where it came from}} as import would find them:
    first on sys.path wins. A distribution whose version cannot be read says why, never a crash."""
    found = {}
    site_dirs = set(p for p in sys.path if os.path.basename(p.rstrip("/")) in ("site-packages", "dist-packages"))
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            for suffix in (".dist-info", ".egg-info"):
                if not name.endswith(suffix):
                    continue
                stem = name[:-len(suffix)]
                dist, _, version = stem.partition("-")
                key = _normalise(dist)
                if not key or key in found:
                    continue
                path = os.path.join(entry or ".", name)
                version = version.split("-py")[0] or _metadata_version(path)
                found[key] = dict(_origin(path, site_dirs, entry), version=version, dir=entry)
                if not version:
                    found[key]["error"] = "no version in its name or metadata (%s)" % name
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
    """Every distribution the training interpreter would import, and the library files its torch would load."""
    dists = installed_distributions()
    versions = dict((name, dist.get("version")) for name, dist in dists.items())
    paths = [p for p in sys.path if p]
    listed = dict((name, dict((k, paths.index(v) if k == "dir" and v in paths else v) for k, v in dist.items()))
                  for name, dist in dists.items())
    for label, prefix in WHEEL_PREFIXES.items():
        hits = sorted((key, value) for key, value in dists.items() if key.startswith(_normalise(prefix)))
        versions[label + "_wheel"] = ("%s %s" % (hits[0][0], hits[0][1].get("version"))) if hits else None
    torch_dir = dists["torch"]["dir"] if "torch" in dists else None
    build = torch_build(torch_dir) if torch_dir else {}
    return {"versions": versions, "distributions": listed, "sys_path": paths, "torch_build": build,
            "torch_dir": os.path.join(torch_dir, "torch") if torch_dir else None,
            "libraries": loaded_libraries(dists)}


def _library_in(directory, stem):
    """The real file of `stem` (libnccl.so) in a directory: libnccl.so.2 -> libnccl.so.2.21.5."""
    try:
        names = sorted(n for n in os.listdir(directory) if n.startswith(stem))
    except OSError:
        return None
    return os.path.realpath(os.path.join(directory, names[0])) if names else None


def loaded_libraries(dists):
    """Which libnccl and libcudart torch would load: one found first on LD_LIBRARY_PATH wins over the wheel torch
    brings (nvidia-nccl-cu12's nvidia/nccl/lib), which wins over the system's (ldconfig). The version is the
    file's own (libnccl.so.2.21.5), never guessed."""
    found = {}
    wheel_dirs = dict((label, os.path.join(dists[key]["dir"], "nvidia", label, "lib"))
                      for key in dists for label in LIBRARIES if key.startswith("nvidia-%s-" % label)
                      or (label == "cudart" and key.startswith("nvidia-cuda-runtime-")))
    for label, stem in LIBRARIES.items():
        places = [("LD_LIBRARY_PATH", d) for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
        if label in wheel_dirs:
            places.append(("wheel", wheel_dirs[label]))
        for source, directory in places:
            path = _library_in(directory, stem)
            if path:
                found[label] = {"path": path, "from": source}
                break
        else:
            code, out, _ = run(["ldconfig", "-p"]) if shutil.which("ldconfig") or os.path.exists("/sbin/ldconfig") \
                else (1, "", "")
            match = re.search(r"^\s*%s\S* .*=> (\S+)$" % re.escape(stem), out, re.M) if code == 0 else None
            found[label] = {"path": os.path.realpath(match.group(1)), "from": "ldconfig"} if match else None
        if found.get(label):
            version = re.search(r"\.so\.(\d+(?:\.\d+)*)$", found[label]["path"])
            found[label]["version"] = version.group(1) if version else None
    return found


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


def collect_gpudirect(args):
    """The kernel modules GPUDirect RDMA needs, loaded or not (nvidia_peermem; nv_peer_mem before driver 470)."""
    return {"modules": [name for name in ("nvidia_peermem", "nv_peer_mem") if os.path.isdir("/sys/module/" + name)]}


def collect_tools(args):
    return {"pdsh": shutil.which("pdsh"), "path": os.environ.get("PATH", "")}


# ---- --deep: what torch really loads -----------------------------------------------
def collect_deep(args):
    deep = {}
    try:
        import torch   # optional: --deep asks what torch loads, where it is installed at all
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
        import deepspeed   # optional: a node may train without it
        deep["deepspeed"] = deepspeed.__version__
    except ImportError as exc:
        deep["deepspeed_error"] = ("%s: %s" % (type(exc).__name__, exc)).splitlines()[0][:300]
    except Exception as exc:
        deep["deepspeed_error"] = ("%s: %s" % (type(exc).__name__, exc)).splitlines()[0][:300]
    return deep


MISSING = {}
SECTIONS = [("host", collect_host), ("python", collect_python), ("packages", collect_packages),
            ("gpu", collect_gpus), ("nvcc", collect_nvcc), ("net", collect_net),
            ("infiniband", lambda args: collect_infiniband()), ("gpudirect", collect_gpudirect),
            ("limits", collect_limits),
            ("storage", collect_storage), ("builds", collect_builds), ("tools", collect_tools),
            ("kernel_log", collect_kernel_log),
            ("env", collect_env)]


def parse_args(argv):
    args = {"peers": "", "workdir": ".", "deep": False, "salt": ""}
    index = 0
    while index < len(argv):
        arg = argv[index]
        if arg == "--deep":
            args["deep"] = True
        elif arg in ("--peers", "--workdir", "--salt") and index + 1 < len(argv):
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
