"""The planner: the memory each training mode needs (memory.py), which modes fit (fit.py), and
`clustercheck plan` (plan.py).
"""
