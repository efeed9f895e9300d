"""The "rdma" and "kernel" spaces (clustercheck/vocabulary/rdma.py, kernel.py): every line is instantiated from the
format string its row cites (rdma-core, NCCL, UCX, Open MPI, Linux, the NVIDIA driver) or quoted from a public thread
(cited beside it); healthy lines the same layers print must read as nothing; and a node's whole log names the cause
the kernel or the fabric gave, not the collective's timeout that followed."""

import pytest

from clustercheck.failure.classify import NodeLines, classify
from clustercheck.failure.lines import is_warning
from clustercheck.vocabulary import read_line
from clustercheck.vocabulary.rdma import ASYNC_ERRORS, CM_EVENTS, OMPI_WC_TEXT, UCS_STATUS, WC_STATUS
from clustercheck.vocabulary.table import ROWS, best_in

FAILED_STATUSES = [(n, name, text) for n, (name, text, _, kind) in WC_STATUS.items() if kind]


def test_every_failed_work_completion_status_is_a_row_and_success_is_none():
    codes = {row.code for row in ROWS if row.space == "rdma"}
    assert {name for _, name, _ in FAILED_STATUSES} <= codes
    assert len(WC_STATUS) == 24 and "IBV_WC_SUCCESS" not in codes and "IBV_WC_TM_RNDV_INCOMPLETE" not in codes


@pytest.mark.parametrize("number, name, text", FAILED_STATUSES, ids=[name for _, name, _ in FAILED_STATUSES])
def test_each_status_is_read_by_name_text_and_number_in_every_form_printed(number, name, text):
    # a verbs program (rdma-core libibverbs/examples/rc_pingpong.c: "Failed status %s (%d) for wr_id %d")
    assert (read_line(f"Failed status {text} ({number}) for wr_id 2").code == name)
    assert read_line(f"ibv_poll_cq returned wc status {number}").code == name
    assert read_line(f"RuntimeError: completion failed: {name}").code == name
    nccl = [  # NCCL's WARN lines of 2.4-2.18, 2.19-2.20, 2.21-2.28 and 2.29 (src/transport/net_ib*)
        f"h1:12:34 [0] transport/net_ib.cc:789 NCCL WARN NET/IB : Got completion with error {number}, opcode 0, "
        f"len 0, vendor err 129",
        f"h1:12:34 [0] transport/net_ib.cc:1333 NCCL WARN NET/IB : Got completion from peer 10.0.0.2<45678> with "
        f"error {number}, opcode 0, len 0, vendor err 129 (Send)",
        f"h1:12:34 [0] transport/net_ib.cc:2244 NCCL WARN NET/IB: Got completion from peer 10.0.0.2<45678> with "
        f"status={number} opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:10.0.0.1 remoteGids ::ffff:10.0.0.2 "
        f"hca mlx5_0",
        f"h1:12:34 [0] transport/net_ib/p2p.cc:688 NCCL WARN NET/IB: Got completion from peer 10.0.0.2<45678> with "
        f"status={name}({number}) opcode=IBV_WC_SEND(0) vendor_err=129  hca mlx5_0",
    ]
    for line in nccl:
        assert best_in("rdma", line)[0].code == name, line
        assert read_line(line).kind == "ib", line
    if number in OMPI_WC_TEXT:   # Open MPI btl_openib_component.c: "error polling %s with status %s status number %d"
        line = (f"[[51298,1],2][btl_openib_component.c:3496:handle_wc] from node7 to: 3 error polling LP CQ with "
                f"status {OMPI_WC_TEXT[number]} status number {number} for wr_id 217ce00 opcode 0  vendor error 129 "
                f"qp_idx 0")
        assert best_in("rdma", line)[0].code == name and read_line(line).kind == "ib"


@pytest.mark.parametrize("name, text", ASYNC_ERRORS.items(), ids=list(ASYNC_ERRORS))
def test_the_async_events_that_are_errors(name, text):
    line = f"h1:12:99 [0] NCCL WARN NET/IB : mlx5_0:1 Got async event : {text}"
    assert best_in("rdma", line)[0].code == name and read_line(line).kind == "ib"
    assert read_line(f"async event {name} on mlx5_0").code == name
    assert best_in("rdma", "h1:12:99 [0] NCCL INFO NET/IB : mlx5_0:1 Got async event : port active") is None


@pytest.mark.parametrize("name, kind", CM_EVENTS.items(), ids=list(CM_EVENTS))
def test_rdma_cm_failure_events(name, kind):
    meaning = read_line(f"rdma_cm: unexpected event {name}, status -110")
    assert (meaning.kind, meaning.code) == (kind, name)


UCX_LOG = "[1700000000.123456] [node1:4242:0]     {file}:{line}  UCX  ERROR {text}"
UCS_KINDS = [(name, text, kind) for name, (_, text, kind) in UCS_STATUS.items() if kind]


@pytest.mark.parametrize("name, text, kind", UCS_KINDS, ids=[name for name, _, _ in UCS_KINDS])
def test_ucx_statuses_as_ucx_and_its_callers_print_them(name, text, kind):
    lines = [UCX_LOG.format(file="wireup.c", line=930, text=f"failed to create EP: {text}"),
             f"[node1:04242] pml_ucx.c:419  Error: ucp_ep_create(proc=3) failed: {text}",
             f"ucp._libs.exceptions.UCXError: <stream_recv>: {text}",
             f"status {name}"]
    for line in lines:
        meaning = read_line(line)
        assert (meaning.kind, meaning.code) == (kind, name), line
    assert read_line(text) is None or read_line(text).space != "rdma"   # the bare words are anyone's


# (line, kind, code): instantiated from the cited format string, or quoted from the cited thread
LINES = [
    # ---- memory registration and the locked-memory limit --------------------------------------------------------
    (UCX_LOG.format(file="ib_md.c", line=314, text="ibv_reg_mr(address=0x7f5c2c000000, length=4194304, access=0xf) "
                    "failed: Cannot allocate memory : Please set max locked memory (ulimit -l) to 'unlimited' "
                    "(current: 64 kbytes)"), "memlock", "ibv_reg_mr ENOMEM"),
    (UCX_LOG.format(file="ib_iface.c", line=1376, text="mlx5_0: ibv_create_cq(cqe=4096) failed: Cannot allocate "
                    "memory : Please set max locked memory (ulimit -l) to 'unlimited' (current: 64 kbytes)"),
     "memlock", "ibv_reg_mr ENOMEM"),
    (UCX_LOG.format(file="ib_iface.c", line=1328, text="mlx5_0: iface 0x1b2c3d0 failed to create RC QP TX wr:256 "
                    "sge:5 inl:124 resp:128 RX wr:0 sge:0 resp:0 failed: Cannot allocate memory"), "memlock",
     "ibv_reg_mr ENOMEM"),
    ("libibverbs: Warning: RLIMIT_MEMLOCK is 65536 bytes.", "memlock", "RLIMIT_MEMLOCK"),
    ("    This will severely limit memory registrations.", "memlock", "RLIMIT_MEMLOCK"),
    ("ibv_reg_mr failed: Cannot allocate memory (errno 12)", "memlock", "ibv_reg_mr ENOMEM"),
    # ---- other verbs calls ------------------------------------------------------------------------------------------
    ("ERROR: ibv_modify_qp() failed: Invalid argument", "ib", "verbs call failed"),
    ("Couldn't create QP: ibv_create_qp failed (errno 22)", "ib", "verbs call failed"),
    (UCX_LOG.format(file="ib_mlx5_log.c", line=177, text="Transport retry count exceeded on mlx5_0:1/IB (synd 0x15 "
                    "vend 0x81 hw_synd 0/0)"), "ib", "UCX mlx5 completion error"),
    (UCX_LOG.format(file="ib_mlx5_log.c", line=177, text="Remote access error on mlx5_2:1/RoCE (synd 0x13 vend 0x88 "
                    "hw_synd 0/0)"), "ib", "UCX mlx5 completion error"),
    # ---- the kernel: the OOM killer (mm/oom_kill.c) --------------------------------------------------------------
    ("[ 8123.456789] Out of memory: Killed process 4242 (python) total-vm:123456789kB, anon-rss:98765432kB, "
     "file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:204800kB oom_score_adj:0", "killed", "oom-killer"),
    ("[ 8123.456700] python invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0, oom_score_adj=0",
     "killed", "oom-killer"),
    ("[ 8123.456780] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0-1,global_oom,"
     "task_memcg=/user.slice,task=python,pid=4242,uid=1000", "killed", "oom-killer"),
    ("Out of memory: Kill process 4242 (python) score 912 or sacrifice child", "killed", "oom-killer"),
    ("Killed process 4242 (python) total-vm:123456kB, anon-rss:98765kB, file-rss:0kB", "killed", "oom-killer"),
    ("[ 8124.0] oom_reaper: reaped process 4242 (python), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB", "killed",
     "oom-killer"),
    ("[ 8123.4] Memory cgroup out of memory: Killed process 4242 (python) total-vm:1234kB, anon-rss:1000kB, "
     "file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:64kB oom_score_adj:0", "killed", "memcg oom-killer"),
    # ---- hung tasks (kernel/hung_task.c); the lines quoted in the s390 PCI recovery thread (linux-pci, 2025) ----
    ("[10320.359160] INFO: task kmcheck:72 blocked for more than 122 seconds.", "hung-task", "hung task"),
    ("[10320.359171] \"echo 0 > /proc/sys/kernel/hung_task_timeout_secs\" disables this message.", "hung-task",
     "hung task"),
    # ---- the IOMMU: intel/dmar.c (as quoted on intel-gfx, 2022), amd/iommu.c (xhci thread, linux-usb 2022) -------
    ("DMAR: [DMA Read NO_PASID] Request device [00:02.0] fault addr 0x0 [fault reason 0x06] PTE Read access is not "
     "set", "iommu", "DMAR fault"),
    ("[    3.148557] DMAR: DRHD: handling fault status reg 2", "iommu", "DMAR fault"),
    ("[    3.737790] DMAR: [DMA Write] Request device [04:00.0] PASID ffffffff fault addr 69974000 [fault reason 05] "
     "PTE Write access is not set", "iommu", "DMAR fault"),
    ("DMAR: [INTR-REMAP] Request device [f0:1f.0] fault index 0x10 [fault reason 0x25] Blocked a compatibility "
     "format interrupt request", "iommu", "DMAR fault"),
    ("xhci_hcd 0000:02:00.0: AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x000f address=0xff00ffffffefe000 "
     "flags=0x0000]", "iommu", "AMD-Vi fault"),
    ("AMD-Vi: Event logged [IO_PAGE_FAULT device=0a:00.0 domain=0x001d address=0x000000000637c000 flags=0x0000]",
     "iommu", "AMD-Vi fault"),
    ("arm-smmu arm-smmu.0.auto: Unhandled context fault: fsr=0x402, iova=0x2080000140, fsynr=0x1d0040, "
     "cbfrsynra=0x4000, cb=0", "iommu", "SMMU fault"),
    # ---- the NVIDIA driver's non-Xid lines (open-gpu-kernel-modules) ----------------------------------------------
    ("[  12.3] NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x62:0x40:2026)", "gpu-hardware",
     "NVRM RmInitAdapter failed"),
    ("NVRM: GPU 0000:3b:00.0: rm_init_adapter failed, device minor number 0", "gpu-hardware",
     "NVRM RmInitAdapter failed"),
    ("NVRM: fallen off the bus and is not responding to commands.", "gpu-hardware", "NVRM RmInitAdapter failed"),
    ("NVRM: API mismatch: the client 'nvidia-smi' (pid 4242)", "cuda-setup", "NVRM driver setup"),
    ("NVRM: No NVIDIA devices probed.", "cuda-setup", "NVRM driver setup"),
    ("NVRM: The NVIDIA probe routine failed for 1 device(s).", "cuda-setup", "NVRM driver setup"),
    ("NVRM: installed in this system is not supported by the", "cuda-setup", "NVRM driver setup"),
    ("NVRM: This PCI I/O region assigned to your NVIDIA device is invalid:", "cuda-setup", "NVRM driver setup"),
    # ---- GPUDirect RDMA, the ConnectX driver, a NIC's transmit watchdog ---------------------------------------------
    ("[ 99.1] nvidia-peermem nv_mem_client_init:573 ERROR nv_mem_client_init -- error while registering traditional "
     "client", "ib", "nvidia-peermem"),
    ("modprobe: ERROR: could not insert 'nvidia_peermem': Invalid argument", "ib", "nvidia-peermem"),
    # the mlx5 lines quoted on netdev (2023: mstfwreset)
    ("[  257.137072] mlx5_core 0000:56:00.0: wait_func:1189:(pid 72061): ACCESS_REG(0x805) timeout. Will cause a "
     "leak of a command resource", "ib", "mlx5 firmware"),
    ("mlx5_core 0000:61:00.1: mlx5_health_try_recover:381:(pid 1): health recovery flow aborted, PCI reads still not "
     "working", "ib", "mlx5 firmware"),
    ("mlx5_core 0000:61:00.0: poll_health:800:(pid 0): Fatal error 1 detected", "ib", "mlx5 firmware"),
    ("NETDEV WATCHDOG: ib0 (mlx5_core): transmit queue 3 timed out 5120 ms", "network", "NETDEV WATCHDOG"),
]


@pytest.mark.parametrize("line, kind, code", LINES, ids=[f"{code}:{line[:30]}" for line, _, code in LINES])
def test_each_row_reads_the_lines_its_source_prints(line, kind, code):
    meaning = read_line(line)
    assert meaning is not None and (meaning.kind, meaning.code) == (kind, code), meaning


def test_nccls_own_verbs_failures_are_the_rdma_rows_read_through_nccls_warn():
    """NCCL's ibvwrap.cc words: the rdma space names them (memlock for ENOMEM); read_line reads them through
    nccl.py's NET/IB WARN row, which reads "ib" unless that row sends the line to this space (via="rdma")."""
    memlock = "h1:12:34 [0] misc/ibvwrap.cc:165 NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate memory"
    iova2 = ("h1:12:34 [0] misc/ibvwrap.cc:167 NCCL WARN Call to ibv_reg_mr_iova2 failed with error Cannot allocate "
             "memory")
    efault = "h1:12:34 [0] misc/ibvwrap.cc:165 NCCL WARN Call to ibv_reg_mr failed with error Bad address"
    gid = ("h1:12:34 [0] misc/ibvwrap.cc:376 NCCL WARN Call to ibv_modify_qp failed with 110 Connection timed out, on "
           "dev mlx5_0:1, curr state INIT, next state RTR, local GID index 3, local GID ::ffff:10.0.0.1, remote GID "
           "::ffff:10.0.0.2")
    incompatible = ("h1:12:34 [0] NCCL WARN NET/IB : Attempted to connect incompatible devices: [0]mlx5_0:1/IB and "
                    "[1]mlx5_1:1/RoCE. Try selecting NICs of only one link type using NCCL_IB_HCA")
    for line, code in [(memlock, "ibv_reg_mr ENOMEM"), (iova2, "ibv_reg_mr ENOMEM"), (efault, "ibv_reg_mr EFAULT"),
                       (gid, "verbs call failed"), (incompatible, "NET/IB device")]:
        assert best_in("rdma", line)[0].code == code, line
        assert read_line(line).kind in ("ib", "memlock"), line


def test_nccls_ibv_reg_mr_enomem_reads_memlock():
    line = "h1:12:34 [0] misc/ibvwrap.cc:165 NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate memory"
    assert read_line(line).kind == "memlock"


def test_libibverbs_memlock_warning_is_a_cause_despite_being_a_warning():
    line = "libibverbs: Warning: RLIMIT_MEMLOCK is 65536 bytes."
    assert not is_warning(line)


HEALTHY = [
    # NCCL's INFO lines of a run on InfiniBand, of one that falls back to sockets, and of a retry that succeeded
    "h1:12:12 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.0.0.1<0>",
    "h1:12:12 [0] NCCL INFO NET/IB : No device found.",
    "h1:12:12 [0] NCCL INFO Failed to open libibverbs.so[.1]",
    "h1:12:12 [0] NCCL INFO NET/IB: Dev 0 Port 1 qpn 4242 mtu 5 GID 3 (80FE/1A2B3C4DFEFF0A00)",
    "h1:12:12 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA",
    "h1:12:12 [0] NCCL INFO HINT: In many cases this error occurs when the NCCL_IB_TIMEOUT is set too short.",
    # libibverbs in a container without every provider, UCX's own information
    "libibverbs: Warning: couldn't load driver 'libvmw_pvrdma-rdmav34.so': libvmw_pvrdma-rdmav34.so: cannot open "
    "shared object file: No such file or directory",
    "[1700000000.123456] [node1:4242:0]     parser.c:1989 UCX  INFO  UCX_* env variable: UCX_TLS=rc,sm,self",
    # ulimit -a of a job that had it right
    "max locked memory           (kbytes, -l) unlimited",
    # a boot's dmesg
    "[    0.000000] DMAR: IOMMU enabled",
    "[    0.012345] DMAR: Host address width 46",
    "[    0.012346] DMAR: DRHD base: 0x000000fbffc000 flags: 0x0",
    "[    0.812345] DMAR-IR: Enabled IRQ remapping in x2apic mode",
    "[    1.234567] AMD-Vi: Interrupt remapping enabled",
    "[    5.123456] nvidia: loading out-of-tree module taints kernel.",
    "[    5.234567] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023",
    "[    6.0] nvidia-peermem: module verification failed: signature and/or required key missing - tainting kernel",
    "[    7.0] mlx5_core 0000:56:00.0: firmware version: 28.39.1002",
    "[    7.1] mlx5_core 0000:56:00.0: Rate limit: 127 rates are supported, range: 0Mbps to 97656Mbps",
    # exit statuses that share a number with a completion status
    "srun: error: node1: task 0: Exited with exit code 12",
    "Process exited with exit status 12",
    "HTTP request returned status 5",
]


def test_what_healthy_runs_print_is_not_an_rdma_or_kernel_cause():
    for line in HEALTHY:
        meaning = read_line(line)
        assert meaning is None or meaning.space not in ("rdma", "kernel"), (line, meaning)
        assert best_in("rdma", line) is None and best_in("kernel", line) is None, line


WATCHDOG = ("[rank{r}]:[E ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=212, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600031 "
            "milliseconds before timing out.")


def test_a_node_whose_kernel_killed_its_rank_is_named_over_the_others_timeouts():
    n1 = ["[rank1]: step 1200 loss 2.13",
          "[ 8123.456700] python invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0, oom_score_adj=0",
          "[ 8123.456789] Out of memory: Killed process 4242 (python) total-vm:123456789kB, anon-rss:98765432kB, "
          "file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:204800kB oom_score_adj:0",
          "E0101 10:00:00.000000 4200 torch/distributed/elastic/multiprocessing/api.py:826] failed (exitcode: -9) "
          "local_rank: 1 (pid: 4242) of binary: /usr/bin/python3"]
    n2 = [WATCHDOG.format(r=2), WATCHDOG.format(r=3)]
    cause = classify({"n1": NodeLines(n1, exit_code=1), "n2": NodeLines(n2, exit_code=1)})
    assert (cause.kind, cause.nodes) == ("killed", ["n1"]), cause


def test_a_fabric_completion_error_outranks_the_watchdog_and_a_hung_task_names_its_node():
    n1 = ["h1:4242:4300 [1] transport/net_ib.cc:2244 NCCL WARN NET/IB: Got completion from peer 10.0.0.2<45678> with "
          "status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:10.0.0.1 remoteGids ::ffff:10.0.0.2 hca "
          "mlx5_0",
          "h1:4242:4300 [1] NCCL INFO transport/net.cc:1298 -> 6",
          WATCHDOG.format(r=1)]
    n2 = [WATCHDOG.format(r=2)]
    cause = classify({"n1": NodeLines(n1, exit_code=1), "n2": NodeLines(n2, exit_code=1)})
    assert (cause.kind, cause.nodes) == ("ib", ["n1"]), cause
    # a node whose kernel says a task sat in D state (an NFS checkpoint write) under the same timeout
    n3 = ["[52311.000001] INFO: task python:4242 blocked for more than 122 seconds.",
          "[52311.000002]       Not tainted 5.15.0-91-generic #101-Ubuntu",
          "[52311.000003] \"echo 0 > /proc/sys/kernel/hung_task_timeout_secs\" disables this message.",
          "[52311.000004] task:python          state:D stack:0     pid:4242  ppid:4200   flags:0x00004002",
          "[52311.000005]  nfs_wait_on_request+0x30/0x40 [nfs]", WATCHDOG.format(r=3)]
    cause = classify({"n2": NodeLines(n2, exit_code=1), "n3": NodeLines(n3, exit_code=1)})
    assert (cause.kind, cause.nodes) == ("hung-task", ["n3"]), cause


def test_ucx_memlock_and_iommu_faults_are_the_cause_of_their_node():
    memlock = [UCX_LOG.format(file="ib_md.c", line=314, text="ibv_reg_mr(address=0x7f5c2c000000, length=4194304, "
                              "access=0xf) failed: Cannot allocate memory : Please set max locked memory (ulimit -l) "
                              "to 'unlimited' (current: 64 kbytes)"),
               UCX_LOG.format(file="ucp_mm.c", line=70, text="failed to register address 0x7f5c2c000000 mem_type "
                              "bit 0x1 length 4194304 on md[4]=mlx5_0: Input/output error (md supports: host)"),
               "RuntimeError: UCX: failed to register memory"]
    cause = classify({"n1": NodeLines(memlock, exit_code=1), "n2": NodeLines([WATCHDOG.format(r=1)], exit_code=1)})
    assert (cause.kind, cause.nodes) == ("memlock", ["n1"]), cause
    iommu = ["[  31.1] DMAR: DRHD: handling fault status reg 2",
             "[  31.2] DMAR: [DMA Write NO_PASID] Request device [01:00.0] fault addr 0x2800000000 [fault reason 0x05] "
             "PTE Write access is not set", WATCHDOG.format(r=0)]
    cause = classify({"n1": NodeLines(iommu, exit_code=1), "n2": NodeLines([WATCHDOG.format(r=1)], exit_code=1)})
    assert (cause.kind, cause.nodes) == ("iommu", ["n1"]), cause
