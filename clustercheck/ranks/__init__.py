"""The torchrun layer: start a script's ranks on every node and follow them (torchrun.py), the records of a
launch (runs.py), the stacks of stuck ranks taken (stack_gather.py), folded (stacks.py) and judged (forensics.py).
"""
