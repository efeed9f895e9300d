"""A training script that calls the check itself (tests/test_injob.py): before its own init_process_group
(CHECK_WHEN=before) or after it (CHECK_WHEN=after); then one all_reduce and a line per rank."""

import os
import sys

import torch
import torch.distributed as dist

import clustercheck.injob

when = os.environ.get("CHECK_WHEN", "before")
if when == "before":
    verdict = clustercheck.injob.check(budget=float(os.environ.get("CHECK_BUDGET", "30")),
                                       reports_dir=os.environ["CHECK_REPORTS"])
    assert not dist.is_initialized(), "the check left its process group behind"
dist.init_process_group("gloo")
if when == "after":
    verdict = clustercheck.injob.check(budget=30, reports_dir=os.environ["CHECK_REPORTS"], on_fail="warn")
    assert dist.is_initialized(), "the check destroyed the job's own process group"
total = torch.ones(1)
dist.all_reduce(total)
print(f"TRAINED rank={dist.get_rank()} sum={total.item():g} verdict={verdict.status} args={sys.argv[1:]}", flush=True)
dist.destroy_process_group()
