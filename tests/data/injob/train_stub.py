"""The user's script the wrapper runs after the check (tests/test_injob.py): its own init_process_group, one
all_reduce, and a line per rank with the arguments it was given."""

import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
total = torch.ones(1)
dist.all_reduce(total)
print(f"TRAINED rank={dist.get_rank()} sum={total.item():g} args={sys.argv[1:]} name={__name__}", flush=True)
dist.destroy_process_group()
