"""What NCCL says of a job, judged as pure functions below the stages, so that bench and smoke (over their own
launch), explain (over a user's log) and stacks (over a running job) call the same judges.

- path_judge.py: the path NCCL took on each node (the summaries onnode/nccl_log_reader.py reads from its own lines),
  judged from the log alone or against what the node has (a fallback to sockets, a failed plugin, differing
  versions, GPUDirect and P2P off, a virtual bootstrap interface);
- network.py: the network it used named as users know it (InfiniBand, RoCE, EFA, libfabric, Socket), GPUDirect
  RDMA, and the line that shows a fallback;
- impossible_facts.py: what its lines say that cannot hold on a healthy job (P2P between hosts, a network inside
  one host, a bootstrap interface that changes between nodes, GPUDirect on some ranks only);
- diag_judge.py: its own diagnostics (2.31+, `NCCL DIAG` lines);
- ras_judge.py: what its RAS says of a running job (the replies onnode/nccl_ras_client.py brings back).
"""
