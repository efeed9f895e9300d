"""NVIDIA GPUs as the node sees them: pynvml when importable, else `nvidia-smi -q -x`; and the
GPU topology (`nvidia-smi topo -m`, `nvidia-smi nvlink -s`) as the text nvidia-smi prints.

Standard library only, Python 3.6+; shipped with env_probe.py. What the driver will not
give is recorded as unreadable with the reason, never guessed: a GPU section that could not
be read carries "error", which the judges report as "could not check", never as healthy.
"""

import re
import shutil
import warnings
import xml.etree.ElementTree as ET

try:  # imported as part of the clustercheck package (the tests)
    from .nodelib import _number, run
except ImportError:  # shipped to a node
    from nodelib import _number, run

# NVML clock throttle reason bits (nvml.h, nvmlClocksThrottleReason*)
THROTTLE_BITS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap",
                 0x8: "hw_slowdown", 0x10: "sync_boost", 0x20: "sw_thermal_slowdown",
                 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting"}
TEXT_LIMIT = 64 * 1024   # shipped text: topo -m of 8 GPUs and 10 NICs is ~3 KB, nvlink -s of 8 H100s ~10 KB


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


def _nvml_field(fields, key, func):
    try:
        fields[key] = func()
    except Exception:  # NVMLError_NotSupported and friends: that field only
        fields.setdefault("unreadable", []).append(key)


def _nvml_gpu(pynvml, index):
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    gpu = {"index": index}
    _nvml_field(gpu, "name", lambda: _text(pynvml.nvmlDeviceGetName(handle)))
    _nvml_field(gpu, "uuid", lambda: _text(pynvml.nvmlDeviceGetUUID(handle)))
    _nvml_field(gpu, "pci_bus_id", lambda: _text(pynvml.nvmlDeviceGetPciInfo(handle).busId))
    _nvml_field(gpu, "memory_mib", lambda: pynvml.nvmlDeviceGetMemoryInfo(handle).total // 2 ** 20)
    _nvml_field(gpu, "persistence", lambda: bool(pynvml.nvmlDeviceGetPersistenceMode(handle)))
    _nvml_field(gpu, "ecc_enabled", lambda: bool(pynvml.nvmlDeviceGetEccMode(handle)[0]))
    if gpu.get("ecc_enabled"):
        unc = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        _nvml_field(gpu, "ecc_uncorrected_volatile",
                    lambda: pynvml.nvmlDeviceGetTotalEccErrors(handle, unc, pynvml.NVML_VOLATILE_ECC))
        _nvml_field(gpu, "ecc_uncorrected_aggregate",
                    lambda: pynvml.nvmlDeviceGetTotalEccErrors(handle, unc, pynvml.NVML_AGGREGATE_ECC))
    _nvml_field(gpu, "retired_pages_pending", lambda: bool(pynvml.nvmlDeviceGetRetiredPagesPendingStatus(handle)))
    _nvml_field(gpu, "retired_pages_single_bit", lambda: len(pynvml.nvmlDeviceGetRetiredPages(
        handle, pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)))
    _nvml_field(gpu, "retired_pages_double_bit", lambda: len(pynvml.nvmlDeviceGetRetiredPages(
        handle, pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)))
    _nvml_field(gpu, "remapped_rows", lambda: pynvml.nvmlDeviceGetRemappedRows(handle))
    _nvml_field(gpu, "mig", lambda: pynvml.nvmlDeviceGetMigMode(handle))
    _nvml_field(gpu, "temperature_c", lambda: pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU))
    _nvml_field(gpu, "throttle", lambda: [name for bit, name in sorted(THROTTLE_BITS.items())
                                          if pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle) & bit])
    _nvml_field(gpu, "processes", lambda: _nvml_processes(pynvml, handle))
    if "remapped_rows" in gpu:   # (correctable, uncorrectable, pending, failure)
        corr, unc_rows, pending, failure = gpu.pop("remapped_rows")[:4]
        gpu.update(remapped_correctable=corr, remapped_uncorrectable=unc_rows,
                   remapped_pending=bool(pending), remap_failure=bool(failure))
    if "mig" in gpu:             # (current, pending); 1 is NVML_DEVICE_MIG_ENABLE
        current, pending = gpu.pop("mig")[:2]
        gpu.update(mig_current=current == 1, mig_pending=pending == 1)
    return gpu


def _process_name(pid):
    """A process's command as this node's /proc shows it ("" where its PID is in another namespace)."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()[:200]
    except (OSError, ValueError):
        return ""


def _nvml_processes(pynvml, handle):
    """The compute processes holding the GPU's memory: pid, command, MiB (None where the driver does not say:
    WDDM, some containers)."""
    found = []
    for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
        used = getattr(proc, "usedGpuMemory", None)
        found.append({"pid": proc.pid, "name": _process_name(proc.pid), "type": "C",
                      "used_mib": used // 2 ** 20 if isinstance(used, int) and used < 2 ** 62 else None})
    return found


def gpus_from_nvml():
    with warnings.catch_warnings():  # the pynvml shim warns that nvidia-ml-py replaces it
        warnings.simplefilter("ignore")
        import pynvml   # optional: a node without NVIDIA's bindings is read through nvidia-smi instead
    pynvml.nvmlInit()
    try:
        info = {"source": "pynvml", "driver": _text(pynvml.nvmlSystemGetDriverVersion())}
        try:
            cuda = pynvml.nvmlSystemGetCudaDriverVersion()
            info["cuda_driver"] = "%d.%d" % (cuda // 1000, (cuda % 1000) // 10)
        except Exception:
            info["cuda_driver"] = None
        info["gpus"] = [_nvml_gpu(pynvml, index) for index in range(pynvml.nvmlDeviceGetCount())]
        return info
    finally:
        pynvml.nvmlShutdown()


# ---- nvidia-smi -q -x ------------------------------------------------------------------
def _yes(text):
    return (text or "").strip().lower() in ("yes", "enabled", "active", "true")


def _flag(text):
    """True/False for Yes/No, Enabled/Disabled; None for N/A or absent."""
    text = (text or "").strip()
    return None if text in ("", "N/A") else _yes(text)


def _count(text):
    value = _number(text)
    return int(value) if value is not None else None


def _ecc_counters(scope_node):
    """Every uncorrectable counter directly under volatile/ or aggregate/: DRAM and SRAM on
    Ampere and later (split into SRAM parity and SECDED on newer drivers), double-bit total on
    Pascal/Volta. Breakdowns nested deeper (aggregate_uncorrectable_sram_sources) are parts of
    these, not more errors."""
    counters = {}
    if scope_node is None:
        return counters
    for child in scope_node:
        if len(child) == 0 and "uncorrectable" in child.tag and _count(child.text) is not None:
            counters[child.tag] = _count(child.text)
    total = _count(scope_node.findtext("double_bit/total"))
    if total is not None:
        counters["double_bit"] = total
    if "sram_uncorrectable" in counters and ("sram_uncorrectable_parity" in counters
                                             or "sram_uncorrectable_secded" in counters):
        del counters["sram_uncorrectable"]   # the sum of the two it is split into
    return counters


def _xml_gpu(index, node):
    gpu = {"index": index, "name": node.findtext("product_name"), "uuid": node.findtext("uuid"),
           "pci_bus_id": node.get("id")}
    gpu["memory_mib"] = _count(node.findtext("fb_memory_usage/total"))
    gpu["persistence"] = _yes(node.findtext("persistence_mode"))
    gpu["ecc_enabled"] = _flag(node.findtext("ecc_mode/current_ecc"))
    for scope in ("volatile", "aggregate"):
        counters = _ecc_counters(node.find("ecc_errors/" + scope))
        gpu["ecc_uncorrectable_" + scope] = counters
        gpu["ecc_uncorrected_" + scope] = sum(counters.values()) if counters else None
    retired = node.find("retired_pages")
    if retired is not None:
        pending = retired.findtext("pending_retirement") or retired.findtext("pending_blacklist")
        gpu["retired_pages_pending"] = _flag(pending)
        gpu["retired_pages_single_bit"] = _count(retired.findtext("multiple_single_bit_retirement/retired_count"))
        gpu["retired_pages_double_bit"] = _count(retired.findtext("double_bit_retirement/retired_count"))
    remap = node.find("remapped_rows")
    if remap is not None and remap.find("remapped_row_pending") is not None:
        gpu["remapped_pending"] = _flag(remap.findtext("remapped_row_pending"))
        gpu["remap_failure"] = _flag(remap.findtext("remapped_row_failure"))
        gpu["remapped_correctable"] = _count(remap.findtext("remapped_row_corr"))
        gpu["remapped_uncorrectable"] = _count(remap.findtext("remapped_row_unc"))
    gpu["mig_current"] = _flag(node.findtext("mig_mode/current_mig"))
    gpu["mig_pending"] = _flag(node.findtext("mig_mode/pending_mig"))
    gpu["temperature_c"] = _count(node.findtext("temperature/gpu_temp"))
    processes = node.find("processes")
    if processes is not None:
        gpu["processes"] = [{"pid": _count(info.findtext("pid")), "type": (info.findtext("type") or "").strip(),
                             "name": (info.findtext("process_name") or "").strip(),
                             "used_mib": _count(info.findtext("used_memory"))}
                            for info in processes.findall("process_info")]
    reasons = node.find("clocks_event_reasons")
    if reasons is None:
        reasons = node.find("clocks_throttle_reasons")
    if reasons is not None:
        gpu["throttle"] = [re.sub(r"^clocks_(event|throttle)_reason_", "", child.tag)
                           for child in reasons if (child.text or "").strip() == "Active"]
    return gpu


def parse_compute_apps(csv_text):
    """`nvidia-smi --query-compute-apps=...,pid,process_name,used_gpu_memory --format=csv` (any field order, with
    or without its header's units; a name with commas survives, as the last free column): one dict a process,
    with its GPU's bus id where the query asked for it."""
    lines = [line for line in csv_text.splitlines() if line.strip()]
    if not lines or "pid" not in lines[0]:
        return []
    header = [re.sub(r"\s*\[.*\]$", "", h.strip()) for h in lines[0].split(",")]
    found = []
    for line in lines[1:]:
        cells = [c.strip() for c in line.split(",")]
        if len(cells) > len(header) and "process_name" in header:   # commas inside the name
            at = header.index("process_name")
            extra = len(cells) - len(header)
            cells[at:at + extra + 1] = [", ".join(cells[at:at + extra + 1])]
        row = dict(zip(header, cells))
        found.append({"pid": _count(row.get("pid")), "name": row.get("process_name", ""), "type": "C",
                      "used_mib": _count(row.get("used_gpu_memory", row.get("used_memory"))),
                      "gpu_bus_id": row.get("gpu_bus_id")})
    return found


def parse_nvidia_smi_xml(xml_text):
    """The facts clustercheck judges, from `nvidia-smi -q -x` (any driver since ~450).
    Raises ValueError when the text is not nvidia-smi's XML."""
    try:
        root = ET.fromstring(xml_text)
    except ET.ParseError as exc:
        raise ValueError("not XML (%s): %r" % (exc, xml_text.strip()[:80])) from None
    if root.tag != "nvidia_smi_log":
        raise ValueError("not nvidia-smi's XML (root <%s>)" % root.tag)
    return {"source": "nvidia-smi", "driver": root.findtext("driver_version"),
            "cuda_driver": root.findtext("cuda_version"),
            "gpus": [_xml_gpu(index, node) for index, node in enumerate(root.findall("gpu"))]}


def _smi_text(smi, args, limit=None):
    """(text, None) or (None, why) for an nvidia-smi subcommand; text cut at `limit` characters."""
    code, out, err = run([smi] + args)
    if code != 0:
        return None, "nvidia-smi %s: %s" % (" ".join(args), (err.strip() or out.strip() or "exit %s" % code)[:300])
    return out[:limit], None


def collect_topology(smi):
    """`nvidia-smi topo -m` and `nvidia-smi nvlink -s` as printed; the controller reads them."""
    topology = {}
    for key, args in (("topo_m", ["topo", "-m"]), ("nvlink_s", ["nvlink", "-s"])):
        text, error = _smi_text(smi, args, TEXT_LIMIT)
        topology[key] = text
        if error:
            topology[key + "_error"] = error
    return topology


def collect_gpus(args):
    reasons = []
    info = None
    try:
        info = gpus_from_nvml()
    except ImportError:
        reasons.append("pynvml not importable")
    except Exception as exc:
        reasons.append("NVML: %s" % (str(exc) or type(exc).__name__))
    smi = shutil.which("nvidia-smi")
    if info is None:
        if smi is None:
            return {"source": None, "gpus": [], "driver": None,
                    "reason": "no NVIDIA driver (%s; no nvidia-smi on PATH)" % "; ".join(reasons)}
        text, error = _smi_text(smi, ["-q", "-x"])
        if error and "No devices were found" in error:   # the driver is there, no GPU on this node
            return {"source": "nvidia-smi", "gpus": [], "driver": None, "reason": error}
        if error is None:
            try:
                info = parse_nvidia_smi_xml(text)
            except ValueError as exc:
                error = "nvidia-smi -q -x: %s" % exc
        if error:   # nvidia-smi is there but says nothing readable: could not check, never "no GPUs"
            return {"source": None, "gpus": [], "driver": None, "error": error}
    if smi is not None and info["gpus"]:
        info["topology"] = collect_topology(smi)
    return info
