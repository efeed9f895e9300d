"""How commands reach nodes: one Transport interface (base.py) over the local machine, SSH and srun, one
session loop per node (agent.py, agent_sh.py), and the fan-out over all nodes (fanout.py).
"""
