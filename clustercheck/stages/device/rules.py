"""The judges of `clustercheck device`: pure functions from DeviceFacts to Findings.

A device is judged against its peers (the other devices of its model in the run: its figure
against their median) and, where a published figure exists for its model, against that
(expected.py). The odd device is named with its node, index and PCI address, its figure, the
peers' figure and what its own samples say (throttle reasons, power against the limit, the
PCIe link). Every device multiplies the same seeded inputs: within one model and one build, a
device whose bits differ from the others' computes wrong (FAIL).
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Dict, List, Sequence

from clustercheck.core.compare import median
from clustercheck.core.inventory import fold
from clustercheck.core.result import Finding, Status, run_judges
from clustercheck.stages.device import expected, nvbandwidth
from clustercheck.outputs.dcgm import judge_dcgm
from clustercheck.stages.device.facts import METRICS, UNIT, Device, DeviceFacts

# A device below this share of its peers' median: GPUs of one model differ by 5% and more (ml-engineering),
# a busy shared host's CPUs by far more (the sandbox: 2 cores shared by every node).
SLOW = {"cuda": {Status.FAIL: 0.75, Status.WARN: 0.90}, "cpu": {Status.FAIL: 0.50}}
PEER_PAIR_SLOW = 0.75     # a GPU pair whose copies reach less than this of the same pair on the other nodes


def figure(device: Device, metric: str) -> str:
    _, unit, scale = UNIT[metric]
    return f"{device.figures[metric] * scale:,.1f} {unit}"


def why_slow(device: Device) -> str:
    """What the device's own samples under load say: throttling, power at its cap, clocks, PCIe."""
    said = []
    throttles = sorted({t for s in device.samples for t in s.get("throttle") or [] if t != "gpu_idle"})
    if throttles:
        said.append(", ".join(throttles) + " active")
    powers = [s for s in device.samples if s.get("power_w") and s.get("power_limit_w")]
    if powers:
        peak = max(powers, key=lambda s: s["power_w"])
        said.append(f"{peak['power_w']:.0f} W of {peak['power_limit_w']:.0f} W")
    clocks = [s for s in device.samples if s.get("sm_mhz") and s.get("max_sm_mhz")]
    if clocks:
        top = max(s["sm_mhz"] for s in clocks)
        said.append(f"SM clock at most {top} of {clocks[0]['max_sm_mhz']} MHz")
    link = trained_down(device)
    if link:
        said.append(link)
    return "; ".join(said)


def trained_down(device: Device) -> str:
    """"PCIe Gen4 x8 of Gen5 x16" when the link ran below its maximum under load ("" otherwise). An idle GPU
    trains its link down by design: samples taken while it was idle do not count."""
    links = [s for s in device.samples if s.get("pcie_gen") and s.get("pcie_width")
             and "gpu_idle" not in (s.get("throttle") or [])]
    if not links:
        return ""
    best = max(links, key=lambda s: (s["pcie_gen"], s["pcie_width"]))
    if (best["pcie_gen"], best["pcie_width"]) >= (best.get("pcie_gen_max") or 0, best.get("pcie_width_max") or 0):
        return ""
    return (f"PCIe Gen{best['pcie_gen']} x{best['pcie_width']} of Gen{best.get('pcie_gen_max')} "
            f"x{best.get('pcie_width_max')} under load")


def unmeasured(facts: DeviceFacts) -> List[Finding]:
    found = []
    if facts.problems:
        nodes = list(facts.problems)
        found.append(Finding("device.unmeasured", Status.UNKNOWN, f"could not measure the devices on {fold(nodes)}",
                             [f"{n}: {why}" for n, why in facts.problems.items()],
                             "run clustercheck env on those nodes (torch must import, the GPUs be visible)", nodes))
    for node, doc in facts.documents.items():
        listed, used = doc.get("driver_gpus") or 0, len(doc.get("devices") or [])
        if doc.get("kind") == "cuda" and listed > used:
            found.append(Finding("device.unmeasured", Status.UNKNOWN, f"torch uses {used} of the {listed} GPUs the "
                                                                      f"driver lists on {node}",
                                 [f"{node}: CUDA_VISIBLE_DEVICES={doc.get('visible_devices') or '(unset)'}"],
                                 "measure every GPU: unset CUDA_VISIBLE_DEVICES for the check, or look for a GPU "
                                 "that fell off (clustercheck env: Xid 79)", [node]))
    for node, doc in facts.documents.items():
        why = nvbandwidth.unreadable(doc.get("nvbandwidth") or "")
        if why:
            text = doc["nvbandwidth"]
            found.append(Finding("device.unmeasured", Status.UNKNOWN,
                                 f"nvbandwidth {nvbandwidth.version(text) or '(version not printed)'} on {node}: its "
                                 f"output could not be read ({why})", [l for l in text.splitlines() if l.strip()][:3],
                                 "the probe's own copy figures are used there instead; run nvbandwidth by hand to see "
                                 "what it printed", [node]))
    found += fp8_failed(facts.devices)
    broken = [d for d in facts.devices if d.error]
    if broken:
        found.append(Finding("device.unmeasured", Status.UNKNOWN, f"could not measure {len(broken)} device(s)",
                             [f"{d.label}: {d.error}" for d in broken], "look at that GPU (clustercheck env: Xid, "
                                                                          "ECC)", sorted({d.node for d in broken})))
    return found


def fp8_failed(devices: List[Device]) -> List[Finding]:
    """fp8 that failed on a GPU while its peers (its model, its build) ran it: that GPU is not known good."""
    ran = {(d.model, d.build) for d in devices if "gemm.fp8" in d.figures}
    failed = [d for d in devices if (d.model, d.build) in ran
              and d.not_measured.get("fp8", "").startswith("torch._scaled_mm failed")]
    if not failed:
        return []
    summary = f"fp8 matmul failed on {len(failed)} GPU(s) whose peers ran it"
    evidence = [f"{d.label}: {d.not_measured['fp8']}" for d in failed]
    return [Finding("device.unmeasured", Status.UNKNOWN, summary, evidence, "run the GPU with nothing else on it "
                    "(its memory), then dcgmi diag -r 2", sorted({d.node for d in failed}))]


def against_peers(facts: DeviceFacts) -> List[Finding]:
    findings = []
    devices = [d for d in facts.devices if not d.error]
    for metric, *_ in METRICS:
        by_model: Dict = {}
        for device in devices:
            if metric in device.figures:
                by_model.setdefault(device.model, []).append(device)
        for (kind, name), group in by_model.items():
            findings += _judge_group(metric, kind, name, group)
    return findings


def _judge_group(metric: str, kind: str, name: str, group: List[Device]) -> List[Finding]:
    text, unit, scale = UNIT[metric]
    what = "GPUs" if kind == "cuda" else "nodes"
    if len(group) < 2:
        return []
    odd: Dict[Status, List] = {}
    for device in group:
        peers = [d.figures[metric] for d in group if d is not device]
        share = device.figures[metric] / median(peers) if median(peers) else 1.0
        status = next((s for s, least in sorted(SLOW[kind].items(), key=lambda i: i[1]) if share < least), None)
        if status is not None:
            why = why_slow(device)
            odd.setdefault(status, []).append((device, f"{device.label}: {figure(device, metric)}, {share:.0%} of "
                                                       f"its {len(peers)} peers' {median(peers) * scale:,.1f}"
                                                       + (f"; {why}" if why else "")))
    if not odd:
        middle = median([d.figures[metric] for d in group]) * scale
        return [Finding(f"device.{metric}", Status.OK, f"{text}: {len(group)} {what} ({name}) alike, median "
                                                       f"{middle:,.1f} {unit}")]
    return [Finding(f"device.{metric}", status, f"{text}: {len(found)} of {len(group)} {what} ({name}) slower "
                                                f"than their peers", [line for _, line in found],
                    "look at the named device: throttling (power cap, heat), a PCIe link trained down, a "
                    "neighbour taking its CPU; reseat, cool or replace it, or leave the node out",
                    sorted({d.node for d, _ in found}))
            for status, found in sorted(odd.items(), reverse=True)]


def against_table(facts: DeviceFacts) -> List[Finding]:
    """GPUs far below the published figure of their model (the peers may all be slow alike)."""
    low = []
    for device in facts.devices:
        expected_tflops = expected.bf16_tflops(device.name)
        measured = device.figures.get("gemm.bfloat16")
        if expected_tflops and measured and measured * 1e-12 < expected.GEMM_FLOOR * expected_tflops:
            low.append((device, f"{device.label}: {measured * 1e-12:,.1f} TFLOPS bf16, "
                                f"{measured * 1e-12 / expected_tflops:.0%} of {expected_tflops:g} ({device.name})"))
        floors = expected.host_and_peer_floor(device.name)
        for metric in ("h2d", "d2h"):
            if floors and device.figures.get(metric) and device.figures[metric] * 1e-9 < floors[0]:
                low.append((device, f"{device.label}: {figure(device, metric)} {UNIT[metric][0]}, below "
                                    f"{floors[0]:g} GB/s"))
        row = facts.peers_matrix(device.node)[device.index:device.index + 1] if floors else []
        slow_peers = [j for j, v in enumerate(row[0] if row else []) if v is not None and v * 1e-9 < floors[1]]
        if slow_peers:
            low.append((device, f"{device.label}: copies to GPU {', '.join(map(str, slow_peers))} below "
                                f"{floors[1]:g} GB/s (peer to peer)"))
    if not low:
        return []
    return [Finding("device.expected", Status.WARN, f"{len(low)} figure(s) below the published figure of their model",
                    ["; ".join(filter(None, (line, why_slow(d)))) for d, line in low],
                    "compare with the peers above; a whole cluster below the figure: clocks or power limits set "
                    "low (nvidia-smi -q -d PERFORMANCE,POWER)", sorted({d.node for d, _ in low}))]


def same_bits(facts: DeviceFacts) -> List[Finding]:
    """Devices of one model and one build that multiply the same inputs must return the same bits."""
    groups: Dict = {}
    for device in facts.devices:
        for dtype, digest in device.checksums.items():
            groups.setdefault((device.kind, device.name, device.build, dtype), []).append((device, digest))
    wrong, checked = [], 0
    for (*_, dtype), entries in groups.items():
        if len(entries) < 2:
            continue
        checked += len(entries)
        counts = Counter(digest for _, digest in entries)
        (common, most), = counts.most_common(1)
        tie = list(counts.values()).count(most) > 1
        for device, digest in entries:
            if tie or digest != common:
                wrong.append((device, f"{device.label}: {dtype} result {digest}, "
                                      + ("no majority" if tie else f"{most} of {len(entries)} others {common}")))
    if wrong:
        nodes = sorted({d.node for d, _ in wrong})
        if all("no majority" in line for _, line in wrong):   # two (or an even split): which is wrong is unknown
            return [Finding("device.bits", Status.FAIL, f"devices that should agree compute different bits on "
                                                        f"{fold(nodes)}, and no majority tells which is wrong",
                            [line for _, line in wrong], "run dcgmi diag -r 3 on each, or add a node of the same "
                                                         "model to this run so a majority can tell", [])]
        return [Finding("device.bits", Status.FAIL, f"{len(wrong)} device(s) compute different bits from the same "
                                                    f"inputs (silent data corruption) on {fold(nodes)}",
                        [line for _, line in wrong], "drain that device and run the vendor's diagnostics "
                                                     "(dcgmi diag -r 3); never train on it", nodes)]
    if not checked:
        return []
    return [Finding("device.bits", Status.OK, f"every device computes the same bits as its peers ({checked} results)")]


def links(facts: DeviceFacts) -> List[Finding]:
    """PCIe links below their maximum while the device was loaded; the odd pair of a node's peer copies."""
    lines, nodes = [], []
    for device in facts.devices:
        down = trained_down(device)
        if down:
            lines.append(f"{device.label}: {down}")
            nodes.append(device.node)
    # A pair against the same pair on the other nodes (a PCIe box's pairs across sockets are slower by design,
    # so pairs of one node are not compared with each other); at least two other nodes must have measured it.
    by_pair: Dict = {}
    for node in facts.documents:
        for i, row in enumerate(facts.peers_matrix(node)):
            for j, value in enumerate(row):
                if value is not None and i != j:
                    by_pair.setdefault((i, j), {})[node] = value
    for (i, j), values in sorted(by_pair.items()):
        for node, value in values.items():
            others = [v for n, v in values.items() if n != node]
            middle = median(others)
            if len(others) >= 2 and value < PEER_PAIR_SLOW * middle:
                lines.append(f"{node}: GPU {i} -> GPU {j} copies at {value * 1e-9:,.1f} GB/s, {value / middle:.0%} "
                             f"of the same pair on {len(others)} other nodes ({middle * 1e-9:,.1f})")
                nodes.append(node)
    if not lines:
        return []
    return [Finding("device.links", Status.WARN, f"device links below their best on {fold(sorted(set(nodes)))}",
                    lines, "reseat the GPU or its riser, check the BIOS PCIe settings; a slow GPU pair: the NVLink "
                           "or PCIe switch between them (nvidia-smi topo -m, nvidia-smi nvlink -s)",
                    sorted(set(nodes)))]


def dcgm(facts: DeviceFacts) -> List[Finding]:
    return [f for node, doc in facts.documents.items() for f in judge_dcgm(node, doc.get("dcgm"))]


JUDGES: Sequence[Callable[[DeviceFacts], List[Finding]]] = [unmeasured, against_peers, against_table, same_bits,
                                                            links, dcgm]


def judge_devices(facts: DeviceFacts) -> List[Finding]:
    found = run_judges(JUDGES, facts)
    measured = [d for d in facts.devices if not d.error and d.figures]
    if not measured and not facts.problems:
        found.append(Finding("device.unmeasured", Status.UNKNOWN, "no device was measured", [],
                             "run with -v; torch must import on the nodes"))
    elif measured and not any(f.check != "device.unmeasured" for f in found):
        found.append(Finding("device.measured", Status.OK, f"{len(measured)} device(s) measured (figures above); "
                                                           "none has a peer of its model or a published figure to "
                                                           "be compared with"))
    return found
