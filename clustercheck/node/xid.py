"""What each NVIDIA Xid means for a node about to train, from NVIDIA's published Xid catalogue.

Source: NVIDIA, "XID Errors" (https://docs.nvidia.com/deploy/xid-errors/) and its catalogue
(Xid-Catalog.xlsx, https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), as
generated into leptonai/gpud components/accelerator/nvidia/xid/catalog_generated.go at
4a8de33a3f02e207f39e9023d67125592d599731: for each Xid an immediate action and an
investigatory one ("resolution buckets").

The status follows the immediate action: IGNORE with nothing to investigate is OK;
IGNORE with support to call if it repeats is WARN; RESTART_APP is WARN (the GPU is usable,
the job that hit it died); RESET_GPU, RESTART_BM / RESTART_VM (reboot), CONTACT_SUPPORT and
the ECC and NVLink workflows are FAIL: the node is not ready until that is done. Xid 92
(high single-bit ECC rate) is WARN: uncorrectable errors tend to follow. An Xid missing
from the table (the catalogue's unused codes among them) is WARN ("look it up"), never OK.
Xid 154 says which action the driver wants, in its own line: only "to ... (None)" is OK. An Xid 45
(channels cleaned up after another error) whose line names its cause ("caused by previous Xid 149",
as recent drivers print it) is judged as that cause: the NVLink error that killed the job, not the cleanup.
Events before the NVIDIA driver last loaded are not judged (clustercheck/onnode/kernlog.py).
"""

from __future__ import annotations

import re
from typing import List, NamedTuple, Optional, Sequence

from clustercheck.core.result import Status


class Xid(NamedTuple):
    status: Status
    action: str
    meaning: str


IGNORE, RESTART_APP, RESET_GPU, REBOOT = "none", "restart the application", "reset the GPU", "reboot the node"
WATCH = "none now; have the node looked at if it repeats"
SUPPORT, MECHANICALS = "contact support (RMA)", "check the hardware (seating, power, cooling, cables)"
NVLINK = "reset the GPU and check the NVLink (NVIDIA's NVLink5 error workflow)"
OK, WARN, FAIL = Status.OK, Status.WARN, Status.FAIL

CATALOGUE = {
    8: Xid(WARN, RESTART_APP, "GPU stopped processing (a channel timed out)"),
    13: Xid(WARN, RESTART_APP, "graphics engine exception (usually the application's own fault)"),
    31: Xid(WARN, RESTART_APP, "GPU memory page fault (an application's illegal address)"),
    32: Xid(WARN, RESTART_APP, "invalid or corrupted push buffer stream"),
    38: Xid(WARN, WATCH, "driver firmware watchdog"),
    43: Xid(WARN, WATCH, "channel reset after an application fault"),
    44: Xid(WARN, WATCH, "graphics engine fault during a context switch"),
    45: Xid(OK, IGNORE, "preemptive cleanup after an application ended (follows other Xids, judged on their own)"),
    46: Xid(FAIL, RESET_GPU, "GPU stopped processing"),
    48: Xid(FAIL, RESET_GPU, "double-bit ECC error (uncorrectable)"),
    54: Xid(FAIL, MECHANICALS, "auxiliary power is not connected to the GPU"),
    56: Xid(FAIL, SUPPORT, "display engine error (unused on current GPUs)"),
    57: Xid(FAIL, SUPPORT, "error programming video memory interface (unused on current GPUs)"),
    61: Xid(FAIL, SUPPORT, "internal micro-controller breakpoint (unused on current GPUs)"),
    62: Xid(FAIL, RESET_GPU, "internal micro-controller halt"),
    63: Xid(OK, IGNORE, "ECC page retirement or row remapping recorded (the counters say whether a reset is due)"),
    64: Xid(FAIL, RESET_GPU, "ECC page retirement or row remapping failed"),
    60: Xid(FAIL, SUPPORT, "video processor exception (unused on current GPUs)"),
    65: Xid(FAIL, SUPPORT, "NVENC1 error (unused on current GPUs)"),
    68: Xid(WARN, RESTART_APP, "video decoder (NVDEC) exception"),
    69: Xid(WARN, RESTART_APP, "graphics engine class error"),
    73: Xid(FAIL, SUPPORT, "NVENC2 error (unused on current GPUs)"),
    74: Xid(FAIL, MECHANICALS, "NVLink error"),
    79: Xid(FAIL, REBOOT, "GPU has fallen off the bus"),
    80: Xid(WARN, RESTART_APP, "corrupted data sent to the GPU (push buffer CRC mismatch)"),
    81: Xid(FAIL, SUPPORT, "VGA subsystem error (unused on current GPUs)"),
    92: Xid(WARN, WATCH, "high single-bit ECC error rate"),
    94: Xid(WARN, RESTART_APP, "contained ECC error (the application that hit it must restart)"),
    95: Xid(FAIL, RESET_GPU, "uncontained ECC error"),
    106: Xid(OK, IGNORE, "SMBPBI test message"),
    107: Xid(OK, IGNORE, "SMBPBI test message, silent"),
    109: Xid(FAIL, RESET_GPU, "context switch timeout"),
    110: Xid(FAIL, RESET_GPU, "security fault"),
    119: Xid(FAIL, RESET_GPU, "GSP RPC timeout"),
    120: Xid(FAIL, RESET_GPU, "GSP error"),
    121: Xid(WARN, WATCH, "C2C link error"),
    122: Xid(FAIL, SUPPORT, "SPI PMU RPC read failure (unused on current GPUs)"),
    123: Xid(FAIL, SUPPORT, "SPI PMU RPC write failure (unused on current GPUs)"),
    136: Xid(FAIL, RESET_GPU, "link training failed"),
    140: Xid(FAIL, RESET_GPU, "ECC unrecovered error (an ECC escape)"),
    142: Xid(FAIL, SUPPORT, "NVENC3 error"),
    143: Xid(FAIL, RESET_GPU, "GPU initialization failure"),
    144: Xid(FAIL, NVLINK, "NVLink SAW error"),
    145: Xid(FAIL, NVLINK, "NVLink RLW error"),
    146: Xid(FAIL, NVLINK, "NVLink TLW error"),
    147: Xid(FAIL, NVLINK, "NVLink TREX error"),
    148: Xid(FAIL, NVLINK, "NVLink NVLPW_CTRL error"),
    149: Xid(FAIL, NVLINK, "NVLink NETIR error"),
    150: Xid(FAIL, NVLINK, "NVLink MSE error"),
    151: Xid(FAIL, REBOOT, "key rotation error"),
    154: Xid(FAIL, "what the line says (reset the GPU, reboot, or drain)", "GPU recovery action changed"),
    155: Xid(FAIL, RESET_GPU, "NVLink link down, by software"),
    156: Xid(FAIL, RESET_GPU, "resource retirement event"),
    157: Xid(WARN, WATCH, "resource retirement failure"),
    158: Xid(FAIL, RESET_GPU, "GPU fatal timeout"),
}
# The memory family: reported in one finding with the GPU's ECC, retirement and remapping
# counters. Where the counters were read they say whether the incident still stands, so these
# are history (at most WARN; Xid 63 stays OK, as the catalogue has it). A remap failure (64) and
# an ECC escape (140) fail whatever the counters say: the counters need not show them.
MEMORY_XIDS = frozenset({48, 63, 64, 92, 94, 95, 140})
COUNTED_XIDS = frozenset({48, 63, 92, 94, 95})


PREEMPTIVE_CLEANUP = 45
CAUSED_BY = re.compile(r"caused by previous Xid (\d+)")   # as the driver prints it (and onnode/kernlog.py reads it)


def causes_of(xid: int, causes: Sequence[int] = (), line: str = "") -> List[int]:
    """The Xids an Xid 45 names as its cause, from the probe's list and from its line; none for other Xids."""
    if xid != PREEMPTIVE_CLEANUP:
        return []
    named = {c for c in causes if isinstance(c, int)} | {int(n) for n in CAUSED_BY.findall(line or "")}
    return sorted(named - {PREEMPTIVE_CLEANUP})


def lookup(xid: int, causes: Sequence[int] = ()) -> Xid:
    """The catalogue's entry; an Xid 45 with causes takes the worst cause's action, and names them all."""
    entry = CATALOGUE.get(xid) or Xid(WARN, "look it up in NVIDIA's Xid catalogue", "not in clustercheck's table")
    named = causes_of(xid, causes)
    if not named:
        return entry
    worst = max(named, key=lambda cause: lookup(cause).status)
    because = ", ".join(f"Xid {cause} ({lookup(cause).meaning})" for cause in named)
    return Xid(lookup(worst).status, lookup(worst).action, f"{entry.meaning.split(' (')[0]}, caused by {because}")


def status_of(xid: int, counters_read: Optional[bool] = None, line: str = "", causes: Sequence[int] = ()) -> Status:
    """An Xid the memory counters also record is history on a GPU whose counters were read (at
    most WARN); where they could not be read, the catalogue decides, at least WARN. Otherwise
    the catalogue decides. An Xid 45 is judged as the Xids it names as its cause."""
    named = causes_of(xid, causes, line)
    if named:
        return max(status_of(cause, counters_read) for cause in named)
    entry = lookup(xid)
    if xid == 154 and re.search(r"\bto 0x0+ \(None\)", line or ""):
        return Status.OK
    if xid in COUNTED_XIDS:
        return min(entry.status, Status.WARN) if counters_read else max(entry.status, Status.WARN)
    return entry.status
