"""GPU health, judged per GPU (a judge below the stages: env, node-check and explain call it): memory faults
(ECC counters, retired pages, remapped rows and the Xids that report them), other Xids by NVIDIA's catalogue,
MIG, heat; and what could not be read.

One finding per GPU fault, naming the node, the GPU's index and its PCI address, so a
person can drain the node and file the ticket. Rows 23, 25 and 28 of docs/failures.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from clustercheck.core.inventory import fold
from clustercheck.core.result import Finding, Status
from clustercheck.core.thresholds import EnvThresholds
from clustercheck.node.facts import Probed, get, gpus, pci_key
from clustercheck.node.xid import MEMORY_XIDS, lookup, status_of

HW_THROTTLE = {"hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown"}
# NVIDIA's page retirement limits: a GPU with 60 pages retired for double-bit errors, or 64 in
# all, is due for replacement (https://docs.nvidia.com/deploy/dynamic-page-retirement/).
RETIRED_DBE_LIMIT, RETIRED_TOTAL_LIMIT = 60, 64
REMEDIES = {
    "memory": "drain the node; reset the GPU (nvidia-smi -r -i INDEX, or reboot) so pending retirements and "
              "remaps take effect; a remap failure, an ECC error that comes back or the retirement limit "
              "means replacing the GPU (nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER)",
    "xid": "act as NVIDIA's Xid catalogue says for it (https://docs.nvidia.com/deploy/xid-errors/) and drain "
           "the node until then; clustercheck judges the events since the NVIDIA driver last loaded, so after "
           "a fix reboot (or reload the driver) for the event to leave the verdict",
    "mig": "turn MIG off for training: sudo nvidia-smi -i INDEX -mig 0, then reset the GPU (nvidia-smi -r) or "
           "reboot; a process sees one MIG slice, and NCCL's MIG support is experimental and without P2P",
    "heat": "check cooling and power capping (nvidia-smi -q -d PERFORMANCE,TEMPERATURE)",
}


@dataclass
class GpuFacts:
    """What the GPU judges read: the nodes whose probe document came back, and the thresholds. env's context
    is one; explain builds one around a recorded nvidia-smi output or kernel log."""
    ok: List[Probed]
    limits: EnvThresholds


@dataclass
class GpuReport:
    """What is wrong with one GPU, by kind: (status, texts)."""
    label: str                        # "GPU 3 (0000:3b:00)"
    index: str = "INDEX"              # for the remedy's commands; a GPU the driver does not list has none
    faults: Dict[str, Tuple[Status, List[str]]] = field(default_factory=dict)

    def add(self, kind: str, status: Status, text: str) -> None:
        worst, texts = self.faults.get(kind, (Status.OK, []))
        self.faults[kind] = (max(worst, status), texts + [text])


def _report(gpu: Optional[Dict], pci: str) -> GpuReport:
    if gpu is None:
        return GpuReport(f"GPU at {pci} (not listed by the driver)")
    return GpuReport(f"GPU {gpu.get('index')} ({pci})", str(gpu.get("index")))


def counters_read(gpu: Dict) -> bool:
    return any(gpu.get(k) is not None for k in ("ecc_uncorrected_volatile", "remapped_pending",
                                                 "retired_pages_pending"))


def _memory(report: GpuReport, gpu: Dict) -> None:
    volatile, lifetime = gpu.get("ecc_uncorrected_volatile"), gpu.get("ecc_uncorrected_aggregate")
    parts = ", ".join(f"{k} {v}" for k, v in (gpu.get("ecc_uncorrectable_volatile") or {}).items() if v)
    if volatile:
        report.add("memory", Status.FAIL, f"{volatile} uncorrectable ECC errors since the driver loaded"
                   + (f" ({parts})" if parts else ""))
    elif lifetime:
        report.add("memory", Status.WARN, f"{lifetime} uncorrectable ECC errors in the GPU's lifetime, none "
                                          "since the driver loaded")
    if gpu.get("ecc_enabled") and volatile is None and lifetime is None:
        report.add("memory", Status.UNKNOWN, "ECC is on but its error counters could not be read")
    if gpu.get("remap_failure"):
        report.add("memory", Status.FAIL, "row remapping failed (no spare rows left)")
    if gpu.get("remapped_pending"):
        report.add("memory", Status.FAIL, "a row remap is pending: it takes effect at the next GPU reset")
    if gpu.get("retired_pages_pending"):
        report.add("memory", Status.FAIL, "a page retirement is pending: it takes effect at the next GPU reset")
    dbe, sbe = gpu.get("retired_pages_double_bit") or 0, gpu.get("retired_pages_single_bit") or 0
    if dbe >= RETIRED_DBE_LIMIT or dbe + sbe >= RETIRED_TOTAL_LIMIT:
        report.add("memory", Status.FAIL, f"{dbe + sbe} pages retired ({dbe} for double-bit errors): at NVIDIA's "
                                          "replacement limit")
    elif dbe + sbe:
        report.add("memory", Status.WARN, f"{dbe + sbe} pages retired ({dbe} double-bit, {sbe} single-bit)")


def _when(event: Dict) -> str:
    """' (first .. last)' as the log wrote them; nothing where the lines carry no time."""
    first, last = event.get("first"), event.get("last")
    if (event.get("count") or 1) > 1 and last and last != first:
        return f" ({first or '?'} .. {last})"
    return f" ({first or last})" if first or last else ""


def _xid_text(event: Dict, source: str) -> str:
    entry = lookup(event["xid"], event.get("causes") or [])
    return (f"Xid {event['xid']} x{event.get('count') or 1}{_when(event)}: {entry.meaning}; action: {entry.action}. "
            f"Last: {event.get('line')} [{source}]")


def _xids(reports: Dict[str, GpuReport], by_pci: Dict[str, Dict], events: List[Dict], source: str) -> None:
    for event in events:
        if not isinstance(event, dict) or not isinstance(event.get("xid"), int):
            continue
        pci = pci_key(event.get("pci"))
        gpu = by_pci.get(pci)
        report = reports.setdefault(pci, _report(gpu, pci))
        xid = event["xid"]
        status = status_of(xid, counters_read(gpu) if gpu is not None else None, event.get("line", ""),
                           event.get("causes") or [])
        if status is Status.OK and not (xid in MEMORY_XIDS and "memory" in report.faults):
            continue   # an Xid nothing needs doing for, unless it tells the story of a memory fault
        report.add("memory" if xid in MEMORY_XIDS else "xid", status, _xid_text(event, source))


def _not_kept(reports: Dict[str, GpuReport], not_kept, source: str) -> None:
    """Events past the probe's cap of distinct (Xid, GPU) pairs, kept by Xid alone: judged by the catalogue
    (their GPU is in their message); an older probe's bare count is said, not judged."""
    report = GpuReport("GPU named in the line (past the probe's cap of distinct Xid and GPU pairs)")
    if isinstance(not_kept, int) and not_kept > 0:
        report.add("xid", Status.UNKNOWN, f"{not_kept} more Xid events were counted but not kept")
    for event in not_kept if isinstance(not_kept, list) else []:
        if isinstance(event, dict) and isinstance(event.get("xid"), int):
            status = status_of(event["xid"], None, event.get("line", ""), event.get("causes") or [])
            if status is not Status.OK:
                report.add("xid", status, _xid_text(event, source))
    if report.faults:
        reports["beyond"] = report


def gpu_reports(doc: Dict, temp_warn_c: float) -> Dict[str, GpuReport]:
    """pci -> what is wrong with that GPU; GPUs with nothing wrong are absent."""
    reports: Dict[str, GpuReport] = {}
    by_pci = {}
    for gpu in gpus(doc):
        pci = pci_key(gpu.get("pci_bus_id")) if gpu.get("pci_bus_id") else f"index {gpu.get('index')}"
        by_pci[pci] = gpu
        report = _report(gpu, pci)
        _memory(report, gpu)
        if gpu.get("mig_current"):
            report.add("mig", Status.FAIL, "MIG mode is on" + ("" if gpu.get("mig_pending") is not False
                                                                 else " (off after the next GPU reset)"))
        elif gpu.get("mig_pending"):
            report.add("mig", Status.WARN, "MIG mode turns on at the next GPU reset")
        if (gpu.get("temperature_c") or 0) >= temp_warn_c:
            report.add("heat", Status.WARN, f"{gpu['temperature_c']} C")
        throttled = sorted(HW_THROTTLE.intersection(gpu.get("throttle") or []))
        if throttled:
            report.add("heat", Status.WARN, f"clocks held down ({', '.join(throttled)})")
        reports[pci] = report
    log = get(doc, "kernel_log") or {}
    _xids(reports, by_pci, log.get("xid") or [], log.get("source") or "kernel log")
    _not_kept(reports, log.get("xid_not_kept"), log.get("source") or "kernel log")
    return {pci: r for pci, r in reports.items() if r.faults}


def gpu_health(ctx: GpuFacts) -> List[Finding]:
    """Rows 23 and 25: one finding per GPU fault, with the GPU's index and PCI address."""
    findings = []
    for p in ctx.ok:
        for report in gpu_reports(p.facts, ctx.limits.gpu_temp_warn_c).values():
            for kind, (status, texts) in report.faults.items():
                findings.append(Finding(f"gpu.{kind}", status, f"{p.name} {report.label}: {texts[0]}",
                                        [f"{p.name} {report.label}: {t}" for t in texts],
                                        REMEDIES[kind].replace("INDEX", report.index), [p.name]))
    with_gpus = [p for p in ctx.ok if gpus(p.facts)]
    if with_gpus and not any(f.status is not Status.OK for f in findings):
        findings.append(Finding("gpu.health", Status.OK, _healthy(with_gpus), _seen(with_gpus)))
    return findings


def _healthy(nodes: List) -> str:
    """The OK line: only what was read. ECC and MIG where the driver reports them."""
    every = [g for p in nodes for g in gpus(p.facts)]
    ecc = [g for g in every if g.get("ecc_uncorrected_volatile") is not None
           or g.get("ecc_uncorrected_aggregate") is not None]
    spared = [g for g in every if g.get("remapped_pending") is not None or g.get("retired_pages_pending") is not None]
    mig = [g for g in every if g.get("mig_current") is not None]
    parts = [f"{len(every)} GPUs on {fold([p.name for p in nodes])}"]
    if ecc:
        parts.append(f"no uncorrectable ECC errors on the {len(ecc)} with ECC counters")
    if spared:
        parts.append(f"no pending or failed row remaps or page retirements on the {len(spared)} that report them")
    if mig:
        parts.append(f"MIG off on the {len(mig)} that have it")
    parts.append("no hardware throttling or overheating")
    seen = [p for p in nodes if get(p.facts, "kernel_log", "readable")]
    if seen:
        parts.append(f"no Xid events that need action in the kernel log of {fold([p.name for p in seen])}")
    return "; ".join(parts)


def _seen(nodes: List) -> List[str]:
    """What the OK line rests on, per node: the GPUs without ECC, and from when the kernel log was read."""
    lines = []
    for p in nodes:
        no_ecc = [str(g.get("index")) for g in gpus(p.facts) if g.get("ecc_enabled") is False]
        if no_ecc:
            lines.append(f"{p.name}: ECC off or not supported on GPU {', '.join(no_ecc)}")
        log = get(p.facts, "kernel_log") or {}
        if log.get("readable") and log.get("from"):
            lines.append(f"{p.name}: the kernel log ({log.get('source')}) reaches back only to {log['from']}")
    return lines


def unchecked(ctx: GpuFacts) -> List[Finding]:
    """What could not be read is said, per what and why: never an OK that claims more than was seen."""
    groups: Dict[Tuple[str, str], List[str]] = {}
    for p in ctx.ok:
        for section, why in (get(p.facts, "missing", default={}) or {}).items():
            groups.setdefault((section, f"the probe's {section} section failed: {why}"), []).append(p.name)
        if get(p.facts, "gpu", "error"):
            groups.setdefault(("the GPUs", get(p.facts, "gpu", "error")), []).append(p.name)
        log = get(p.facts, "kernel_log")
        if gpus(p.facts) and log is not None and not log.get("readable"):
            groups.setdefault(("Xid events", f"no kernel log could be read ({log.get('reason')})"), []).append(p.name)
        topology = get(p.facts, "gpu", "topology") or {}
        for key in ("topo_m_error", "nvlink_s_error"):
            if topology.get(key):
                groups.setdefault(("the GPU topology", topology[key]), []).append(p.name)
    remedies = {"Xid events": "give the user that runs clustercheck read access to the kernel log (group adm or "
                              "systemd-journal, or sysctl kernel.dmesg_restrict=0), or run it as root",
                "the GPUs": "run nvidia-smi -q -x on the node and repair the driver (a mismatched kernel module "
                            "or a hung GPU prints errors instead of XML)"}
    return [Finding(f"unchecked.{what.replace('the ', '').replace(' ', '_')}", Status.UNKNOWN,
                    f"could not check {what} on {fold(nodes)}: {why}", [f"{fold(nodes)}: {why}"],
                    remedies.get(what, "rerun with -v and look at the node's probe document (--json)"), nodes)
            for (what, why), nodes in groups.items()]
