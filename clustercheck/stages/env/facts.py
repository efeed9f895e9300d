"""The facts `env` compares across nodes, as short strings, from each node's probe document.

Pure functions: no I/O. A fact that the probe could not collect is left out of the
comparison rather than guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from clustercheck.node.facts import NOT_INSTALLED, Probed, get, gib, gpu_count, gpus, package
from clustercheck.node.slurm import SlurmView


# ---- comparable facts ----------------------------------------------------------------
def _python(doc: Dict) -> Optional[str]:
    return get(doc, "python", "version")


def _torch_cuda(doc: Dict) -> Optional[str]:
    if package(doc, "torch") in (None, NOT_INSTALLED):
        return None
    build = get(doc, "packages", "torch_build", default={}) or {}
    if build.get("cuda"):
        return build["cuda"]
    if build.get("hip"):
        return f"ROCm {build['hip']}"
    return "CPU only" if build else None


def _cuda_driver(doc: Dict) -> Optional[str]:
    """The CUDA version the driver supports. nvidia-smi says "Not Found" (or "N/A" in its table) where it
    finds no CUDA driver library (libcuda): no version, so absent, as a package not installed is."""
    value = get(doc, "gpu", "cuda_driver")
    if isinstance(value, str) and value.strip() in ("Not Found", "N/A", ""):
        return NOT_INSTALLED
    return value


def _gpu_models(doc: Dict) -> Optional[str]:
    if get(doc, "gpu") is None or not gpus(doc):
        return None
    names = sorted({g.get("name") or "?" for g in gpus(doc)})
    return ", ".join(names)


def _gpu_memory(doc: Dict) -> Optional[str]:
    sizes = sorted({g.get("memory_mib") for g in gpus(doc) if g.get("memory_mib")})
    return ", ".join(f"{s} MiB" for s in sizes) or None


def _flag(doc: Dict, key: str) -> Optional[str]:
    values = sorted({"on" if g.get(key) else "off" for g in gpus(doc) if g.get(key) is not None})
    return "/".join(values) or None


def _rdma(link_layer: str) -> Callable[[Dict], Optional[str]]:
    """InfiniBand ports (link layer InfiniBand) or RoCE ports (Ethernet), active of all, with rates."""
    def extract(doc: Dict) -> Optional[str]:
        ports = get(doc, "infiniband")
        if ports is None:
            return None
        ports = [p for p in ports if (p.get("link_layer") == "Ethernet") == (link_layer == "Ethernet")]
        if not ports:
            return "none"
        active = [p for p in ports if p.get("state") == "ACTIVE"]
        rates = sorted({re.sub(r"\s+", " ", p.get("rate") or "?") for p in active})
        return f"{len(active)}/{len(ports)} ports active" + (f", {'; '.join(rates)}" if rates else "")
    return extract


def _hca(key: str) -> Callable[[Dict], Optional[str]]:
    """HCA models, or firmware per model ("MT4123: 20.31.1014"), one string per node."""
    def extract(doc: Dict) -> Optional[str]:
        ports = get(doc, "infiniband")
        if not ports:
            return None
        models = {p.get("device"): (p.get("hca_type") or p.get("board_id") or "?", p.get("fw_ver") or "?")
                  for p in ports}
        if key == "model":
            return ", ".join(sorted({m for m, _ in models.values()}))
        return ", ".join(sorted({f"{m}: {fw}" for m, fw in models.values()}))
    return extract


def _rdma_ports(doc: Dict) -> Optional[str]:
    ports = get(doc, "infiniband")
    if ports is None:
        return None
    ib = sum(1 for p in ports if p.get("link_layer") != "Ethernet")
    return f"{ib} InfiniBand, {len(ports) - ib} RoCE"


def _mig(doc: Dict) -> Optional[str]:
    flags = [g.get("mig_current") for g in gpus(doc) if g.get("mig_current") is not None]
    if not flags:
        return None
    return "on" if all(flags) else "off" if not any(flags) else f"on for {sum(flags)} of {len(flags)} GPUs"


def _limit(doc: Dict, which: str) -> Optional[str]:
    value = get(doc, "limits", which, "soft")
    return None if value is None else str(value)


def _shm(doc: Dict) -> Optional[str]:
    shm = get(doc, "storage", "shm")
    if shm is None:
        return None
    return "missing" if shm.get("missing") else gib(shm.get("total_bytes"))


def _deep(key: str, show: Callable[[Any], str] = str) -> Callable[[Dict], Optional[str]]:
    def extract(doc: Dict) -> Optional[str]:
        deep = get(doc, "deep")
        if deep is None:
            return None
        if key == "torch" and deep.get("torch_error"):
            return "import fails"
        if key == "deepspeed" and deep.get("deepspeed_error"):
            return "import fails"
        value = deep.get(key)
        return None if value is None else show(value)
    return extract


def _library(doc: Dict, which: str) -> Optional[str]:
    """The library file torch would load, its version and where it was found: "2.21.5 (wheel)",
    "2.18.3 (LD_LIBRARY_PATH)"; "none found" where none is."""
    libraries = get(doc, "packages", "libraries")
    if libraries is None:
        return None
    found = libraries.get(which)
    return f"{found.get('version') or found.get('path')} ({found.get('from')})" if found else "none found"


# label -> extractor; the order is the order of the table people read.
COMPARED: List[Tuple[str, Callable[[Dict], Optional[str]]]] = [
    ("python", _python),
    ("interpreter", lambda d: get(d, "python", "executable")),
    ("torch", lambda d: package(d, "torch")),
    ("torch CUDA build", _torch_cuda),
    ("deepspeed", lambda d: package(d, "deepspeed")),
    ("transformers", lambda d: package(d, "transformers")),
    ("accelerate", lambda d: package(d, "accelerate")),
    ("numpy", lambda d: package(d, "numpy")),
    ("triton", lambda d: package(d, "triton")),
    ("NCCL wheel", lambda d: None if get(d, "packages") is None else get(d, "packages", "versions", "nccl_wheel",
                                                                             default="none")),
    ("cuDNN wheel", lambda d: None if get(d, "packages") is None else get(d, "packages", "versions",
                                                                              "cudnn_wheel", default="none")),
    ("libnccl", lambda d: _library(d, "nccl")),
    ("libcudart", lambda d: _library(d, "cudart")),
    ("NVIDIA driver", lambda d: None if get(d, "gpu") is None or get(d, "gpu", "error")
     else get(d, "gpu", "driver", default="none")),
    ("CUDA (driver)", _cuda_driver),
    ("GPUs", lambda d: None if gpu_count(d) is None else str(gpu_count(d))),
    ("GPU model", _gpu_models),
    ("GPU memory", _gpu_memory),
    ("ECC", lambda d: _flag(d, "ecc_enabled")),
    ("persistence mode", lambda d: _flag(d, "persistence")),
    ("nvcc", lambda d: None if get(d, "nvcc") is None else get(d, "nvcc", "version", default="none")),
    ("MIG", _mig),
    ("RDMA ports", _rdma_ports),
    ("InfiniBand", _rdma("InfiniBand")),
    ("RoCE", _rdma("Ethernet")),
    ("HCA model", _hca("model")),
    ("HCA firmware", _hca("firmware")),
    ("OS", lambda d: get(d, "host", "os")),
    ("kernel", lambda d: get(d, "host", "kernel")),
    ("glibc", lambda d: get(d, "host", "glibc")),
    ("CPU model", lambda d: get(d, "host", "cpu_model")),
    ("CPUs", lambda d: None if get(d, "host", "cpu_affinity") is None else str(get(d, "host", "cpu_affinity"))),
    ("memory", lambda d: gib(get(d, "host", "mem_total_bytes"))),
    ("/dev/shm", _shm),
    ("memlock", lambda d: _limit(d, "memlock")),
    ("nofile", lambda d: _limit(d, "nofile")),
    ("pdsh", lambda d: None if get(d, "tools") is None else ("yes" if get(d, "tools", "pdsh") else "no")),
    ("torch (imported)", _deep("torch")),
    ("CUDA available", _deep("cuda_available", lambda v: "yes" if v else "no")),
    ("CUDA devices", _deep("device_count")),
    ("NCCL (loaded)", _deep("nccl")),
    ("deepspeed (imported)", _deep("deepspeed")),
]


def comparable(probed: Probed) -> Dict[str, str]:
    """label -> value for one node; facts the probe could not collect are absent."""
    doc = probed.facts or {}
    values: Dict[str, str] = {}
    for label, extract in COMPARED:
        try:
            value = extract(doc)
        except (TypeError, ValueError, AttributeError):  # a malformed section: unknown, not a crash
            value = None
        if value is not None:
            values[label] = str(value)
    ifname = probed.ifname
    if ifname:
        values["training interface"] = ifname
        facts = get(doc, "net", "interfaces", ifname)
        if facts is None:
            values["training MTU"] = "no such interface"
        else:
            values["training MTU"] = str(facts.get("mtu"))
            if facts.get("speed_mbps"):
                values["link speed"] = f"{facts['speed_mbps']} Mb/s"
    for key, value in (get(doc, "env", default={}) or {}).items():
        values[f"${key}"] = value
    return values


@dataclass
class EnvFacts:
    probed: List[Probed]
    values: Dict[str, Dict[str, str]]   # node -> comparable facts
    shared: Dict[str, Dict[str, str]] = field(default_factory=dict)   # directory -> node -> what it saw
    slurm: Optional[SlurmView] = None   # what Slurm says of the nodes (run inside an allocation)


def env_facts(probed: Sequence[Probed]) -> EnvFacts:
    return EnvFacts(list(probed), {p.name: comparable(p) for p in probed if p.facts is not None})
