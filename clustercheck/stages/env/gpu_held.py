"""GPUs held by someone else before the run: processes that hold GPU memory (NVML's running compute processes,
else `nvidia-smi -q -x`'s <processes>), named with node, GPU, pid, command and memory. A leftover of an earlier
job is a common cause of an out-of-memory at start: FAIL above `gpu_held_fail_share` of the GPU's memory (by
all its processes together), WARN below and where the driver does not say how much (WDDM, some containers).
Pure: no I/O."""

from __future__ import annotations

from typing import List, Tuple

from clustercheck.core.inventory import fold
from clustercheck.core.result import Finding, Status
from clustercheck.node.facts import gpus
from clustercheck.stages.env.rules import EnvContext


def held(ctx: EnvContext) -> List[Finding]:
    share = ctx.limits.gpu_held_fail_share
    heavy: List[Tuple[str, str]] = []      # (node, evidence line)
    light: List[Tuple[str, str]] = []
    listed = 0
    for p in ctx.ok:
        for gpu in gpus(p.facts) or []:
            processes = gpu.get("processes")
            if processes is None:
                continue
            listed += 1
            if not processes:
                continue
            total = gpu.get("memory_mib")
            known = [proc.get("used_mib") for proc in processes if isinstance(proc.get("used_mib"), int)]
            held_mib = sum(known)
            shown = "; ".join(f"pid {proc.get('pid')} {proc.get('name') or '(command not visible here)'} "
                              f"({proc.get('type') or '?'}): "
                              + (f"{proc['used_mib']:,} MiB" if isinstance(proc.get("used_mib"), int) else
                                 "memory not reported") for proc in processes[:4])
            more = f" and {len(processes) - 4} more" if len(processes) > 4 else ""
            line = (f"{p.name} GPU {gpu.get('index')}: {len(processes)} process(es) hold "
                    + (f"{held_mib:,} MiB of {total:,} MiB" if total else f"{held_mib:,} MiB") + f": {shown}{more}")
            (heavy if total and held_mib > share * total else light).append((p.name, line))
    findings = []
    for status, found, what in ((Status.FAIL, heavy, f"more than {share:.0%} of their memory"),
                                (Status.WARN, light, "some memory")):
        if found:
            nodes = sorted({n for n, _ in found}, key=ctx.order.index)
            findings.append(Finding("gpu.held", status, f"GPUs on {fold(nodes)} are held by other processes "
                                                        f"({what}) before the run",
                                    [line for _, line in found][:16],
                                    "end them (a leftover of an earlier job: kill the pid, or drain the node if it "
                                    "will not die); a job started beside them runs out of memory", nodes))
    if not findings and listed:
        findings.append(Finding("gpu.held", Status.OK, f"no process holds memory on the {listed} GPU(s) whose "
                                                       f"processes were listed"))
    return findings
