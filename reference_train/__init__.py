"""reference_train: a small GPT trainer (DDP, DeepSpeed ZeRO, FSDP) that proves a cluster end to end.

Run train.py with torchrun or the deepspeed launcher; see its docstring and README.md.
"""
