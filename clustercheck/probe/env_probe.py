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
    from .nodelib import _number, collect_env, collect_host, collect_net, emit_json, read, run
except ImportError:  # shipped to a node: inline_command registers nodelib beside this program
    from nodelib import _number, collect_env, collect_host, collect_net, emit_json, read, run

SCHEMA = 1
PACKAGES = ("torch", "deepspeed", "transformers", "accelerate", "numpy", "triton")
WHEEL_PREFIXES = {"nccl": "nvidia-nccl-", "cudnn": "nvidia-cudnn-"}  # nvidia-nccl-cu12, nvidia-cudnn-cu11, ...
XID_RE = re.compile(r"NVRM: Xid \(([^)]*)\): (\d+)")
# NVML clock throttle reason bits (nvml.h, nvmlClocksThrottleReason*)
THROTTLE_BITS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap",
                 0x8: "hw_slowdown", 0x10: "sync_boost", 0x20: "sw_thermal_slowdown",
                 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting"}


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


# ---- NVIDIA GPUs: pynvml when importable, else nvidia-smi -q -x -----------------
def _nvml_field(fields, key, func, *args):
    try:
        fields[key] = func(*args)
    except Exception:  # NVMLError_NotSupported and friends: that field only
        fields.setdefault("unsupported", []).append(key)


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


def gpus_from_nvml():
    import warnings
    with warnings.catch_warnings():  # the pynvml shim warns that nvidia-ml-py replaces it
        warnings.simplefilter("ignore")
        import pynvml
    pynvml.nvmlInit()
    try:
        info = {"source": "pynvml", "driver": _text(pynvml.nvmlSystemGetDriverVersion())}
        try:
            cuda = pynvml.nvmlSystemGetCudaDriverVersion()
            info["cuda_driver"] = "%d.%d" % (cuda // 1000, (cuda % 1000) // 10)
        except Exception:
            info["cuda_driver"] = None
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            gpu = {"index": index}
            _nvml_field(gpu, "name", lambda: _text(pynvml.nvmlDeviceGetName(handle)))
            _nvml_field(gpu, "uuid", lambda: _text(pynvml.nvmlDeviceGetUUID(handle)))
            _nvml_field(gpu, "memory_mib", lambda: pynvml.nvmlDeviceGetMemoryInfo(handle).total // 2 ** 20)
            _nvml_field(gpu, "persistence", lambda: bool(pynvml.nvmlDeviceGetPersistenceMode(handle)))
            _nvml_field(gpu, "ecc_enabled", lambda: bool(pynvml.nvmlDeviceGetEccMode(handle)[0]))
            _nvml_field(gpu, "ecc_uncorrected_volatile", lambda: pynvml.nvmlDeviceGetTotalEccErrors(
                handle, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC))
            _nvml_field(gpu, "ecc_uncorrected_aggregate", lambda: pynvml.nvmlDeviceGetTotalEccErrors(
                handle, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_AGGREGATE_ECC))
            _nvml_field(gpu, "retired_pages_pending", lambda: bool(
                pynvml.nvmlDeviceGetRetiredPagesPendingStatus(handle)))
            _nvml_field(gpu, "remapped_rows", lambda: dict(zip(
                ("correctable", "uncorrectable", "pending", "failure"), pynvml.nvmlDeviceGetRemappedRows(handle))))
            _nvml_field(gpu, "temperature_c", lambda: pynvml.nvmlDeviceGetTemperature(
                handle, pynvml.NVML_TEMPERATURE_GPU))
            _nvml_field(gpu, "throttle", lambda: [name for bit, name in sorted(THROTTLE_BITS.items())
                                                  if pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle) & bit])
            if "remapped_rows" in gpu:
                rows = gpu.pop("remapped_rows")
                gpu["remapped_pending"] = bool(rows["pending"])
                gpu["remap_failure"] = bool(rows["failure"])
                gpu["remapped_uncorrectable"] = rows["uncorrectable"]
            gpus.append(gpu)
        info["gpus"] = gpus
        return info
    finally:
        pynvml.nvmlShutdown()


def _yes(text):
    return (text or "").strip().lower() in ("yes", "enabled", "active", "true")


def parse_nvidia_smi_xml(xml_text):
    """The facts clustercheck judges, from `nvidia-smi -q -x` (any driver since ~450)."""
    import xml.etree.ElementTree as ET
    root = ET.fromstring(xml_text)
    info = {"source": "nvidia-smi", "driver": root.findtext("driver_version"),
            "cuda_driver": root.findtext("cuda_version"), "gpus": []}
    for index, node in enumerate(root.findall("gpu")):
        gpu = {"index": index, "name": node.findtext("product_name"), "uuid": node.findtext("uuid"),
               "pci_bus_id": node.get("id")}
        total = node.findtext("fb_memory_usage/total")
        gpu["memory_mib"] = int(_number(total)) if _number(total) is not None else None
        gpu["persistence"] = _yes(node.findtext("persistence_mode"))
        ecc_mode = node.findtext("ecc_mode/current_ecc")
        gpu["ecc_enabled"] = None if ecc_mode in (None, "N/A") else _yes(ecc_mode)
        for scope in ("volatile", "aggregate"):
            # Ampere and later: dram_uncorrectable, sram_uncorrectable; Pascal/Volta: double_bit/total
            texts = [e.text for e in node.findall("ecc_errors/%s/*" % scope) if e.tag.endswith("uncorrectable")]
            texts.append(node.findtext("ecc_errors/%s/double_bit/total" % scope))
            counts = [int(_number(t)) for t in texts if _number(t) is not None]
            gpu["ecc_uncorrected_" + scope] = sum(counts) if counts else None
        pending = node.findtext("retired_pages/pending_retirement")
        gpu["retired_pages_pending"] = None if pending in (None, "N/A") else _yes(pending)
        remap = node.find("remapped_rows")
        if remap is not None and remap.find("remapped_row_pending") is not None:
            gpu["remapped_pending"] = _yes(remap.findtext("remapped_row_pending"))
            gpu["remap_failure"] = _yes(remap.findtext("remapped_row_failure"))
            unc = _number(remap.findtext("remapped_row_unc"))
            gpu["remapped_uncorrectable"] = int(unc) if unc is not None else None
        temp = _number(node.findtext("temperature/gpu_temp"))
        gpu["temperature_c"] = int(temp) if temp is not None else None
        reasons = node.find("clocks_event_reasons")
        if reasons is None:
            reasons = node.find("clocks_throttle_reasons")
        if reasons is not None:
            gpu["throttle"] = [re.sub(r"^clocks_(event|throttle)_reason_", "", child.tag)
                               for child in reasons if (child.text or "").strip() == "Active"]
        info["gpus"].append(gpu)
    return info


def collect_gpus(args):
    reasons = []
    try:
        return gpus_from_nvml()
    except ImportError:
        reasons.append("pynvml not importable")
    except Exception as exc:
        reasons.append("NVML: %s" % (str(exc) or type(exc).__name__))
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {"source": None, "gpus": [], "driver": None,
                "reason": "no NVIDIA driver (%s; no nvidia-smi on PATH)" % "; ".join(reasons)}
    code, out, err = run([smi, "-q", "-x"])
    if code != 0:
        return {"source": None, "gpus": [], "driver": None,
                "reason": "nvidia-smi failed: %s" % (err.strip() or out.strip() or "exit %s" % code)[:300]}
    return parse_nvidia_smi_xml(out)


def collect_nvcc(args):
    nvcc = shutil.which("nvcc") or next((p for p in ("/usr/local/cuda/bin/nvcc",) if os.path.exists(p)), None)
    if nvcc is None:
        return {"path": None, "version": None}
    code, out, err = run([nvcc, "--version"])
    match = re.search(r"release (\d+\.\d+)", out)
    return {"path": nvcc, "version": match.group(1) if match else None}


# ---- network --------------------------------------------------------------------
def collect_infiniband(sysfs="/sys"):
    base = os.path.join(sysfs, "class/infiniband")
    if not os.path.isdir(base):
        return []
    ports = []
    for device in sorted(os.listdir(base)):
        dev_dir = os.path.join(base, device)
        ports_dir = os.path.join(dev_dir, "ports")
        for port in sorted(os.listdir(ports_dir)) if os.path.isdir(ports_dir) else []:
            port_dir = os.path.join(ports_dir, port)
            state = read(os.path.join(port_dir, "state"), "")
            phys = read(os.path.join(port_dir, "phys_state"), "")
            ports.append({"device": device, "port": int(port) if port.isdigit() else port,
                          "state": state.split(":")[-1].strip() or None,
                          "phys_state": phys.split(":")[-1].strip() or None,
                          "rate": read(os.path.join(port_dir, "rate")),
                          "link_layer": read(os.path.join(port_dir, "link_layer")),
                          "hca_type": read(os.path.join(dev_dir, "hca_type")),
                          "fw_ver": read(os.path.join(dev_dir, "fw_ver"))})
    return ports


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


def collect_tools(args):
    return {"pdsh": shutil.which("pdsh"), "path": os.environ.get("PATH", "")}


def xid_lines(lines):
    events = []
    for line in lines:
        match = XID_RE.search(line)
        if match:
            events.append({"pci": match.group(1), "xid": int(match.group(2)),
                           "line": line.split("NVRM: ", 1)[-1].strip()[:300]})
        elif "fallen off the bus" in line:  # newer drivers may say so without an Xid line
            events.append({"pci": "?", "xid": 79, "line": line.split("NVRM: ", 1)[-1].strip()[:300]})
    return events


def read_kmsg(limit_s=1.0):
    """The kernel ring buffer from /dev/kmsg, read without blocking (needs dmesg rights)."""
    fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    lines = []
    deadline = time.time() + limit_s
    try:
        while time.time() < deadline:
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == 32:  # EPIPE: overwritten while reading; go on
                    continue
                raise
            if not record:
                break
            lines.append(record.decode("utf-8", "replace").split(";", 1)[-1].split("\n")[0])
    finally:
        os.close(fd)
    return lines


def collect_kernel_log(args):
    try:
        lines = read_kmsg()
    except OSError as exc:
        return {"readable": False, "reason": exc.strerror or str(exc), "xid": []}
    return {"readable": True, "xid": xid_lines(lines)[-20:]}


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
            ("storage", collect_storage), ("tools", collect_tools), ("kernel_log", collect_kernel_log),
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
