"""The sandbox's network filesystem: a storage server of its own and every node a client over its own link.

The server is one more network namespace on the sandbox's bridge (NAME-n0, so `down` removes it
with the nodes) with an sshd that only serves SFTP from a directory of the sandbox's state. Every
node mounts it with sshfs (FUSE) in its own mount namespace, at the same path: the traffic crosses
the node's veth, so `fault slow NODE MBIT` (tc tbf) slows that node's storage as a slow port or
cable would on a cluster, and a node's mount can be made read-only or replaced on that node alone.

sshfs is mounted without its own caches (dir_cache=no) and with FUSE's one-second attribute and
entry caches: coherent within the storage stage's window, as a well-mounted NFS is.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import time

from clustercheck.sandbox.cluster import Sandbox, SandboxNode, _listening
from clustercheck.sandbox.processes import SandboxError, sh
from clustercheck.sandbox.faults import node_exec

SERVER = "n0"
OPTIONS = ("dir_cache=no,attr_timeout=1,entry_timeout=1,negative_timeout=0,ServerAliveInterval=5,"
           "ServerAliveCountMax=3,BatchMode=yes,StrictHostKeyChecking=yes,IdentitiesOnly=yes")


def server_netns(box: Sandbox) -> str:
    return f"{box.name}-{SERVER}"


def server_addr(box: Sandbox) -> str:
    return str(list(ipaddress.ip_network(box.subnet).hosts())[-1])


def mount_point(box: Sandbox) -> str:
    """Where every node sees the shared filesystem (the same path on every node)."""
    return os.path.join(box.dir, "shared")


def export_dir(box: Sandbox) -> str:
    return os.path.join(box.dir, "export")


def serve(box: Sandbox) -> str:
    """Start the storage server and mount it on every node; the path the nodes see it at."""
    if not shutil.which("sshfs"):
        raise SandboxError("sshfs is not installed (apt-get install sshfs): the sandbox's shared filesystem needs it")
    netns, addr, veth = server_netns(box), server_addr(box), f"{box.name}-0h"
    prefix = ipaddress.ip_network(box.subnet).prefixlen
    sh("ip", "netns", "add", netns)
    sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns)
    sh("ip", "link", "set", veth, "master", box.bridge, "up")
    sh("ip", "-n", netns, "-batch", "-", input=f"addr add {addr}/{prefix} dev eth0\nlink set eth0 up\n"
                                                "link set lo up\n")
    os.makedirs(export_dir(box), mode=0o755, exist_ok=True)
    os.makedirs(mount_point(box), mode=0o755, exist_ok=True)
    key = os.path.join(box.dir, "storage_host_key")
    if not os.path.exists(key):
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", netns, "-f", key)
    config = os.path.join(box.dir, "sshd_config.storage")
    with open(config, "w") as handle:
        handle.write("\n".join([
            f"ListenAddress {addr}:22", f"HostKey {key}", f"PidFile {box.dir}/sshd.storage.pid",
            f"AuthorizedKeysFile {box.dir}/authorized_keys", "PermitRootLogin prohibit-password",
            "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no",
            "UseDNS no", "MaxStartups 200:30:400", "MaxSessions 64", "LogLevel ERROR",
            "ForceCommand internal-sftp", "Subsystem sftp internal-sftp", ""]))
    sh("ip", "netns", "exec", netns, "/usr/sbin/sshd", "-f", config, "-E", f"{box.dir}/sshd.storage.log")
    deadline = time.monotonic() + 20
    while not _listening(addr, 22):
        if time.monotonic() > deadline:
            raise SandboxError(f"the storage server's sshd did not start; see {box.dir}/sshd.storage.log")
        time.sleep(0.05)
    with open(key + ".pub") as pub:
        kind, b64 = pub.read().split()[:2]
    with open(os.path.join(box.dir, "storage_known_hosts"), "w") as handle:
        handle.write(f"{addr} {kind} {b64}\n")
    for node in box.nodes:
        mount(box, node)
    return mount_point(box)


def mount(box: Sandbox, node: SandboxNode) -> None:
    """Mount the storage server's export on this node, in its own mount namespace."""
    options = (f"{OPTIONS},IdentityFile={box.client_key},"
               f"UserKnownHostsFile={os.path.join(box.dir, 'storage_known_hosts')}")
    node_exec(box, node.name, ["sshfs", f"root@{server_addr(box)}:{export_dir(box)}", mount_point(box),
                               "-o", options])


def unmount(box: Sandbox, node: SandboxNode) -> None:
    node_exec(box, node.name, ["umount", "-l", mount_point(box)], check=False)
