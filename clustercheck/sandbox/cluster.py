"""A cluster on one Linux host: network namespaces as nodes, each with a real sshd.

Each node has its own IPv4 address in a /22 the sandbox owns (10.213.X.0/22, X chosen
so that it collides with no route of the host and no other sandbox), its own
hostname (UTS namespace), its own process table (PID namespace), its own /tmp, its own
/etc/hosts (``ip netns exec`` binds /etc/netns/NODE/hosts over /etc/hosts) and its own
sshd with its own host key. Nodes
are joined by veth links on a bridge; the host's end of the bridge holds .1, so the
tool reaches the nodes and nothing else. Nodes get no default route.

State lives in /run/clustercheck-sandbox/NAME: keys, configs, and the nodes file,
ssh_config and known_hosts a user passes to clustercheck. ``down`` removes all of it,
also after a crash, by name prefix. Needs root.
"""

from __future__ import annotations

import glob
import ipaddress
import json
import os
import re
import shlex
import shutil
import signal
import socket
import time
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional

from clustercheck.sandbox.hostsettings import STATE_ROOT, raise_neighbour_table, restore_host_settings
from clustercheck.sandbox.processes import (SandboxError, first_process_alive, host_pid, naming, node_first, pid_alive,
                                           read_text, sh, spawn)
from clustercheck.sandbox.slurm_stop import stop_slurm

SUBNET_FORMAT = "10.213.{}.0/22"
NAME_RE = re.compile(r"^[a-z][a-z0-9]{0,5}$")
MAX_NODES = 1000   # a Linux bridge takes 1,024 ports
REQUIRED_TOOLS = ("ip", "sshd", "ssh-keygen", "unshare", "nsenter", "iptables", "tc")


def missing_requirements() -> List[str]:
    """Why a sandbox cannot be built here (empty when it can)."""
    problems = []
    if os.geteuid() != 0:
        problems.append("not root (network namespaces, veth and sshd need root)")
    for tool in REQUIRED_TOOLS:
        if shutil.which(tool) is None and not os.path.exists(f"/usr/sbin/{tool}"):
            problems.append(f"{tool} not installed (Debian: openssh-server, iproute2, iptables, util-linux)")
    return problems


@dataclass
class SandboxNode:
    name: str          # hostname and inventory name, e.g. cc0-n1
    netns: str
    addr: str
    veth: str          # the host's end of the node's link
    sshd_config: str
    sshd_pid: int = 0
    init_pid: int = 0  # the node's first process (its PID namespace's 1)
    mounts: List[str] = field(default_factory=list)  # bind-mount targets inside the node


@dataclass
class Sandbox:
    name: str
    subnet: str = ""
    nodes: List[SandboxNode] = field(default_factory=list)
    faults: Dict[str, List[str]] = field(default_factory=dict)
    shared_hostkey: bool = False

    # ---- paths -------------------------------------------------------------------
    @property
    def dir(self) -> str:
        return os.path.join(STATE_ROOT, self.name)

    @property
    def bridge(self) -> str:
        return f"{self.name}-br"

    @property
    def host_addr(self) -> str:
        """The host's address on the sandbox's bridge (the first of the subnet)."""
        return str(next(ipaddress.ip_network(self.subnet).hosts()))

    @property
    def nodes_file(self) -> str:
        return os.path.join(self.dir, "nodes.txt")

    @property
    def ssh_config(self) -> str:
        return os.path.join(self.dir, "ssh_config")

    @property
    def known_hosts(self) -> str:
        return os.path.join(self.dir, "known_hosts")

    @property
    def client_key(self) -> str:
        return os.path.join(self.dir, "id_ed25519")

    def node_tmp(self, node: SandboxNode) -> str:
        """The directory the node sees as its /tmp: node-local, as on a real cluster."""
        return os.path.join(self.dir, f"tmp.{node.name}")

    def hosts_file(self, node: SandboxNode) -> str:
        return f"/etc/netns/{node.netns}/hosts"

    def node(self, name: str) -> SandboxNode:
        for node in self.nodes:
            if name in (node.name, node.netns, node.addr):
                return node
        raise SandboxError(f"no node {name!r} in sandbox {self.name} ({', '.join(n.name for n in self.nodes)})")

    # ---- state -------------------------------------------------------------------
    def save(self) -> None:
        with open(os.path.join(self.dir, "state.json"), "w") as handle:
            json.dump(asdict(self), handle, indent=1)

    @classmethod
    def load(cls, name: str) -> "Sandbox":
        path = os.path.join(STATE_ROOT, name, "state.json")
        try:
            with open(path) as handle:
                data = json.load(handle)
        except FileNotFoundError:
            raise SandboxError(f"no sandbox named {name!r} is up (no {path})") from None
        data["nodes"] = [SandboxNode(**n) for n in data["nodes"]]
        return cls(**data)

    # ---- up / down ---------------------------------------------------------------
    @classmethod
    def up(cls, num_nodes: int, name: str = "cc0", shared_hostkey: bool = False) -> "Sandbox":
        """Build the nodes. shared_hostkey: one host key for all (size tests: keygen is most of the build)."""
        if not NAME_RE.match(name):
            raise SandboxError(f"sandbox name {name!r}: 1-6 lower-case letters and digits, a letter first")
        if not 1 <= num_nodes <= MAX_NODES:
            raise SandboxError(f"number of nodes {num_nodes}: from 1 to {MAX_NODES}")
        problems = missing_requirements()
        if problems:
            raise SandboxError("cannot build a sandbox here: " + "; ".join(problems))
        down(name)  # `up` twice leaves no debris
        box = cls(name=name, subnet=_free_subnet(), shared_hostkey=shared_hostkey)
        try:
            box._build(num_nodes)
        except BaseException:
            down(name)
            raise
        return box

    def _build(self, num_nodes: int) -> None:
        os.makedirs(self.dir, mode=0o700)   # makes STATE_ROOT too
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        raise_neighbour_table(num_nodes)
        net = ipaddress.ip_network(self.subnet)
        hosts = list(net.hosts())
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"clustercheck-sandbox-{self.name}",
           "-f", self.client_key)
        shutil.copy(self.client_key + ".pub", os.path.join(self.dir, "authorized_keys"))
        for i in range(1, num_nodes + 1):
            netns = f"{self.name}-n{i}"
            self.nodes.append(SandboxNode(
                name=netns, netns=netns, addr=str(hosts[i]), veth=f"{self.name}-{i}h",
                sshd_config=os.path.join(self.dir, f"sshd_config.n{i}")))
        self.save()  # from here on, `down` knows what to remove
        root_batch = [f"link add {self.bridge} type bridge", f"addr add {hosts[0]}/{net.prefixlen} dev {self.bridge}",
                      f"link set {self.bridge} up"]
        for node in self.nodes:
            root_batch += [f"netns add {node.netns}",
                           f"link add {node.veth} type veth peer name eth0 netns {node.netns}",
                           f"link set {node.veth} master {self.bridge} up"]
        sh("ip", "-batch", "-", input="\n".join(root_batch) + "\n")
        for node in self.nodes:
            sh("ip", "-n", node.netns, "-batch", "-", input=(
                f"addr add {node.addr}/{net.prefixlen} dev eth0\nlink set eth0 up\nlink set lo up\n"))
            os.makedirs(f"/etc/netns/{node.netns}", exist_ok=True)
            self._write_hosts(node)
            self._write_sshd_config(node)
        self._start_sshds(self.nodes)
        self._write_client_files()
        self.save()

    def _write_hosts(self, node: SandboxNode, own_addr: Optional[str] = None) -> None:
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        for other in self.nodes:
            addr = own_addr if (other is node and own_addr) else other.addr
            lines.append(f"{addr}\t{other.name}")
        # Rewritten in place: the file is bind-mounted into the node, a rename would not show.
        with open(self.hosts_file(node), "w") as handle:
            handle.write("\n".join(lines) + "\n")

    def host_key(self, node: SandboxNode) -> str:
        return os.path.join(self.dir, "ssh_host_ed25519_key" + ("" if self.shared_hostkey else f".{node.name}"))

    def _write_sshd_config(self, node: SandboxNode) -> None:
        key = self.host_key(node)
        if not os.path.exists(key):
            sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", node.name, "-f", key)
        with open(node.sshd_config, "w") as handle:
            handle.write("\n".join([
                f"ListenAddress {node.addr}:22",
                f"HostKey {key}",
                f"PidFile {self.dir}/sshd.{node.name}.pid",
                f"AuthorizedKeysFile {self.dir}/authorized_keys",
                "PermitRootLogin prohibit-password",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "UsePAM no", "StrictModes no", "UseDNS no", "PrintMotd no", "PrintLastLog no",
                "AllowTcpForwarding yes", "MaxStartups 200:30:400", "MaxSessions 64", "LogLevel ERROR",
                "Subsystem sftp internal-sftp", ""]))

    def _start_sshds(self, nodes: List[SandboxNode]) -> None:
        for node in nodes:
            pidfile = f"{self.dir}/sshd.{node.name}.pid"
            if os.path.exists(pidfile):
                os.unlink(pidfile)
            node.sshd_pid = 0
            sshd = ["/usr/sbin/sshd", "-D", "-f", node.sshd_config, "-E", f"{self.dir}/sshd.{node.name}.log"]
            if first_process_alive(node.init_pid, node.netns):
                # sshd restarted on a live node: in the node's own namespaces, its processes and mounts kept
                spawn(["nsenter", "-t", str(node.init_pid), "-n", "-u", "-m", "-p", "--", *sshd])
            else:
                node.init_pid = self._start_node(node, " ".join(shlex.quote(a) for a in sshd))
        deadline = time.monotonic() + 20 + 0.05 * len(nodes)
        for node in nodes:
            pidfile = f"{self.dir}/sshd.{node.name}.pid"
            while not _listening(node.addr, 22):
                if time.monotonic() > deadline:
                    raise SandboxError(f"sshd of {node.name} did not start; see {self.dir}/sshd.{node.name}.log")
                time.sleep(0.02)
            while not node.sshd_pid:  # sshd creates the file a moment before it writes the pid
                try:
                    with open(pidfile) as handle:
                        node.sshd_pid = host_pid(node.netns, node.init_pid, int(handle.read().split()[0]))
                except (OSError, IndexError, ValueError):
                    pass
                if not node.sshd_pid:
                    if time.monotonic() > deadline:
                        raise SandboxError(f"sshd of {node.name} wrote no pid to {pidfile}") from None
                    time.sleep(0.01)

    def _start_node(self, node: SandboxNode, sshd: str) -> int:
        """The node's first process; returns its pid on this host.

        A UTS namespace of its own gives the node its hostname, a PID namespace its own process
        table (a tool that lists the node's processes sees only them), and a mount namespace
        nested in the one `ip netns exec` made (with the node's /etc/hosts) its own /proc and its
        own /tmp: run directories are node-local. The first process is a shell that reaps orphans,
        as a node's init does; sshd runs under it in the foreground, so stopping sshd leaves the
        node's other processes (and its mounts) alive, and a restarted sshd joins them."""
        tmp = self.node_tmp(node)
        os.makedirs(tmp, exist_ok=True)
        os.chmod(tmp, 0o1777)
        init = (f"mount --bind {tmp} /tmp && {self._local_home_state(node)}hostname {node.name} || exit 1; "
                f"{sshd} & while :; do wait; sleep 2; done")
        proc = spawn(["ip", "netns", "exec", node.netns, "unshare", "--uts", "--pid", "--fork", "--mount-proc",
                       "--", "/bin/sh", "-c", init])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:   # `ip netns exec` execs unshare, whose child is the node's init
            children = read_text(f"/proc/{proc.pid}/task/{proc.pid}/children").split()
            if children:
                return int(children[0])
            time.sleep(0.005)
        raise SandboxError(f"{node.name}: its first process did not start")

    def _local_home_state(self, node: SandboxNode) -> str:
        """Mounts that give the node its own copy of home-directory state its login rewrites.

        The nodes share this host's /root, and root's rc files run `pyenv init`, which rehashes
        the shims under a lock in ~/.pyenv/shims at every login: all nodes queued on one lock (a
        login waited up to 60 s at 256 nodes). A real node's home is its own; so is this one's
        shims directory (filled by the first login's rehash)."""
        shims = os.path.join(os.path.expanduser("~root"), ".pyenv", "shims")
        if not os.path.isdir(shims):
            return ""
        own = os.path.join(self.dir, f"shims.{node.name}")
        os.makedirs(own, exist_ok=True)
        return f"mount --bind {own} {shims} && "

    def _write_client_files(self) -> None:
        with open(self.nodes_file, "w") as handle:
            handle.write(f"# sandbox {self.name}: {len(self.nodes)} nodes in {self.subnet}; "
                         f"use with -F {self.ssh_config}\n")
            for node in self.nodes:
                handle.write(f"{node.name}\n")
        with open(self.ssh_config, "w") as handle:
            for node in self.nodes:
                handle.write(f"Host {node.name}\n    HostName {node.addr}\n")
            handle.write(f"\nHost {self.name}-n*\n    User root\n    Port 22\n    IdentityFile {self.client_key}\n"
                         f"    IdentitiesOnly yes\n    UserKnownHostsFile {self.known_hosts}\n"
                         f"    StrictHostKeyChecking yes\n    BatchMode yes\n")
        with open(self.known_hosts, "w") as handle:
            for node in self.nodes:
                with open(self.host_key(node) + ".pub") as pub:
                    kind, b64 = pub.read().split()[:2]
                handle.write(f"{node.addr} {kind} {b64}\n")

    def sshd_alive(self, node: SandboxNode) -> bool:
        return pid_alive(node.sshd_pid)

    def status(self) -> List[Dict[str, str]]:
        rows = []
        for node in self.nodes:
            rows.append({"node": node.name, "address": node.addr,
                         "sshd": "running" if self.sshd_alive(node) else "stopped",
                         "faults": ", ".join(self.faults.get(node.name, [])) or "-"})
        return rows


def _listening(addr: str, port: int) -> bool:
    try:
        with socket.create_connection((addr, port), timeout=0.5):
            return True
    except OSError:
        return False


def _free_subnet() -> str:
    """The first 10.213.X.0/22 that no route of the host and no other sandbox uses."""
    used = []
    for line in sh("ip", "-4", "route", "show", "table", "all", check=False).stdout.splitlines():
        dest = line.split()[0] if line.split() else ""
        if "/" in dest or re.match(r"^\d+\.\d+\.\d+\.\d+$", dest):
            try:
                used.append(ipaddress.ip_network(dest, strict=False))
            except ValueError:
                pass
    for x in range(0, 256, 4):
        net = ipaddress.ip_network(SUBNET_FORMAT.format(x))
        if not any(net.overlaps(u) for u in used if u.prefixlen > 0):
            return str(net)
    raise SandboxError("no free 10.213.X.0/22 subnet left for a sandbox")


def down(name: str) -> List[str]:
    """Remove everything sandbox `name` made, from its state or, after a crash, by name prefix."""
    removed = stop_slurm(name, os.path.join(STATE_ROOT, name))
    netns_re = re.compile(rf"^{re.escape(name)}-n\d+$")
    namespaces = [line.split()[0] for line in sh("ip", "netns", "list", check=False).stdout.splitlines()
                  if line.split() and netns_re.match(line.split()[0])]
    # every process of every node (sshd, sessions, slurmd, anything a test started) in one pass: TERM,
    # then KILL for each node's first process (PID 1 of its namespace ignores TERM; its namespace dies with
    # it) and `unshare`, one wait of at most 2 s for them all, then KILL for what is left
    pids = [int(p) for netns in namespaces for p in sh("ip", "netns", "pids", netns, check=False).stdout.split()]
    pids += [p for p in naming(os.path.join(STATE_ROOT, name) + "/") if p not in pids and node_first(p)]
    firsts = [p for p in pids if node_first(p)]
    for sig, targets in ((signal.SIGTERM, pids), (signal.SIGKILL, firsts)):
        for pid in targets:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 2
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for netns in namespaces:
        sh("ip", "netns", "del", netns, check=False)
        removed.append(netns)
    for group in glob.glob(f"/sys/fs/cgroup/cpu/clustercheck-{name}-n*"):   # faults.cpu_quota's, now empty
        try:
            os.rmdir(group)
            removed.append(group)
        except OSError:
            pass
    link_re = re.compile(rf"^{re.escape(name)}-(br|\d+h)(@.*)?$")
    for line in sh("ip", "-o", "link", "show", check=False).stdout.splitlines():
        parts = line.split(": ")
        if len(parts) > 1 and link_re.match(parts[1]):
            link = parts[1].split("@")[0]
            sh("ip", "link", "del", link, check=False)
            removed.append(link)
    if os.path.isdir("/etc/netns"):
        for entry in os.listdir("/etc/netns"):
            if netns_re.match(entry):
                shutil.rmtree(os.path.join("/etc/netns", entry), ignore_errors=True)
    state_dir = os.path.join(STATE_ROOT, name)
    if os.path.isdir(state_dir):
        shutil.rmtree(state_dir, ignore_errors=True)
        removed.append(state_dir)
    if not list_sandboxes():
        removed += restore_host_settings()
    return removed


def list_sandboxes() -> List[str]:
    if not os.path.isdir(STATE_ROOT):
        return []
    return sorted(d for d in os.listdir(STATE_ROOT) if os.path.exists(os.path.join(STATE_ROOT, d, "state.json")))
