"""From a probe's raw JSON to the facts people compare across nodes, as short strings.

Pure functions over the probe document: no I/O. A fact that the probe could not
collect is None and is left out of comparisons rather than guessed.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Dict, List, Optional, Tuple

NOT_INSTALLED = "not installed"


def get(doc: Optional[Dict], *path: Any, default: Any = None) -> Any:
    value: Any = doc
    for key in path:
        if isinstance(value, dict):
            value = value.get(key)
        elif isinstance(value, list) and isinstance(key, int) and -len(value) <= key < len(value):
            value = value[key]
        else:
            return default
        if value is None:
            return default
    return value


def gib(num_bytes: Optional[float]) -> Optional[str]:
    if num_bytes is None:
        return None
    value = num_bytes / 2 ** 30
    if value >= 10:
        return f"{value:.0f} GiB"
    return f"{value:.1f} GiB" if value >= 0.1 else f"{num_bytes / 2 ** 20:.0f} MiB"


def gpus(doc: Dict) -> List[Dict]:
    return get(doc, "gpu", "gpus", default=[]) or []


def gpu_count(doc: Dict) -> Optional[int]:
    if get(doc, "gpu") is None:
        return None
    return len(gpus(doc))


def package(doc: Dict, name: str) -> Optional[str]:
    versions = get(doc, "packages", "versions")
    if versions is None:
        return None
    return versions.get(name) or NOT_INSTALLED


def is_loopback(address: str) -> bool:
    return address.startswith("127.") or address == "::1"


# ---- the training interface --------------------------------------------------------
def _plain_ifname(value: Optional[str]) -> Optional[str]:
    """An NCCL/GLOO_SOCKET_IFNAME value naming one interface (not ^exclusions, not lists)."""
    if not value or value.startswith(("^", "=")) or "," in value:
        return None
    return value


def interface_matching(interfaces: Dict[str, Dict], wanted: str) -> Optional[str]:
    """NCCL reads IFNAME as a prefix ("eth" matches eth0) unless it starts with '='."""
    if wanted in interfaces:
        return wanted
    hits = sorted(name for name in interfaces if name.startswith(wanted))
    return hits[0] if hits else None


def training_interface(doc: Dict, inventory_ifname: Optional[str]) -> Tuple[Optional[str], str]:
    """(interface, how it was chosen): the inventory's ifname=, the node's *_SOCKET_IFNAME,
    the route to the other nodes, or the interface holding the node's own address."""
    interfaces = get(doc, "net", "interfaces", default={}) or {}
    if inventory_ifname:
        return inventory_ifname, "ifname= in the nodes file"
    for var in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        wanted = _plain_ifname(get(doc, "env", var))
        if wanted and interface_matching(interfaces, wanted):  # a missing one is reported by its own rule
            return interface_matching(interfaces, wanted), var
    routed = [p.get("ifname") for p in (get(doc, "net", "peers", default={}) or {}).values() if p.get("ifname")]
    routed = [name for name in routed if name != "lo"]
    if routed:
        return max(set(routed), key=routed.count), "route to the other nodes"
    own = set()
    for entry in (get(doc, "host", "resolves", default={}) or {}).values():
        own.update(a for a in entry.get("addresses", []) if not is_loopback(a))
    for name, facts in interfaces.items():
        if any(a.split("/")[0] in own for a in facts.get("ipv4", []) + facts.get("ipv6", [])):
            return name, "address of the node's own name"
    return None, "no route to the other nodes found"


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


def _infiniband(doc: Dict) -> Optional[str]:
    ports = get(doc, "infiniband")
    if ports is None:
        return None
    active = [p for p in ports if p.get("state") == "ACTIVE"]
    if not ports:
        return "none"
    rates = sorted({re.sub(r"\s+", " ", p.get("rate") or "?") for p in active})
    return f"{len(active)}/{len(ports)} ports active" + (f", {'; '.join(rates)}" if rates else "")


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
    ("NVIDIA driver", lambda d: None if get(d, "gpu") is None else get(d, "gpu", "driver", default="none")),
    ("CUDA (driver)", lambda d: get(d, "gpu", "cuda_driver")),
    ("GPUs", lambda d: None if gpu_count(d) is None else str(gpu_count(d))),
    ("GPU model", _gpu_models),
    ("GPU memory", _gpu_memory),
    ("ECC", lambda d: _flag(d, "ecc_enabled")),
    ("persistence mode", lambda d: _flag(d, "persistence")),
    ("nvcc", lambda d: None if get(d, "nvcc") is None else get(d, "nvcc", "version", default="none")),
    ("InfiniBand", _infiniband),
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


def comparable(doc: Dict, inventory_ifname: Optional[str] = None) -> Dict[str, str]:
    """label -> value for one node; facts the probe could not collect are absent."""
    values: Dict[str, str] = {}
    for label, extract in COMPARED:
        try:
            value = extract(doc)
        except (TypeError, ValueError, AttributeError):  # a malformed section: unknown, not a crash
            value = None
        if value is not None:
            values[label] = str(value)
    ifname, _ = training_interface(doc, inventory_ifname)
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
