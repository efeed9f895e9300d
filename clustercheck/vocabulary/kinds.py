"""What each kind of failure means for a multi-node job and what to do: the verdicts the error spaces lead to.
A kind is what a user acts on; many rows of many spaces lead to one kind (table.py), and context picks among
kinds. Each kind is defined here once: its rank, its tier, its meaning and its remedy.

The rank says which cause says most when one rank's lines show several (lower: more telling): the scheduler's
verdict ends everything, a cause of the node's own outranks what its kernels or its peers then report. The tier
says how much a line proves about the node that printed it (smoke's classifier):

- ROOT: the node's own failure (an import, out of memory, SIGKILL, a full disk...);
- OWN: an error of the node's own that no row names ("could not classify"): still the node's own;
- LINK: a failure between ranks (NCCL, a watchdog timeout, the rendezvous): the cause when nothing on any
  node says more, else the others' view of a rank that had already failed;
- FAILED: the node's launcher says its rank failed, and the rank said nothing telling;
- ECHO: a peer went away; never the cause when anything else is found.
"""

from __future__ import annotations

from typing import Dict, List, NamedTuple

ROOT, OWN, LINK, FAILED, ECHO = 0, 1, 2, 3, 4
NET = "run clustercheck net and bench: a blocked port, a wrong interface (NCCL_SOCKET_IFNAME) or a dead peer"


class Kind(NamedTuple):
    rank: int
    tier: int
    summary: str
    remedy: str


KINDS: Dict[str, Kind] = {
    "scheduler": Kind(10, ROOT, "the scheduler ended the job or its step (time limit, preemption, cancellation, a "
                                "node failure, a step it could not create)",
                      "ask for more time (--time) or a queue that allows it, save checkpoints often enough to resume "
                      "after preemption (--requeue), or find who cancelled it (sacct); a node failure: sinfo -R says "
                      "why the node went down, drain it; a step srun could not create: ask for one that fits the "
                      "allocation (tasks, GPUs, memory per node)"),
    "op-build": Kind(20, ROOT, "a DeepSpeed / torch C++ op failed to build on the node",
                     "install the CUDA toolkit (nvcc) matching torch's CUDA and set CUDA_HOME, and ninja; or pre-build "
                     "the ops (DS_BUILD_OPS=1 pip install deepspeed) so no node compiles at start"),
    "loader": Kind(25, ROOT, "the dynamic loader could not load a library (missing, built for another system or "
                             "against another torch)",
                   "cannot open shared object file: install the library on that node or put its directory on "
                   "LD_LIBRARY_PATH (the CUDA / NCCL / cuDNN libraries torch expects); undefined symbol: a compiled "
                   "extension (flash-attn, apex, a DeepSpeed op) was built against another torch or CUDA, reinstall "
                   "it for the torch this node runs; GLIBC_x not found: the binary was built on a newer system, "
                   "install a build for this OS (or run in a container); wrong ELF class: a library of another "
                   "architecture (32/64-bit, arm/x86) is first on the path"),
    "import": Kind(30, ROOT, "a module does not import",
                   "install it into the interpreter that trains on that node, or name the right one with python= "
                   "(clustercheck env shows what each node has)"),
    # after ssh and hostname: an MPI launcher that could not start its daemons says so around the ssh or name
    # failure that stopped it (Open MPI's "ORTE was unable to reliably start" over "Permission denied (publickey)")
    "mpi": Kind(175, ROOT, "the MPI launcher could not start or wire up the ranks (mpirun / orted / Hydra, PMI / PMIx)",
                "run the same Open MPI / MPICH build on every node (its prte/orted on the remote PATH: "
                "--prefix or the module loaded in non-interactive shells), let mpirun's nodes reach each other "
                "(-mca oob_tcp_if_include / btl_tcp_if_include on the routable interface), and under Slurm start "
                "ranks with srun --mpi=pmix (srun --mpi=list) matching the PMI the library was built with"),
    "trainer-config": Kind(42, ROOT, "the trainer framework rejected its settings (PyTorch Lightning, accelerate, the "
                                     "Hugging Face Trainer, LLaMA-Factory: devices, nodes, strategy, precision)",
                           "make the framework's devices x num_nodes match what the launcher gives (Lightning: "
                           "Trainer(devices=, num_nodes=) equal to the Slurm/torchrun tasks; accelerate: "
                           "num_processes = nodes x GPUs per node in its config), and choose a strategy and precision "
                           "the installed versions and GPUs support; the message names the setting"),
    "ptrace": Kind(176, ROOT, "a rank may not read another rank's memory on its node (process_vm_readv / CMA refused: "
                              "a container without SYS_PTRACE, kernel.yama.ptrace_scope), which the MPI library's "
                              "shared-memory copy needs",
                   "run the container with --cap-add=SYS_PTRACE (Kubernetes: securityContext.capabilities.add "
                   "[SYS_PTRACE]; or the host's IPC namespace), or turn the single copy off: "
                   "OMPI_MCA_btl_vader_single_copy_mechanism=none; on a bare host, sysctl kernel.yama.ptrace_scope=0"),
    "memlock": Kind(193, ROOT, "RDMA could not register memory: the locked-memory limit (ulimit -l) is too low",
                    "raise the memlock limit where the ranks start: '* - memlock unlimited' in "
                    "/etc/security/limits.conf, LimitMEMLOCK=infinity for slurmd (and PropagateResourceLimits), "
                    "docker --ulimit memlock=-1, Kubernetes IPC_LOCK; ulimit -l in the job shows it"),
    "checkpoint-corrupt": Kind(183, ROOT, "a checkpoint or weights file is truncated or corrupt",
                               "the file was cut while written (a full disk, a killed save, an incomplete copy or "
                               "download): check its size against the source, save to a temporary name and rename, "
                               "and load the last complete checkpoint; every node reading it fails alike"),
    "file-lock": Kind(167, ROOT, "a file lock could not be taken: another rank or job holds it, or a killed one left it",
                      "find who holds it (lsof / fuser on the lock file, on every node that shares the directory); "
                      "a lock left by a killed job (the HF datasets or hub cache, a torch extensions build) can be "
                      "removed once nothing runs that uses it; give each job its own cache directory"),
    "stale-file": Kind(165, ROOT, "a network filesystem's file handle went stale (ESTALE)",
                       "the file was replaced or removed on the server while a node held it open (another node "
                       "rewrote it, the export was remounted): write checkpoints to new names, remount on that "
                       "node, and keep one writer per file"),
    "iommu": Kind(62, ROOT, "the IOMMU blocked a device's DMA (DMAR / AMD-Vi / IO page faults)",
                  "boot with iommu=pt (intel_iommu=on iommu=pt, or amd_iommu=on iommu=pt) or the IOMMU off for "
                  "GPUDirect and NCCL P2P; disable PCIe ACS on the switches between GPUs and NICs; a fault naming one "
                  "device repeatedly: drain the node and check that device"),
    "hung-task": Kind(64, ROOT, "the kernel reports a task blocked for minutes (hung task, D state): a filesystem or "
                                "a driver stopped answering",
                      "the trace names where it blocked: nfs / lustre / fuse calls are the storage (check the mount "
                      "and its server from that node), nvidia / uvm calls the GPU driver (drain the node, reset the "
                      "GPU); clustercheck storage names writers stuck in D state"),
    "hang": Kind(255, LINK, "the job stopped inside a collective with no error: a hang in progress (or a log cut "
                            "there)",
                 "find the rank the others wait for: clustercheck stacks on the live job, or the flight recorder's "
                 "dumps (TORCH_FR_BUFFER_SIZE, TORCH_NCCL_DUMP_ON_TIMEOUT=1) read by clustercheck explain DIR"),
    "launch-args": Kind(40, ROOT, "the launcher was given (or passed) arguments that do not fit: the script's, the "
                                  "hostfile's, the node and process counts",
                        "torch 2.x's launchers pass --local-rank (not --local_rank): accept both in the script, or use "
                        "torchrun and read LOCAL_RANK from the environment; for torchrun and DeepSpeed's launcher, "
                        "make --nnodes / --nproc-per-node / --rdzv-endpoint and the hostfile (host slots=N, one per "
                        "line), --include / --exclude and --num_nodes name the nodes and GPUs that exist"),
    "ds-config": Kind(45, ROOT, "DeepSpeed rejected its config (batch size arithmetic or ZeRO stage options)",
                      "make train_batch_size = train_micro_batch_size_per_gpu x gradient_accumulation_steps x world "
                      "size (the world size changes with the node count: set \"auto\" or leave one of the three out), "
                      "and use ZeRO options only with the stages that support them; clustercheck plan shows what fits"),
    "hub-offline": Kind(47, ROOT, "the Hugging Face hub could not be reached and the files are not in the local cache",
                        "download the model / dataset once where there is network (huggingface-cli download) into a "
                        "cache every node reads (HF_HOME on a shared filesystem), then run with HF_HUB_OFFLINE=1; or "
                        "give the nodes a route to huggingface.co (HTTPS_PROXY)"),
    "duplicate-gpu": Kind(50, ROOT, "two ranks on one GPU (NCCL: Duplicate GPU detected)",
                          "give each local rank its own device (torch.cuda.set_device(local_rank) before the process "
                          "group, CUDA_VISIBLE_DEVICES not narrowed per rank) and no more ranks per node than GPUs"),
    "gpu-hardware": Kind(60, ROOT, "the GPU reported a hardware fault (uncorrectable ECC or NVLink error, fallen off "
                                   "the bus)",
                         "drain the node; check the GPU (nvidia-smi -q -d ECC, dmesg Xid 48/63/64/79/94/95, "
                         "clustercheck env and device); reset it or have it replaced before it trains again"),
    "cuda-build": Kind(70, ROOT, "the installed kernels were not built for this GPU (or for this driver)",
                       "install a torch / extension build that includes this GPU's architecture (TORCH_CUDA_ARCH_LIST "
                       "when compiling; a newer wheel for a new GPU), or a driver at least as new as the toolkit"),
    "cuda-setup": Kind(80, ROOT, "CUDA cannot use the GPU on that node (driver, device visibility or state)",
                       "match the NVIDIA driver to torch's CUDA build (nvidia-smi shows the driver's CUDA version; a "
                       "driver/library mismatch after an upgrade needs a reboot), check CUDA_VISIBLE_DEVICES and that "
                       "no other process holds the GPU in exclusive mode; on NVSwitch systems start "
                       "nvidia-fabricmanager"),
    "oom": Kind(90, ROOT, "out of GPU memory",
                "lower --micro-batch, use zero3 / zero3-offload / fsdp, or activation checkpointing; `clustercheck "
                "plan` shows what fits; a GPU held by another process: clustercheck env names it"),
    "shm": Kind(110, ROOT, "shared memory (/dev/shm) ran out",
                "give the container more /dev/shm (docker --shm-size=16g, Kubernetes an emptyDir of medium Memory), "
                "or use fewer DataLoader workers; NCCL_SHM_DISABLE=1 only as a stop-gap"),
    "open-files": Kind(120, ROOT, "the process ran out of file descriptors (too many open files)",
                       "raise the open-files limit where the ranks start (ulimit -n 65536, LimitNOFILE for the "
                       "service, the container's nofile); with many DataLoader workers also "
                       "torch.multiprocessing.set_sharing_strategy('file_system')"),
    "disk-full": Kind(130, ROOT, "a disk or quota filled up (No space left on device)",
                      "free space on that node's filesystem (df -h), or point the output (checkpoints), TMPDIR and "
                      "caches (HF_HOME, datasets cache) at one with room"),
    "ssh": Kind(140, ROOT, "the launcher could not log in to a node over SSH",
                "let the launching node log in to every node without a password (ssh-copy-id) and accept their host "
                "keys once; clustercheck net checks it"),
    "permission": Kind(150, ROOT, "a rank may not write (or read) a path it needs",
                       "make the output / cache directory writable by the training user on every node (a shared path "
                       "mounted read-only or owned by another user), or point it elsewhere"),
    "missing-file": Kind(160, ROOT, "a file a rank needs is not there on that node",
                         "put it on every node (node-local disks differ), or point the path at a shared filesystem"),
    "hostname": Kind(170, ROOT, "a host name does not resolve",
                     "make every name in the hostfile / MASTER_ADDR resolve on every node (/etc/hosts or DNS), or use "
                     "addresses; clustercheck net checks names between every pair"),
    "port-in-use": Kind(180, ROOT, "a port the job binds is already in use on that node",
                        "another job (or a launcher started twice: srun -n N with a launcher that spawns its own "
                        "ranks) holds MASTER_PORT / the rendezvous port: end it, or choose a free port "
                        "(--master_port, --rdzv-endpoint); clustercheck net checks the ports"),
    "checkpoint-mismatch": Kind(185, ROOT, "the checkpoint does not fit the model (load_state_dict: size mismatch, "
                                           "missing or unexpected keys)",
                                "load it into the model it was saved from (the same config: vocabulary size, layers, "
                                "width); keys with a 'module.' prefix were saved from a DDP-wrapped model: strip it "
                                "or load into model.module; strict=False only where the difference is meant; every "
                                "node would fail alike"),
    "ddp-unused": Kind(187, ROOT, "DDP's reducer found parameters that took no part in the loss (or a parameter "
                                  "marked ready twice)",
                       "pass find_unused_parameters=True to DistributedDataParallel, or make every parameter take "
                       "part in the loss (freeze the unused ones: requires_grad=False); with activation "
                       "checkpointing use static_graph=True or use_reentrant=False; TORCH_DISTRIBUTED_DEBUG=INFO names "
                       "the parameters"),
    "overflow": Kind(190, ROOT, "the loss overflowed (fp16 loss scale at its minimum, or NaN / Inf)",
                     "train in bf16 (or fp32) instead of fp16, lower the learning rate, clip gradients; check the data "
                     "for empty or broken samples"),
    "killed": Kind(200, ROOT, "a rank was killed (SIGKILL): the kernel's or the scheduler's OOM killer, or someone "
                              "killed it",
                   "look at the node's kernel log (dmesg: 'Out of memory: Killed process') and the scheduler's; lower "
                   "host memory use (data workers, CPU offload) or ask for more memory"),
    "host-oom": Kind(205, ROOT, "out of host memory",
                     "lower host memory use (DataLoader workers, pinned memory, CPU offload) or add memory; "
                     "dmesg shows the OOM killer"),
    "ib": Kind(210, ROOT, "an InfiniBand transfer failed",
               "check the InfiniBand fabric and the HCAs on those nodes (ibstat, link errors); retry with "
               "NCCL_IB_DISABLE=1 to confirm, then set NCCL_IB_HCA to the ports that work"),
    "cuda-error": Kind(220, ROOT, "a CUDA kernel failed on the GPU",
                       "a device-side assert is usually an index out of range (labels against the vocabulary, padding "
                       "ids); an illegal access or launch failure: rerun with CUDA_LAUNCH_BLOCKING=1 to find the "
                       "kernel, and check the GPU (clustercheck env: Xid, ECC) if it repeats on one node only"),
    "desync": Kind(228, ROOT, "the ranks called a collective with different tensors or different collectives "
                              "at one point (a desync in the training code, not a cluster fault)",
                   "the same code path must give every rank the same collectives with the same shapes and dtypes: "
                   "uneven last batches, a model or config that differs by rank, a parameter that exists on only "
                   "some ranks, a collective behind an `if rank == ...`; TORCH_DISTRIBUTED_DEBUG=DETAIL checks "
                   "shapes before each collective (in torch 2.13 not while DDP is built: it segfaults there)"),
    "code": Kind(230, ROOT, "the training code failed the same way any machine would (not a cluster fault)",
                 "fix the code or its inputs: the error names the operation (tensors on different devices, shapes or "
                 "dtypes that do not match); every node would fail alike"),
    "crashed": Kind(240, ROOT, "a rank crashed in native code (SIGSEGV / SIGILL / SIGBUS / SIGFPE)",
                    "check that torch, NCCL, the driver and compiled extensions match on every node (clustercheck "
                    "env); get the native stack (faulthandler, gdb) of the rank that crashed; a debug setting can "
                    "crash too (in torch 2.13, DDP segfaults while it is built under TORCH_DISTRIBUTED_DEBUG=DETAIL)"),
    "watchdog": Kind(250, LINK, "a collective timed out: one rank stopped answering (stuck, dead or very slow)",
                     "find the rank the others waited for (clustercheck bench --pairwise, clustercheck net, its own "
                     "log); rerun with TORCH_NCCL_DUMP_ON_TIMEOUT=1 for the ranks' traces"),
    "network": Kind(260, LINK, "a node could not reach another over the network",
                    "check that every node reaches the master's address and ports and that NCCL / Gloo use a routable "
                    "interface (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME; not docker0, lo or an IPv6 link-local "
                    "address); " + NET),
    "nccl": Kind(270, LINK, "NCCL failed between ranks", NET + "; NCCL_DEBUG=INFO names the transport"),
    "rendezvous": Kind(280, LINK, "the nodes did not meet at the rendezvous (the c10d store)",
                       "start on every node with the same endpoint and world size (nnodes x nproc-per-node), keep the "
                       "rendezvous port open and free on the first node (clustercheck net)"),
    "peer-lost": Kind(290, ECHO, "a peer went away mid-run (its rank or node died)",
                      "find the node that died first (its own log, dmesg); clustercheck env on it"),
    "comms": Kind(300, ECHO, "a collective failed between ranks", NET),
}
# Kinds a log's shape leads to, not a line of it (no row of the table names them): a log that stops in a collective
# with no error and no end (explain/verdict.py)
SHAPE_KINDS = {"hang"}
# Every kind, most telling first: derived from the ranks, never kept by hand.
KIND_ORDER: List[str] = sorted(KINDS, key=lambda name: KINDS[name].rank)
assert len({k.rank for k in KINDS.values()}) == len(KINDS), "two kinds share a rank"
