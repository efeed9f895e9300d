"""What each kind of failure means for a multi-node job and what to do: the verdicts the error spaces lead to.
A kind is what a user acts on; many codes of many spaces lead to one kind, and context picks among kinds."""

from __future__ import annotations

from typing import Dict, NamedTuple

ROOT, LINK, ECHO = 0, 2, 4   # the classifier's tiers (stages/smoke/signatures.py): own cause, between ranks, echo
NET = "run clustercheck net and bench: a blocked port, a wrong interface (NCCL_SOCKET_IFNAME) or a dead peer"


class Kind(NamedTuple):
    tier: int
    summary: str
    remedy: str


KINDS: Dict[str, Kind] = {
    "oom": Kind(ROOT, "out of GPU memory",
                "lower --micro-batch, use zero3 / zero3-offload / fsdp, or activation checkpointing; `clustercheck "
                "plan` shows what fits; a GPU held by another process: clustercheck env names it"),
    "host-oom": Kind(ROOT, "out of host memory",
                     "lower host memory use (DataLoader workers, pinned memory, CPU offload) or add memory; "
                     "dmesg shows the OOM killer"),
    "cuda-error": Kind(ROOT, "a CUDA kernel failed on the GPU",
                       "a device-side assert is usually an index out of range (labels against the vocabulary); an "
                       "illegal access or launch failure: rerun with CUDA_LAUNCH_BLOCKING=1 to find the kernel, and "
                       "check the GPU (clustercheck env: Xid, ECC) if it repeats on one node only"),
    "gpu-hardware": Kind(ROOT, "the GPU reported a hardware fault (uncorrectable ECC or NVLink error)",
                         "drain the node; check the GPU (nvidia-smi -q -d ECC, dmesg Xid 48/63/64/94/95, clustercheck "
                         "env and device); reset it or have it replaced before it trains again"),
    "cuda-setup": Kind(ROOT, "CUDA cannot use the GPU on that node (driver, device visibility or state)",
                       "match the NVIDIA driver to torch's CUDA build (nvidia-smi shows the driver's CUDA version), "
                       "check CUDA_VISIBLE_DEVICES and that no other process holds the GPU in exclusive mode; on "
                       "NVSwitch systems start nvidia-fabricmanager"),
    "cuda-build": Kind(ROOT, "the installed kernels were not built for this GPU (or for this driver)",
                       "install a torch / extension build that includes this GPU's architecture (TORCH_CUDA_ARCH_LIST "
                       "when compiling; a newer wheel for a new GPU), or a driver at least as new as the toolkit"),
    "shm": Kind(ROOT, "shared memory (/dev/shm) ran out",
                "give the container more /dev/shm (docker --shm-size=16g, Kubernetes an emptyDir of medium Memory), "
                "or use fewer DataLoader workers; NCCL_SHM_DISABLE=1 only as a stop-gap"),
    "open-files": Kind(ROOT, "the process ran out of file descriptors (too many open files)",
                       "raise the open-files limit where the ranks start (ulimit -n 65536, LimitNOFILE for the "
                       "service, the container's nofile); with many DataLoader workers also "
                       "torch.multiprocessing.set_sharing_strategy('file_system')"),
    "disk-full": Kind(ROOT, "a disk or quota filled up (No space left on device)",
                      "free space on that node's filesystem (df -h), or point the output, TMPDIR and caches (HF_HOME, "
                      "datasets cache) at one with room"),
    "permission": Kind(ROOT, "a rank may not write (or read) a path it needs",
                       "make the output / cache directory writable by the training user on every node (a shared path "
                       "mounted read-only or owned by another user), or point it elsewhere"),
    "missing-file": Kind(ROOT, "a file a rank needs is not there on that node",
                         "put it on every node (node-local disks differ), or point the path at a shared filesystem"),
    "port-in-use": Kind(ROOT, "a port the job binds is already in use on that node",
                        "another job (or a launcher started twice: srun -n N with a launcher that spawns its own "
                        "ranks) holds MASTER_PORT / the rendezvous port: end it, or choose a free port "
                        "(--master_port, --rdzv-endpoint); clustercheck net checks the ports"),
    "network": Kind(LINK, "a node could not reach another over the network",
                    "check that every node reaches the master's address and ports and that NCCL / Gloo use a routable "
                    "interface (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME; not docker0, lo or an IPv6 link-local "
                    "address); " + NET),
    "rendezvous": Kind(LINK, "the nodes did not meet at the rendezvous (the c10d store)",
                       "start on every node with the same endpoint and world size (nnodes x nproc-per-node), keep the "
                       "rendezvous port open and free on the first node (clustercheck net)"),
    "watchdog": Kind(LINK, "a collective timed out: one rank stopped answering (stuck, dead or very slow)",
                     "find the rank the others waited for (clustercheck bench --pairwise, clustercheck net, its own "
                     "log); rerun with TORCH_NCCL_DUMP_ON_TIMEOUT=1 for the ranks' traces"),
    "nccl": Kind(LINK, "NCCL failed between ranks", NET + "; NCCL_DEBUG=INFO names the transport"),
    "ib": Kind(ROOT, "an InfiniBand transfer failed",
               "check the InfiniBand fabric and the HCAs on those nodes (ibstat, link errors); retry with "
               "NCCL_IB_DISABLE=1 to confirm, then set NCCL_IB_HCA to the ports that work"),
    "duplicate-gpu": Kind(ROOT, "two ranks on one GPU (NCCL: Duplicate GPU detected)",
                          "give each local rank its own device (torch.cuda.set_device(local_rank) before the process "
                          "group, CUDA_VISIBLE_DEVICES not narrowed per rank) and no more ranks per node than GPUs"),
    "killed": Kind(ROOT, "a rank was killed (SIGKILL): the kernel's or the scheduler's OOM killer, or someone killed it",
                   "look at the node's kernel log (dmesg: 'Out of memory: Killed process') and the scheduler's; lower "
                   "host memory use (data workers, CPU offload) or ask for more memory"),
    "crashed": Kind(ROOT, "a rank crashed in native code (SIGSEGV / SIGILL / SIGABRT)",
                    "check that torch, NCCL, the driver and compiled extensions match on every node (clustercheck env); "
                    "get the native stack (faulthandler, gdb) of the rank that crashed"),
    "scheduler": Kind(ROOT, "the scheduler ended the job (time limit, preemption or cancellation)",
                      "ask for more time (--time) or a queue that allows it, save checkpoints often enough to resume "
                      "after preemption (--requeue), or find who cancelled it (sacct)"),
    "launch-args": Kind(ROOT, "the launcher passed arguments the training script does not accept",
                        "torch 2.x's launchers pass --local-rank (not --local_rank): accept both in the script, or use "
                        "torchrun and read LOCAL_RANK from the environment"),
    "import": Kind(ROOT, "a module does not import",
                   "install it into the interpreter that trains on that node, or name the right one with python= "
                   "(clustercheck env shows what each node has)"),
    "code": Kind(ROOT, "the training code failed the same way any machine would (not a cluster fault)",
                 "fix the code or its inputs: the error names the operation (tensors on different devices, shapes or "
                 "dtypes that do not match); every node would fail alike"),
    "ssh": Kind(ROOT, "the launcher could not log in to a node over SSH",
                "let the launching node log in to every node without a password (ssh-copy-id) and accept their host "
                "keys once; clustercheck net checks it"),
    "hostname": Kind(ROOT, "a host name does not resolve",
                     "make every name in the hostfile / MASTER_ADDR resolve on every node (/etc/hosts or DNS), or use "
                     "addresses; clustercheck net checks names between every pair"),
    "peer-lost": Kind(ECHO, "a peer went away mid-run (its rank or node died)",
                      "find the node that died first (its own log, dmesg); clustercheck env on it"),
}
