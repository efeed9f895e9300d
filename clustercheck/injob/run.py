"""The check inside the job, as one call: every rank gathers on its own node (gather.py), posts what it found
(rendezvous.py), rank 0 judges with the stages' judges (judge.py), writes the report and tells every rank the
verdict (verdict.py); then the policy: stop (every rank exits 2 with one line saying why, before the first
step) or warn (train on). Within the budget: a rank that never arrives or stops answering is named by the
others, who end in time.

    import clustercheck.injob
    clustercheck.injob.check(budget=60, on_fail="stop")   # before or after init_process_group
"""

from __future__ import annotations

import os
import secrets
import sys
import time
import traceback
from typing import Dict, List, NoReturn, Optional

from clustercheck.core.errors import EXIT_BAD_INPUT, InputError
from clustercheck.injob import gather, stalldump
from clustercheck.injob.judge import Gathered, judged
from clustercheck.injob.launcher import JobEnv, read_job_env
from clustercheck.injob.options import InjobOptions
from clustercheck.injob.rendezvous import Deadline, Joined, identity, join, leave, make_group, wait_until_gone
from clustercheck.injob.verdict import PREFIX, STOP_EXIT, Verdict, could_not_check, publish

ARRIVAL_SHARE = 0.3      # of the budget: every rank must have arrived by then, or the missing ones are named
ANSWER_SHARE = 0.85      # of the budget: rank 0 stops waiting for documents here, and judges
PEERS_PER_NODE = 2       # each node resolves and routes to this many others, as env's probe does


def bad_input(error: InputError) -> NoReturn:
    """Every rank says it and exits 64, before any collective (every rank reads the same options)."""
    print(f"{PREFIX}: Error: {error}", file=sys.stderr, flush=True)
    sys.exit(EXIT_BAD_INPUT)


def check(budget: float = 60.0, on_fail: str = "stop", reports_dir: str = "reports", report_name: str = "injob",
          pushgateway: Optional[str] = None, quiet: bool = False, checkpoint_dir: Optional[str] = None,
          command: str = "", **watch) -> Verdict:
    """Check the job's nodes from its own ranks, then apply the policy; returns the verdict when training goes
    on. Uses the job's process group if there is one, else makes one from the launcher's variables and
    destroys it before returning (the script's own init_process_group works after it). watch=True (with
    watch_every, watch_slower, watch_windows, watch_on_slow) then times the steps (stepwatch.py)."""
    try:
        options = InjobOptions(budget, on_fail, reports_dir, report_name, pushgateway, quiet, checkpoint_dir,
                               **watch)
        job = read_job_env(os.environ)
    except InputError as error:
        bad_input(error)
    verdict = run_check(job, options, command or f"clustercheck.injob.check(budget={budget:g}, on_fail={on_fail!r})")
    return start_watch(apply_policy(verdict, options, job.rank), options, job)


def start_watch(verdict: Verdict, options: InjobOptions, job: JobEnv) -> Verdict:
    """After a check that lets the job train: the dump on no progress (stalldump.py) and the watch when asked,
    told where rank 0's report is."""
    if options.stall_dump_s:
        stalldump.answer_stacks()
        stalldump.StallDump(options.stall_dump_s, stalldump.folder_for(options.reports_dir, os.environ), job.rank,
                            job.host, speaker=job.local_rank == 0).install()
    if options.watch:
        from clustercheck.injob import stepwatch   # its torch hooks load only for a watch
        stepwatch.start(options.watch_every, options.watch_slower, options.watch_windows, options.watch_on_slow,
                    job.host, verdict.reports if job.rank == 0 else None, options.pushgateway, options.report_name)
    return verdict


def apply_policy(verdict: Verdict, options: InjobOptions, rank: int) -> Verdict:
    """Stop: every rank prints the verdict's line and exits 2; else rank 0 prints it (and a rank whose verdict is its
    own, that heard none from rank 0: it could not check, and nobody else will say so) and training goes on."""
    stop = not verdict.ready and options.on_fail == "stop"
    if stop or rank == 0 or verdict.own:
        print(verdict.line, file=sys.stderr, flush=True)
    if not stop:
        return verdict
    print(f"{PREFIX}: stopping before the first step (--on-fail stop): exit {STOP_EXIT}", file=sys.stderr,
          flush=True)
    sys.exit(STOP_EXIT)


def run_check(job: JobEnv, options: InjobOptions, command: str) -> Verdict:
    deadline = Deadline(options.budget_s)
    if options.stall_dump_s:     # before the check's process group or the job's: torch reads it at the first
        said = stalldump.turn_on(os.environ)
        if said and job.rank == 0:
            print(f"{PREFIX}: {said}", file=sys.stderr, flush=True)
    joined: Optional[Joined] = None
    try:
        try:
            joined = join(job, deadline)
        except (RuntimeError, ValueError, TimeoutError) as exc:
            return could_not_check(f"rank {job.rank} on {job.host} could not reach the rendezvous at "
                                   f"{job.master_addr}:{job.master_port} within the {options.budget_s:g} s budget "
                                   f"({first_line(exc)})")
        try:
            return checked(joined, job, options, deadline, command)
        except RuntimeError as exc:      # the store went away under us: its host (rank 0 or its agent) is gone
            return could_not_check(f"rank {job.rank} on {job.host} lost the rendezvous at {job.master_addr}:"
                                   f"{job.master_port} during the check ({first_line(exc)})")
        except Exception as exc:     # clustercheck's own error: said with its traceback, never read as a pass
            return own_error(job, exc)
    finally:
        leave(joined)


def own_error(job: JobEnv, exc: BaseException) -> Verdict:
    traceback.print_exc(file=sys.stderr)
    return could_not_check(f"clustercheck's own error on rank {job.rank} ({job.host}): {first_line(exc)}; report "
                           "it as a bug of clustercheck with the traceback above")


def first_line(exc: BaseException) -> str:
    return (f"{type(exc).__name__}: {exc}".splitlines() or [""])[0][:300]


def checked(joined: Joined, job: JobEnv, options: InjobOptions, deadline: Deadline, command: str) -> Verdict:
    joined.post(f"who/{job.rank}", identity(job))
    keys = [f"who/{r}" for r in range(job.world_size)]
    arrived = joined.wait_for(keys, Deadline(ARRIVAL_SHARE * options.budget_s - deadline.spent()))
    # Not everyone came: no collective can complete, so none is started; the ranks that came say so at once.
    joined.post(f"doc/{job.rank}", my_documents(joined, job, deadline, options.checkpoint_dir) if all(arrived) else
                {"skipped": "not every rank arrived"})
    if job.rank == 0:
        gathered = collect(joined, job.world_size, options.budget_s, deadline)
        try:
            stages, run = judged(gathered)
            verdict = publish(stages, run, gathered, options, command)
        except Exception as exc:     # every rank hears it at once, not at the end of the budget
            verdict = own_error(job, exc)
        joined.post("verdict", verdict.__dict__)
        joined.wait_for([f"read/{r}" for r in gathered.answered if r], Deadline(min(5.0, deadline.left(2.0))))
        return verdict
    if not joined.wait_for(["verdict"], Deadline(deadline.left(0) + 10.0))[0]:
        if joined.lost:
            raise RuntimeError(joined.lost)
        return could_not_check(f"rank 0 (host {host_of(joined, 0)}) gave no verdict within the budget: it stopped "
                               "answering, or the check's rank 0 could not judge")
    verdict = Verdict(**joined.fetch("verdict"))
    joined.post(f"read/{job.rank}", 1)
    wait_until_gone(joined, Deadline(min(10.0, deadline.left(5.0))))
    return Verdict(verdict.status, verdict.exit_code, verdict.line)


def host_of(joined: Joined, rank: int) -> str:
    try:
        return joined.fetch(f"who/{rank}")["host"] if joined.present([f"who/{rank}"])[0] else "unknown"
    except RuntimeError:
        return "unknown"


def my_documents(joined: Joined, job: JobEnv, deadline: Deadline, directory: Optional[str]) -> Dict:
    """This rank's documents (env and device on the node's first rank, device on every GPU rank, storage on the
    node's first rank when a directory is given, the bench on every rank), with the seconds each took; the
    phase it enters posted first, for the others to name."""
    if joined.made_group:
        make_group(joined, job, Deadline(ANSWER_SHARE * deadline.budget_s - deadline.spent()))
    who = [joined.fetch(f"who/{r}") for r in range(job.world_size)]
    hosts = list(dict.fromkeys(w["host"] for w in who))
    leaders = {w["host"]: w["rank"] for w in who if w["local_rank"] == 0}
    if job.rank == 0:
        joined.post("plan", {"salt": secrets.token_hex(8)})
    plan = joined.fetch("plan") if joined.wait_for(["plan"], deadline)[0] else {"salt": ""}
    doc: Dict = {"seconds": {}}
    for phase in ("device", "storage", "env", "bench"):
        joined.post(f"phase/{job.rank}", phase)
        started = time.monotonic()
        if phase == "device":
            doc["device"] = gather.device_document(joined, job.node_leader, deadline)
        elif phase == "storage" and job.node_leader and directory:
            doc["storage"] = storage_phase(joined, job, who, directory, deadline)
        elif phase == "env" and job.node_leader:
            doc["env"] = gather.env_document(peers(hosts, job.host), plan["salt"])
        elif phase == "bench":
            doc["bench"] = gather.bench_events(joined, hosts, leaders, deadline)
        doc["seconds"][phase] = time.monotonic() - started
    return doc


def storage_phase(joined: Joined, job: JobEnv, who: List[Dict], directory: str, deadline: Deadline) -> Optional[Dict]:
    """The nodes' first ranks measure the directory at one moment, set by the first node's once every node is
    ready (the device measurement before it ends at different times on different nodes)."""
    hosts = list(dict.fromkeys(w["host"] for w in who))
    joined.post(f"storage-ready/{job.host}", 1)
    if job.host == hosts[0]:
        joined.wait_for([f"storage-ready/{h}" for h in hosts], deadline)
        joined.post("storage-plan", gather.storage_plan(deadline, hosts[0]))
    if not joined.wait_for(["storage-plan"], deadline)[0]:
        return None
    plan = joined.fetch("storage-plan")
    mine = [w["rank"] for w in who if w["host"] == job.host]
    found = gather.storage_documents(joined, job.host, len(mine), min(mine), job.world_size, directory, plan,
                                     deadline)
    if job.host == plan["writer"]:
        gather.remove_coherence_file(joined, hosts, directory, plan, deadline)
    return found


def peers(hosts: List[str], mine: str) -> List[str]:
    index = hosts.index(mine) if mine in hosts else 0
    return [h for h in hosts[index + 1:] + hosts[:index] if h != mine][:PEERS_PER_NODE]


def collect(joined: Joined, world_size: int, budget_s: float, deadline: Deadline) -> Gathered:
    """Rank 0: every rank's identity and documents posted by the answering deadline; the missing ones named."""
    gathered = Gathered(world_size, joined.backend, budget_s, device_seconds=gather.device_seconds(deadline))
    answered = joined.wait_for([f"doc/{r}" for r in range(world_size)],
                               Deadline(ANSWER_SHARE * budget_s - deadline.spent()))
    for rank in range(world_size):
        if joined.present([f"who/{rank}"])[0]:
            gathered.who[rank] = joined.fetch(f"who/{rank}")
        if answered[rank]:
            gathered.answered[rank] = joined.fetch(f"doc/{rank}")
        if joined.present([f"phase/{rank}"])[0]:
            gathered.phase_of[rank] = joined.fetch(f"phase/{rank}")
    return gathered
