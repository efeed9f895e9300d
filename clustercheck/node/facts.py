"""Facts every stage reads from a node's probe document: packages, GPUs, names, the training interface.

`Probed` is one node's probe; the facts every stage needs are derived once, here, as its
named properties (interface, GPU count, torch, why it cannot launch ranks, missing
packages); judges read those, not paths into the document. Pure: no I/O. A fact the
probe could not collect is None, never a guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Dict, List, Optional, Sequence, Tuple

from clustercheck.core.inventory import Node
from clustercheck.transport.base import NodeResult, Outcome

NOT_INSTALLED = "not installed"
DEFAULT_PYTHON = "python3"


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
    """The GPUs of the document (entries that are not records left out)."""
    return [g for g in get(doc, "gpu", "gpus", default=[]) or [] if isinstance(g, dict)]


def gpu_count(doc: Dict) -> Optional[int]:
    """None when the GPUs could not be read (no section, or nvidia-smi said nothing readable)."""
    if get(doc, "gpu") is None or get(doc, "gpu", "error"):
        return None
    return len(gpus(doc))


def pci_key(bus_id: Optional[str]) -> str:
    """One spelling for a GPU's PCI address: '00000000:3B:00.0' (nvidia-smi, NVML) and
    'PCI:0000:3b:00' (an Xid line) both become '0000:3b:00' (domain:bus:device)."""
    text = (bus_id or "").strip().lower()
    if text.startswith("pci:"):
        text = text[4:]
    parts = text.split(":")
    if len(parts) != 3:
        return text or "?"
    domain, bus, devfn = parts
    return f"{domain[-4:]:0>4}:{bus}:{devfn.split('.')[0]}"


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


# ---- one node's probe, and the facts derived from it once ---------------------------------
def interpreter(node: Node) -> str:
    return node.python or DEFAULT_PYTHON


@dataclass
class Probed:
    """The answer of a node: its probe document (facts), or how it answered and why there is none. The node
    layer makes one from a transport's result (answer_of), the job's ranks and explain from the documents they
    hold: nothing is dressed as a transport's result that never crossed one."""

    node: Node
    facts: Optional[Dict] = None
    problem: str = ""                  # why there are no facts, in words
    outcome: Outcome = Outcome.OK      # how the node answered the transport (OK: it answered, or a document)
    clock_offset_s: Optional[float] = None       # node clock minus this machine's clock
    clock_uncertainty_s: Optional[float] = None  # the offset is known to within this

    @property
    def name(self) -> str:
        return self.node.name

    @cached_property
    def interface(self) -> Tuple[Optional[str], str]:
        """(the training interface, how it was chosen): see training_interface."""
        return training_interface(self.facts or {}, self.node.ifname)

    @property
    def ifname(self) -> Optional[str]:
        return self.interface[0]

    @cached_property
    def gpu_count(self) -> Optional[int]:
        return gpu_count(self.facts) if self.facts is not None else None

    @property
    def torch(self) -> Optional[str]:
        """torch's version for the node's interpreter, or None (not installed, or not probed)."""
        return get(self.facts, "packages", "versions", "torch")

    @property
    def cuda_torch(self) -> bool:
        """GPUs and a CUDA build of torch: ranks run on NCCL here."""
        return bool(self.gpu_count and get(self.facts, "packages", "torch_build", "cuda"))

    @property
    def launch_problem(self) -> str:
        """Why torchrun cannot start ranks on this node ("" when it can)."""
        if self.facts is None:
            return self.problem
        return "" if self.torch else f"torch is not installed for {interpreter(self.node)}"

    def missing(self, wanted: Sequence[str]) -> List[str]:
        """The packages of `wanted` the node's interpreter lacks ([] when not probed: nothing is claimed)."""
        if self.facts is None:
            return []
        return [name for name in wanted if not get(self.facts, "packages", "versions", name)]


# A GPU name of a PCIe or NVL card: published figures for the SXM / OAM part of a model do not hold for it.
NOT_SXM = re.compile(r"PCI-?E|\bNVL\b", re.IGNORECASE)


def sxm_model_word(name: str, words) -> Optional[str]:
    """The first of `words` (longest first) that an SXM GPU's name holds as a whole word ("NVIDIA H100 80GB
    HBM3" -> "H100"); None for PCIe and NVL cards and for names that hold none ("A1000", "V100S")."""
    if not name or NOT_SXM.search(name):
        return None
    return next((w for w in sorted(words, key=len, reverse=True)
                 if re.search(rf"(?<![A-Za-z0-9]){w}(?![A-Za-z0-9])", name)), None)


def answer_of(node: Node, result: NodeResult, facts: Optional[Dict] = None, problem: str = "") -> Probed:
    """A node's answer through the transport: its outcome, and its document where it gave one."""
    return Probed(node, facts=facts, problem=problem, outcome=result.outcome)
