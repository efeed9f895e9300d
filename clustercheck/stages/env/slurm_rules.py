"""What Slurm knows about the allocation's nodes, judged against what env found on them.

A node Slurm lists as drained, down or not responding has a reason an admin wrote (or Slurm
did: "Not responding", "Kill task failed"); a job that lands there fails or waits. A GPU count
in Slurm's GRES that differs from the GPUs the node really has hands out GPUs that are not
there (a GPU fell off the bus) or hides some. Row 35 of docs/failures.md.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from clustercheck.core.inventory import fold
from clustercheck.core.result import Finding, Status
from clustercheck.node.slurm import SlurmView


def judge_slurm(view: SlurmView, names: Sequence[str], gpus: Dict[str, Optional[int]]) -> List[Finding]:
    """names: the run's nodes; gpus: node -> GPUs env counted (None: could not read)."""
    if view.problem:
        return [Finding("slurm.state", Status.UNKNOWN, f"could not ask Slurm about the nodes: {view.problem}", [],
                        "run inside the allocation on a machine with the Slurm client (scontrol) and its slurm.conf",
                        list(names))]
    return state(view, names) + gres(view, names, gpus)


def state(view: SlurmView, names: Sequence[str]) -> List[Finding]:
    unknown = [n for n in names if n not in view.nodes]
    groups: Dict[Tuple[str, str], List[str]] = {}
    noted: Dict[Tuple[str, str], List[str]] = {}
    unread = [n for n in names if n in view.nodes and view.nodes[n].state in ("", "?")]
    for name in names:
        node = view.nodes.get(name)
        if node is not None and node.unfit:
            groups.setdefault(("+".join(node.unfit), node.reason), []).append(name)
        elif node is not None and node.notes:
            noted.setdefault(("+".join(node.notes), node.reason), []).append(name)
    findings = []
    for (flags, reason), nodes in groups.items():
        words = flags.lower().replace("_", " ").replace("+", ", ")
        findings.append(Finding(
            "slurm.state", Status.FAIL, f"Slurm lists {fold(nodes)} as {words}" + (f": {reason}" if reason else ""),
            [f"{n}: State={view.nodes[n].state}" + (f" Reason={reason}" if reason else "") for n in nodes],
            "fix what the reason says, then `scontrol update nodename=NODE state=resume`; until then keep the node "
            "out of the job (sbatch --exclude=NODE)", nodes))
    for (flags, reason), nodes in noted.items():
        findings.append(Finding("slurm.state", Status.WARN, f"Slurm has {flags.lower().replace('_', ' ')} planned on "
                                                            f"{fold(nodes)}" + (f": {reason}" if reason else ""), [],
                                "expect the node to leave service; finish the job before it does", nodes))
    if unknown:
        findings.append(Finding("slurm.state", Status.UNKNOWN, f"Slurm does not know {fold(unknown)}", [],
                                "use the node names Slurm uses (sinfo -N)", unknown))
    if unread:
        findings.append(Finding("slurm.state", Status.UNKNOWN, f"Slurm gave no state for {fold(unread)}", [],
                                "look at `scontrol show node` by hand", unread))
    if not findings:
        states = sorted({view.nodes[n].state for n in names})
        findings.append(Finding("slurm.state", Status.OK, f"Slurm lists all {len(names)} nodes as usable "
                                                           f"({', '.join(states)})"))
    return findings


def gres(view: SlurmView, names: Sequence[str], gpus: Dict[str, Optional[int]]) -> List[Finding]:
    wrong: Dict[Tuple[int, int], List[str]] = {}
    unscheduled: List[str] = []
    compared = []
    for name in names:
        node, found = view.nodes.get(name), gpus.get(name)
        if node is None or found is None:
            continue
        compared.append(name)
        if node.gpus is None:
            if found and "gpu" not in node.fields.get("Gres", ""):
                unscheduled.append(name)
        elif found not in (node.gpus, view.job_gpus) and not (found == 0 and not view.job_gpus):
            # what the job sees: all the node's GPUs, or the job's share of them where devices are
            # constrained; a job that holds none may see none (ConstrainDevices): nothing to compare
            wrong.setdefault((node.gpus, found), []).append(name)
    findings = [Finding("slurm.gres", Status.FAIL, f"Slurm hands out {said} GPU{'s' * (said != 1)} on {fold(nodes)}, "
                                                   f"which {'has' if len(nodes) == 1 else 'have'} {has}",
                        [f"{n}: Gres={view.nodes[n].fields.get('Gres', '')}; env found {has}" for n in nodes],
                        "a GPU missing from the node (fallen off the bus: nvidia-smi, the kernel log) or a wrong "
                        "gres.conf / slurm.conf Gres=: fix it, or drain the node", nodes)
                for (said, has), nodes in wrong.items()]
    if unscheduled:
        findings.append(Finding("slurm.gres", Status.WARN, f"Slurm has no GPU GRES on {fold(unscheduled)}, which "
                                                           f"have GPUs", [], "declare Gres=gpu:N in slurm.conf and "
                                                                             "gres.conf, or jobs asking for --gpus "
                                                                             "never land there", unscheduled))
    if not findings and compared:
        findings.append(Finding("slurm.gres", Status.OK, f"Slurm's GPU counts match the GPUs found on "
                                                         f"{len(compared)} nodes"))
    return findings
