"""The node layer: what every stage knows about every node, gathered once per run, and the judges of it.

gather.py runs the env probe once per run on every node; facts.py holds each node's
document (`Probed`) and the facts derived from it once (interface, GPUs, torch, what it
lacks); readiness.py says which nodes can take part in a torchrun launch; judges.py holds
the judges every stage shares (reach, names, the training interface), run once, whichever
stage first needed the nodes; slurm.py reads what Slurm says of them; layer.py ties them to
one run's connections. What is known of a node is judged here too, below the stages, so that
a stage, node-check and explain share one judge: gpu_health.py (each GPU's memory faults, Xids,
MIG and more), xid.py (what each Xid means, NVIDIA's catalogue), neighbours.py (the ARP / IPv6
neighbour table against the node count). Stages take node facts from here and never from one
another. What NCCL says is judged in clustercheck/nccl, not here.
"""
