"""A real Slurm in the sandbox: munge, a slurmctld and one slurmd per node (Debian's slurm-wlm).

- munged runs on this host with a key of the sandbox's own and a socket in the sandbox's
  state directory (slurm.conf's AuthInfo names it): every node reaches it through the
  filesystem, as every node of a real cluster has the same key.
- slurmctld runs in a network namespace of its own ("NAME-ctl", the last address of the
  sandbox's /22, on the same bridge): it listens there, never on the host's addresses.
- each node's slurmd runs inside that node's namespaces (network, UTS, mount, PID: entered
  through the node's first process), with its own spool directory, pid file and log; it is
  not a child of sshd, so stopping sshd leaves Slurm running.
- proctrack/linuxproc, task/none, no accounting and no cgroup plugins: what a host without
  cgroup delegation can run. Nodes can declare fake GRES gpu counts (gres.conf Count= without
  File=), as a GPU node's slurm.conf would.

This host is the login node: `salloc`, `srun` and `sbatch` run here with SLURM_CONF pointing at
the sandbox's slurm.conf (`sandbox up` prints the export). `stop_slurm` (slurm_stop.py; and `down`) removes it all.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import stat
import subprocess
import time
from typing import Dict, List

from clustercheck.sandbox.cluster import Sandbox, down
from clustercheck.sandbox.processes import SandboxError, first_process_alive, sh

SLURM_TOOLS = ("munged", "slurmctld", "slurmd", "srun", "sbatch", "salloc", "scontrol", "sinfo")
CPUS_PER_NODE = 8     # declared (SlurmdParameters=config_overrides): eight ranks per node fit
START_TIMEOUT_S = 60.0
CGROUP_MOUNTS = ("mountpoint -q /sys/fs/cgroup || { mount -t tmpfs cgroup_root /sys/fs/cgroup && "
                 "for c in cpuset memory devices freezer cpu cpuacct; do mkdir -p /sys/fs/cgroup/$c && "
                 "mount -t cgroup -o $c cgroup /sys/fs/cgroup/$c || exit 1; done; mkdir -p /sys/fs/cgroup/systemd && mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd; }")


def missing_slurm() -> List[str]:
    return [t for t in SLURM_TOOLS if shutil.which(t) is None and not os.path.exists(f"/usr/sbin/{t}")]


def slurm_dir(box: Sandbox) -> str:
    return os.path.join(box.dir, "slurm")


def slurm_conf(box: Sandbox) -> str:
    return os.path.join(slurm_dir(box), "slurm.conf")


def controller(box: Sandbox):
    """(netns, address, host-side veth) of the controller."""
    net = ipaddress.ip_network(box.subnet)
    return f"{box.name}-ctl", str(list(net.hosts())[-1]), f"{box.name}-ch"


def environment(box: Sandbox) -> Dict[str, str]:
    """What a shell on this host (the login node) needs for salloc / srun / sbatch."""
    return {"SLURM_CONF": slurm_conf(box)}


def _write_conf(box: Sandbox, gpus: int) -> None:
    where = slurm_dir(box)
    ctl_ns, ctl_addr, _ = controller(box)
    lines = [
        f"ClusterName={box.name}", f"SlurmctldHost={ctl_ns}({ctl_addr})",
        "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={where}/munge.sock",
        "SlurmUser=root", "SlurmdUser=root",
        f"StateSaveLocation={where}/state", f"SlurmdSpoolDir={where}/spool/%n",
        f"SlurmctldPidFile={where}/slurmctld.pid", f"SlurmdPidFile={where}/slurmd.%n.pid",
        f"SlurmctldLogFile={where}/slurmctld.log", f"SlurmdLogFile={where}/slurmd.%n.log",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none", "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core", "SlurmdParameters=config_overrides", "ReturnToService=2",
        "SlurmdTimeout=30", "SlurmctldTimeout=30", "MessageTimeout=20", "KillWait=5", "MpiDefault=none",
        "GresTypes=gpu", "CommunicationParameters=NoAddrCache", "",
    ]
    gres = f" Gres=gpu:{gpus}" if gpus else ""
    for node in box.nodes:
        lines.append(f"NodeName={node.name} NodeAddr={node.addr} CPUs={CPUS_PER_NODE} RealMemory=1024{gres} "
                     f"State=UNKNOWN")
    lines.append("PartitionName=sandbox Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    with open(slurm_conf(box), "w") as handle:
        handle.write("\n".join(lines) + "\n")
    # Slurm counts a node's GPUs from the device files gres.conf names: stand-ins with /dev/null's numbers
    devices = []
    for index in range(gpus):
        path = os.path.join(where, f"fakegpu{index}")
        if not os.path.exists(path):
            os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        devices.append(path)
    with open(os.path.join(where, "gres.conf"), "w") as handle:
        handle.write("AutoDetect=off\n" + (f"Name=gpu File={where}/fakegpu[0-{gpus - 1}]\n" if gpus else ""))


def up_with_slurm(num_nodes: int, name: str, shared_hostkey: bool = False, gpus: int = 0) -> Sandbox:
    """`sandbox up --slurm`: the nodes, then Slurm on them; nothing is left if Slurm does not start."""
    box = Sandbox.up(num_nodes, name, shared_hostkey=shared_hostkey)
    try:
        start_slurm(box, gpus)
    except BaseException:
        down(name)
        raise
    return box


def start_slurm(box: Sandbox, gpus: int = 0) -> None:
    missing = missing_slurm()
    if missing:
        raise SandboxError(f"Slurm is not installed here ({', '.join(missing)} missing; Debian: slurm-wlm munge)")
    where = slurm_dir(box)
    for sub in ("", "state", "spool"):
        os.makedirs(os.path.join(where, sub), mode=0o700, exist_ok=True)
    key = os.path.join(where, "munge.key")
    if not os.path.exists(key):
        with open(os.open(key, os.O_WRONLY | os.O_CREAT, 0o400), "wb") as handle:
            handle.write(os.urandom(1024))
    sh("munged", "-f", f"--key-file={key}", f"--socket={where}/munge.sock", f"--pid-file={where}/munged.pid",
       f"--log-file={where}/munged.log", f"--seed-file={where}/munged.seed")
    _write_conf(box, gpus)
    ctl_ns, ctl_addr, veth = controller(box)
    net = ipaddress.ip_network(box.subnet)
    sh("ip", "netns", "add", ctl_ns)
    sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ctl_ns)
    sh("ip", "link", "set", veth, "master", box.bridge, "up")
    sh("ip", "-n", ctl_ns, "-batch", "-", input=f"addr add {ctl_addr}/{net.prefixlen} dev eth0\nlink set eth0 up\n"
                                                 f"link set lo up\n")
    # its own hostname: slurmctld refuses to start on a host that SlurmctldHost does not name
    sh("ip", "netns", "exec", ctl_ns, "unshare", "--uts", "--", "/bin/sh", "-c",
       f"hostname {ctl_ns} && exec slurmctld -f {slurm_conf(box)} -i")
    for node in box.nodes:
        start_slurmd(box, node.name)
    wait_idle(box, [n.name for n in box.nodes])


def start_slurmd(box: Sandbox, name: str) -> None:
    node = box.node(name)
    init = init_pid(box, name)
    if not init:
        raise SandboxError(f"{name} has no first process to enter (is the node up?)")
    # `ip netns exec` gave the node a fresh /sys without the cgroup mounts Slurm 22.05's cgroup
    # detection insists on (no plugin uses them here: proctrack/linuxproc, task/none)
    sh("nsenter", "-t", str(init), "-m", "-p", "--", "/bin/sh", "-c", CGROUP_MOUNTS)
    sh("nsenter", "-t", str(init), "-n", "-u", "-m", "-p", "--", "env", f"SLURM_CONF={slurm_conf(box)}", "slurmd",
       "-f", slurm_conf(box), "-N", node.name)


def init_pid(box: Sandbox, name: str) -> int:
    node = box.node(name)
    return node.init_pid if first_process_alive(node.init_pid, node.netns) else 0


def scontrol(box: Sandbox, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["scontrol", *args], capture_output=True, text=True, check=check,
                          env=dict(os.environ, **environment(box)))


def node_states(box: Sandbox) -> Dict[str, str]:
    out = subprocess.run(["sinfo", "-N", "-h", "-o", "%N %T"], capture_output=True, text=True,
                         env=dict(os.environ, **environment(box))).stdout
    return {line.split()[0]: line.split()[1] for line in out.splitlines() if len(line.split()) == 2}


def wait_idle(box: Sandbox, names: List[str], timeout_s: float = START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    states: Dict[str, str] = {}
    while time.monotonic() < deadline:
        states = node_states(box)
        if all(states.get(n, "").rstrip("*") == "idle" for n in names):
            return
        time.sleep(0.5)
    raise SandboxError(f"Slurm nodes did not become idle within {timeout_s:g} s: {states}; see {slurm_dir(box)}")


def drain(box: Sandbox, name: str, reason: str) -> None:
    scontrol(box, "update", f"nodename={name}", "state=drain", f"reason={reason}")


def resume(box: Sandbox, name: str) -> None:
    scontrol(box, "update", f"nodename={name}", "state=resume", check=False)
