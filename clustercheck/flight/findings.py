"""The judgement of a job's Flight Recorder dumps as findings with their remedies, and as one JSON document."""

from __future__ import annotations

import gc
from typing import Dict, List, Optional, Tuple

from clustercheck.core.result import Finding, Status, note
from clustercheck.flight.judge import (Incomplete, Mismatch, build_groups, call_site, current, fold_ranks,
                                       incomplete, mismatches, op_name, state_of)
from clustercheck.flight.read import FlightRead, RankDump
from clustercheck.vocabulary.kinds import KINDS

REMEDIES = {
    "missing": "the ranks named never called this collective: look at what they did instead (their own log's last "
               "lines, their stack: py-spy dump, `clustercheck stacks`): a data loader or a storage read stuck, a "
               "branch only some ranks take (an `if rank == 0:` around a collective, an early exit, uneven batches "
               "at an epoch's end), an exception swallowed on that rank",
    "mismatch": KINDS["desync"].remedy,      # what explain says of Gloo's and torch's own words for it
    "order": "each of these ranks waits in a collective the others never entered: they call the groups' "
             "collectives in different orders; every rank must issue the collectives of each group in one order",
    "stuck": "every rank entered this collective and none finished: not a rank that stopped but the collective "
             "itself: the network between these ranks (clustercheck net, bench), NCCL's own lines "
             "(NCCL_DEBUG=INFO), a GPU that fell off (dmesg: Xid)",
    "unreadable": "give the dumps as torch wrote them (TORCH_FR_DUMP_TEMP_FILE, one file per rank, whole), one "
                  "job's in one directory, from a torch whose recorder version clustercheck reads",
}


def _where(dump: RankDump) -> str:
    entry = current(dump)
    if entry is None:
        last = dump.last
        after = f" after {op_name(last)} #{last['collective_seq_id']} of {last['process_group'][1]}" if last else ""
        site = call_site(last) if last else ""
        return f"rank {dump.rank}: in no collective{after}{f' (called at {site})' if site else ''}"
    pg_name, desc = entry["process_group"]
    site = call_site(entry)
    return (f"rank {dump.rank}: waits in {op_name(entry)} #{entry['collective_seq_id']} of {desc or pg_name} "
            f"({state_of(entry)}){f' at {site}' if site else ''}")


def _incomplete_doc(gap: Incomplete) -> Dict:
    return {"group": gap.group.key[1] or gap.group.key[0], "pg": gap.group.key[0], "seq": gap.seq, "op": gap.op,
            "members": sorted(gap.group.members), "members_inferred": gap.group.inferred,
            "ranks_missing": gap.missing, "ranks_waiting": gap.entered, "ranks_without_dump": gap.no_dump}


def _missing_findings(gaps: List[Incomplete], dumps: Dict[int, RankDump], hosts: Optional[Dict[int, str]] = None
                      ) -> Tuple[List[Finding], List[int]]:
    stopped = sorted({r for g in gaps for r in g.missing if current(dumps[r]) is None})
    if not gaps:
        return [], []
    lines = [f"{g.op} #{g.seq} of {g.group.label}: rank(s) {fold_ranks(g.missing)} never entered it, "
             f"{fold_ranks(g.entered)} wait in it" + (f"; no dump from {fold_ranks(g.no_dump)}" if g.no_dump else "")
             for g in gaps]
    lines += [_where(dumps[r]) for r in sorted(dumps)][:64]
    if any(g.group.inferred for g in gaps):
        lines.append("the dumps carry no group membership (Gloo fills no pg_config): a group's members are the "
                     "ranks that recorded any collective in it")
    if not hosts:
        lines.append("the dumps name no host (torch writes none): match the ranks with the launcher's log")
    if not stopped:
        ranks = sorted({r for g in gaps for r in g.missing})
        return [Finding("flight.order", Status.FAIL, f"rank(s) {fold_ranks(ranks)} each wait in a collective the "
                        f"others never entered: {len(gaps)} groups' collectives called in different orders",
                        lines, REMEDIES["order"])], []
    # the collective whose missing ranks all stopped outside any collective is where the hang began; a gap whose
    # missing ranks wait in another group's collective is its consequence, whichever was created first (the ranks
    # left after the last collective both had race to their next: creation times do not order them)
    first = next((g for g in gaps if set(g.missing) <= set(stopped)), None) or \
        next(g for g in gaps if set(g.missing) & set(stopped))
    culprits = [r for r in first.missing if r in stopped]
    nodes = sorted({hosts[r] for r in culprits if r in hosts}) if hosts else []
    waiting = f"; {fold_ranks(first.entered)} wait in it" if first.entered else ""
    summary = (f"rank(s) {fold_ranks(culprits)}{' on ' + ', '.join(nodes) if nodes else ''} never entered {first.op} "
               f"#{first.seq} of {first.group.label}{waiting}; stopped outside any collective")
    return [Finding("flight.missing", Status.FAIL, summary, lines, REMEDIES["missing"], nodes)], stopped


def _mismatch_finding(bad: Mismatch) -> Finding:
    (_, majority, base), odd = bad.by_sig[0], bad.by_sig[1:]
    def said(entry):
        return (f"{op_name(entry)} in {entry['input_sizes']} {'/'.join(entry['input_dtypes']) or '-'} "
                f"out {entry['output_sizes']}")
    odd_ranks = sorted(r for _, ranks, _ in odd for r in ranks)
    lines = [f"rank(s) {fold_ranks(ranks)}: {said(entry)}" + (f" at {call_site(entry)}" if call_site(entry) else "")
             for _, ranks, entry in bad.by_sig]
    if bad.later:
        lines.append(f"{bad.later} later sequence number(s) of this group differ too (after a desync, all do)")
    return Finding("flight.mismatch", Status.FAIL,
                   f"rank(s) {fold_ranks(odd_ranks)} called {op_name(odd[0][2])} #{bad.seq} of {bad.group.label} "
                   f"with other sizes or dtypes than rank(s) {fold_ranks(majority)}: {said(odd[0][2])} against "
                   f"{said(base)}", lines, REMEDIES["mismatch"])


def _mismatch_doc(bad: Mismatch) -> Dict:
    return {"group": bad.group.key[1] or bad.group.key[0], "pg": bad.group.key[0], "seq": bad.seq,
            "calls": [{"ranks": ranks, "op": op_name(e), "input_sizes": e["input_sizes"],
                       "output_sizes": e["output_sizes"], "input_dtypes": e["input_dtypes"],
                       "output_dtypes": e["output_dtypes"], "at": call_site(e)} for _, ranks, e in bad.by_sig]}


def _unreadable(read: FlightRead) -> List[Finding]:
    bad = read.unreadable + read.other_job
    if not bad:
        return []
    return [Finding("flight.unreadable", Status.UNKNOWN, f"{len(bad)} Flight Recorder file(s) cannot be judged "
                    f"with the others: {bad[0][0]}: {bad[0][1]}", [f"{path}: {why}" for path, why in bad[:20]],
                    REMEDIES["unreadable"])]


def judge(read: FlightRead, hosts: Optional[Dict[int, str]] = None) -> Tuple[Dict, List[Finding]]:
    """The dumps' document (explain's "flight_recorder") and findings; `hosts` (rank -> node), where known (live
    ranks asked by `clustercheck stacks`), names the nodes of the ranks found."""
    enabled = gc.isenabled()
    gc.disable()        # millions of entries, no cycle among them: the collector would only walk them again
    try:
        return _judge(read, hosts)
    finally:
        if enabled:
            gc.enable()


def _judge(read: FlightRead, hosts: Optional[Dict[int, str]]) -> Tuple[Dict, List[Finding]]:
    dumps = {d.rank: d for d in read.dumps}
    findings = _unreadable(read) + [note("flight.note", line) for line in read.notes[:5]]
    doc: Dict = {"dumps": len(dumps), "ranks": sorted(dumps), "forms": sorted({d.form for d in dumps.values()}),
                 "versions": sorted({d.version for d in dumps.values()}), "unreadable": [
                     {"file": path, "why": why} for path, why in read.unreadable + read.other_job],
                 "groups": [], "missing": [], "mismatch": [], "stopped": [],
                 "hosts": {str(r): h for r, h in sorted(hosts.items())} if hosts else None}
    if read.other_job or not dumps:
        return doc, findings      # two jobs' dumps: which collective who missed is not for this code to guess
    groups = build_groups(list(dumps.values()))
    doc["groups"] = [{"group": g.key[1] or g.key[0], "pg": g.key[0], "ranks": sorted(g.members),
                      "inferred": g.inferred} for g in groups.values()]
    gaps = incomplete(groups, set(dumps))
    bad = mismatches(groups)
    missing, doc["stopped"] = _missing_findings(gaps, dumps, hosts)
    doc["missing"], doc["mismatch"] = [_incomplete_doc(g) for g in gaps], [_mismatch_doc(b) for b in bad]
    findings += [_mismatch_finding(b) for b in bad] + missing
    stuck = [d for d in dumps.values() if current(d) is not None]
    if not gaps and not bad and stuck and len(stuck) == len(dumps):
        entry = current(stuck[0])
        findings.append(Finding("flight.stuck", Status.FAIL, f"every rank entered {op_name(entry)} "
                                f"#{entry['collective_seq_id']} of {entry['process_group'][1]} and none finished",
                                [_where(d) for d in stuck][:16], REMEDIES["stuck"]))
    if not gaps and not bad and not stuck:
        findings.append(Finding("flight.collectives", Status.OK, f"every rank of {len(dumps)} entered every "
                                f"collective its dump holds, with the same sizes, in {len(groups)} group(s)"))
    return doc, findings
