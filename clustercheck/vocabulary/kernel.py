"""The node kernel's own log lines (dmesg, journalctl -k), the "kernel" space: what the kernel and its drivers say
when a node stops a training job. The OOM killer (mm/oom_kill.c), tasks hung in D state (kernel/hung_task.c), the
IOMMU refusing a device's DMA (Intel VT-d drivers/iommu/intel/dmar.c, AMD-Vi drivers/iommu/amd/iommu.c, Arm SMMU
drivers/iommu/arm/arm-smmu*/), the NVIDIA driver's NVRM lines other than its Xid events (those are the "xid" space,
nvml.py: "NVRM: Xid (PCI:...): 79, ..." and "GPU has fallen off the bus"), GPUDirect RDMA's nvidia-peermem, the
ConnectX (mlx5_core) driver's command timeouts and firmware faults, and a NIC's transmit watchdog
(net/sched/sch_generic.c). The neighbour table overflow row of this space lives with its sysctls (system.py).

Sources, at the commits read: torvalds/linux (the files named per row; format strings checked across the versions
that print them), NVIDIA/open-gpu-kernel-modules df1c9a3de2be4b130f4fc7680f7198193d8ac6ad (kernel-open/nvidia/nv.c,
nv-pci.c, kernel-open/nvidia-peermem/nvidia-peermem.c, src/nvidia/arch/nvalloc/unix/src/osapi.c, osinit.c).

Not rows: what every healthy boot prints ("DMAR: IOMMU enabled", "DMAR: DRHD base: ...", "AMD-Vi: Interrupt
remapping enabled", "NVRM: loading NVIDIA UNIX x86_64 Kernel Module ...", "NVRM: GPU at PCI:0000:3b:00: GPU-..." which
only names the GPU an Xid line then speaks of), and the driver's "NVRM: os_schedule: Attempted to yield the CPU while
in atomic or interrupt context" (a driver bug report that names no cause of a job's failure).
"""

from __future__ import annotations

from typing import List

from clustercheck.vocabulary.spaces import Row

LINUX = "torvalds/linux "
NVIDIA = "NVIDIA/open-gpu-kernel-modules "

ROWS: List[Row] = [
    # ---- the OOM killer (mm/oom_kill.c): the host ran out of memory and the kernel SIGKILLed a rank -------------
    # "killed", as Slurm's cgroup "oom-kill event" (messages.py) and kinds.py's killed (SIGKILL from the OOM killer)
    Row("kernel", r"\bOut of memory: Kill(?:ed)? process \d+ \(|\bKilled process \d+ \([^)\n]*\) total-vm:|"
                  r"\binvoked oom-killer: gfp_mask=|\boom-kill:constraint=CONSTRAINT_\w+|"
                  r"\boom_reaper: reaped process \d+ \(", "killed", "oom-killer",
        LINUX + "mm/oom_kill.c __oom_kill_process: \"%s: Killed process %d (%s) total-vm:%lukB, anon-rss:%lukB, "
                "...\" (message \"Out of memory\"; before 4.19 \"Killed process %d (%s) total-vm:\" after \"Out of "
                "memory: Kill process %d (%s) score %u or sacrifice child\"), dump_header \"%s invoked oom-killer: "
                "gfp_mask=%#x(%pGg), order=%d, oom_score_adj=%hd\", dump_oom_summary \"oom-kill:constraint=%s,"
                "nodemask=%*pbl,...\", oom_reap_task_mm \"oom_reaper: reaped process %d (%s)\""),
    Row("kernel", r"\bMemory cgroup out of memory: Kill(?:ed)? process \d+ \(|\boom-kill:constraint=CONSTRAINT_MEMCG\b",
        "killed", "memcg oom-killer",
        LINUX + "mm/oom_kill.c, mm/memcontrol.c mem_cgroup_out_of_memory: \"Memory cgroup out of memory: Killed "
                "process %d (%s) ...\" (the job's cgroup limit: Slurm's --mem, a container's memory limit)"),
    # ---- hung tasks (kernel/hung_task.c check_hung_task) ------------------------------------------------------
    Row("kernel", r"\bINFO: task \S+:\d+ blocked for more than \d+ seconds\.|"
                  r"\"echo 0 > /proc/sys/kernel/hung_task_timeout_secs\" disables this message", "hung-task",
        "hung task",
        LINUX + "kernel/hung_task.c check_hung_task: pr_err(\"INFO: task %s:%d blocked for more than %ld "
                "seconds.\\n\"), pr_err(\"\\\"echo 0 > /proc/sys/kernel/hung_task_timeout_secs\\\" disables this "
                "message.\\n\")"),
    # ---- the IOMMU blocked a device's DMA ------------------------------------------------------------------------
    Row("kernel", r"\bDMAR: ?\[(?:DMA (?:Read|Write)|INTR-REMAP)[^\]\n]*\] Request device \[|"
                  r"\bDMAR: ?\[fault reason \d+\]|\bDRHD: handling fault status reg\b|\bdmar_fault: \d+ callbacks "
                  r"suppressed", "iommu", "DMAR fault",
        LINUX + "drivers/iommu/intel/dmar.c dmar_fault_do_one: pr_err(\"[%s NO_PASID] Request device [%02x:%02x.%d] "
                "fault addr 0x%llx [fault reason 0x%02x] %s\\n\", \"DMA Read\" / \"DMA Write\"; \"[INTR-REMAP] "
                "Request device [%02x:%02x.%d] fault index 0x%llx ...\"; dmar_fault: pr_err(\"DRHD: handling fault "
                "status reg %x\\n\") (\"DMAR: \" its pr_fmt; before 5.x \"DMAR:[DMA Read] Request device "
                "[%02x:%02x.%d] fault addr %llx\" and \"DMAR:[fault reason %02d] %s\")"),
    Row("kernel", r"\bAMD-Vi: Event logged \[(?:IO_PAGE_FAULT|INVALID_DEVICE_REQUEST|ILLEGAL_DEV_TABLE_ENTRY|"
                  r"DEV_TAB_HARDWARE_ERROR|PAGE_TAB_HARDWARE_ERROR|COMMAND_HARDWARE_ERROR|IOTLB_INV_TIMEOUT)\b|"
                  r"\bAMD-Vi: Completion-Wait loop timed out", "iommu", "AMD-Vi fault",
        LINUX + "drivers/iommu/amd/iommu.c amd_iommu_report_page_fault: \"Event logged [IO_PAGE_FAULT domain=0x%04x "
                "address=0x%llx flags=0x%04x]\" (older \"[IO_PAGE_FAULT device=%02x:%02x.%x domain=...\"), "
                "iommu_print_event's other events; \"AMD-Vi: Completion-Wait loop timed out\""),
    Row("kernel", r"\barm-smmu[\w.-]* \S+: (?:Unhandled context fault: fsr=0x|event 0x[0-9a-f]+ received)", "iommu",
        "SMMU fault",
        LINUX + "drivers/iommu/arm/arm-smmu/arm-smmu.c arm_smmu_context_fault: \"Unhandled context fault: fsr=0x%x, "
                "iova=0x%08lx, fsynr=0x%x, cbfrsynra=0x%x, cb=%d\"; arm-smmu-v3.c arm_smmu_evtq_thread: \"event "
                "0x%02x received:\""),
    # ---- the NVIDIA driver's NVRM lines that are not Xid events ----------------------------------------------------
    Row("kernel", r"\bNVRM: (?:GPU \S+: )?RmInitAdapter failed!|\bNVRM: GPU \S+: rm_init_adapter failed, device "
                  r"minor number|\bNVRM: fallen off the bus and is not responding to commands", "gpu-hardware",
        "NVRM RmInitAdapter failed",
        NVIDIA + "src/nvidia/arch/nvalloc/unix/src/osinit.c RmInitAdapter: NV_DEV_PRINTF(\"RmInitAdapter failed! "
                 "(0x%x:0x%x:%d)\\n\") (\"NVRM: GPU %04x:%02x:%02x.%x: \" its prefix); kernel-open/nvidia/nv.c "
                 "nv_start_device: \"rm_init_adapter failed, device minor number %d\"; osapi.c: \"NVRM: The NVIDIA "
                 "GPU %04x:%02x:%02x.%x\\nNVRM: (PCI ID: %04x:%04x) installed in this system has\\nNVRM: fallen off "
                 "the bus and is not responding to commands.\\n\""),
    Row("kernel", r"\bNVRM: API mismatch: the client\b|\bNVRM: No NVIDIA devices probed\.|"
                  r"\bNVRM: The NVIDIA probe routine failed for \d+ device|"
                  r"\bNVRM: installed in this system is not supported by the\b|"
                  r"\bNVRM: This PCI I/O region assigned to your NVIDIA device is invalid", "cuda-setup",
        "NVRM driver setup",
        NVIDIA + "src/nvidia/arch/nvalloc/unix/src/osapi.c: \"NVRM: API mismatch: the client '%s' (pid %u)\\nNVRM: has "
                 "the version %s, but this kernel module has\\nNVRM: the version %s.\", \"NVRM: installed in this "
                 "system is not supported by the\\nNVRM: NVIDIA %s driver release.\"; kernel-open/nvidia/nv.c: "
                 "\"NVRM: No NVIDIA devices probed.\", \"NVRM: The NVIDIA probe routine failed for %d device(s).\"; "
                 "nv-pci.c: \"NVRM: This PCI I/O region assigned to your NVIDIA device is invalid:\""),
    # ---- GPUDirect RDMA: nvidia-peermem (kernel-open/nvidia-peermem/nvidia-peermem.c peer_err) --------------------
    Row("kernel", r"\bnvidia-peermem \w+:\d+ ERROR |could not insert '(?:nvidia[_-]peermem|nv_peer_mem)'", "ib",
        "nvidia-peermem",
        NVIDIA + "kernel-open/nvidia-peermem/nvidia-peermem.c: #define peer_err(FMT, ARGS...) printk(KERN_ERR "
                 "\"nvidia-peermem\" \" %s:%d ERROR \" FMT, ...) (\"nv_mem_client_init -- error while registering "
                 "traditional client\", \"error %d while calling nvidia_p2p_get_pages()\"); kmod's modprobe: "
                 "\"modprobe: ERROR: could not insert 'nvidia_peermem': Invalid argument\" (no MLNX_OFED peer-memory "
                 "API in the running kernel)"),
    # ---- the ConnectX driver (drivers/net/ethernet/mellanox/mlx5/core/cmd.c, health.c) ---------------------------
    Row("kernel", r"\bmlx5_core \S+:[^\n]*(?:\w+\(0x[0-9a-f]+\)(?: Async,)? timeout\. Will cause a leak of a command "
                  r"resource|canceled on out of queue timeout|\bFatal error \d+ detected|handling bad device here|"
                  r"health compromised - reached miss count|health recovery flow aborted)", "ib", "mlx5 firmware",
        LINUX + "drivers/net/ethernet/mellanox/mlx5/core/cmd.c wait_func / cb_timeout_handler: \"%s(0x%x) timeout. "
                "Will cause a leak of a command resource\" (\"cmd[%d]: %s(0x%x) Async, timeout. ...\"), "
                "\"%s(0x%x) canceled on out of queue timeout.\"; health.c: \"Fatal error %u detected\", \"handling "
                "bad device here\", \"device's health compromised - reached miss count\", \"health recovery flow "
                "aborted, PCI reads still not working\""),
    # ---- a NIC stopped sending (net/sched/sch_generic.c dev_watchdog) -----------------------------------------------
    Row("kernel", r"\bNETDEV WATCHDOG: [^\n]*transmit queue \d+ timed out", "network", "NETDEV WATCHDOG",
        LINUX + "net/sched/sch_generic.c dev_watchdog: WARN_ONCE(1, \"NETDEV WATCHDOG: %s (%s): transmit queue %u "
                "timed out %u ms\\n\") (6.x: netdev_crit(dev, \"NETDEV WATCHDOG: CPU: %d: transmit queue %u timed "
                "out %u ms\\n\"))"),
]
