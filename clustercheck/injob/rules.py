"""The one judge only the check inside the job has: did every rank of the job arrive at the check and answer
within its budget, and if not, which rank on which host. Pure: the identities and documents the ranks posted
(rendezvous.py), no I/O. Everything else the ranks gathered is judged by the stages' own judges (judge.py).
"""

from __future__ import annotations

from typing import Dict, List

from clustercheck.core.inventory import fold
from clustercheck.core.result import Finding, Status

REMEDY_LOST = ("read that rank's own log (the launcher's output for it) and the node's kernel log (dmesg: the OOM "
               "killer, Xid); `clustercheck node-check` on it; relaunch the job without that node")
REMEDY_NEVER = ("that rank never reached the check: its process did not start or could not reach the rendezvous "
                "(MASTER_ADDR:MASTER_PORT); read the launcher's output on its node")


def ranks_text(ranks: List[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + fold([str(r) for r in sorted(ranks)])


def arrival(world_size: int, who: Dict[int, Dict], answered: Dict[int, Dict], phase_of: Dict[int, str],
            budget_s: float) -> List[Finding]:
    """who: rank -> its identity (posted when it arrived); answered: rank -> its documents (posted at the end);
    phase_of: rank -> the last phase it said it entered."""
    never = [r for r in range(world_size) if r not in who]
    lost = [r for r in range(world_size) if r in who and r not in answered]
    findings = []
    if never:
        findings.append(Finding(
            "injob.arrived", Status.FAIL,
            f"{ranks_text(never)} of {world_size} never arrived at the check within its {budget_s:g} s budget",
            [f"arrived: {ranks_text(sorted(who))}" if who else "no rank arrived"], REMEDY_NEVER, []))
    if lost:
        by_host: Dict[str, List[int]] = {}
        for rank in lost:
            by_host.setdefault(who[rank]["host"], []).append(rank)
        evidence = [f"rank {r} on {who[r]['host']} (local rank {who[r].get('local_rank')}, pid {who[r].get('pid')}): "
                    f"last seen entering {phase_of.get(r, 'the check')}" for r in lost]
        named = "; ".join(f"{ranks_text(ranks)} on {host}" for host, ranks in by_host.items())
        findings.append(Finding(
            "injob.answered", Status.FAIL,
            f"{named} stopped answering during the check (killed, crashed or its node failed); the other ranks "
            f"ended within the {budget_s:g} s budget", evidence, REMEDY_LOST, list(by_host)))
    if not findings:
        hosts = sorted({who[r]["host"] for r in who})
        findings.append(Finding("injob.answered", Status.OK,
                                f"all {world_size} ranks on {len(hosts)} node{'s' * (len(hosts) != 1)} answered "
                                f"within the {budget_s:g} s budget"))
    return findings
