"""Fault knobs for a sandbox node: the failures docs/failures.md lists, made on purpose.

Each knob records itself in the sandbox state so `status` shows it and `clear` undoes it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import sysconfig
import time
from typing import Callable, Dict, List, Optional, Sequence

from clustercheck.sandbox import cgroups
from clustercheck.sandbox.cluster import Sandbox, SandboxNode
from clustercheck.sandbox.processes import SandboxError, first_process_alive, pid_alive, sh
from clustercheck.sandbox.slurm import drain as slurm_drain, resume as slurm_resume


def _record(box: Sandbox, node: SandboxNode, fault: str) -> None:
    box.faults.setdefault(node.name, []).append(fault)
    box.save()


def node_exec(box: Sandbox, name: str, argv: Sequence[str], check: bool = True):
    """Run argv inside the node: its network, hostname, mounts and process table (its first process's)."""
    node = box.node(name)
    if not first_process_alive(node.init_pid, node.netns):
        raise SandboxError(f"{node.name} is down (its first process is gone); start_sshd brings it back")
    return sh("nsenter", "-t", str(node.init_pid), "-n", "-u", "-m", "-p", "--", *argv, check=check)


def _iptables(box: Sandbox, node: SandboxNode, *rule: str) -> None:
    sh("ip", "netns", "exec", node.netns, "iptables", "-w", *rule)


def slow_link(box: Sandbox, name: str, mbit: float) -> None:
    """Limit the node's link to `mbit` Mbit/s both ways (tc tbf; netem is absent on this kernel)."""
    node = box.node(name)
    rate_bytes = mbit * 1e6 / 8
    burst = max(16 * 1024, int(rate_bytes / 100))  # 10 ms of traffic, at least 16 KiB
    for prefix in ([], ["ip", "netns", "exec", node.netns]):
        dev = node.veth if not prefix else "eth0"
        sh(*prefix, "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{int(mbit * 1000)}kbit",
           "burst", str(burst), "latency", "100ms")
    _record(box, node, f"link {mbit:g} Mbit/s")


def drop_port(box: Sandbox, name: str, port) -> None:
    """Inbound TCP to `port` (or a range "LOW:HIGH") on the node is silently dropped: connects time out."""
    node = box.node(name)
    # NEW only, as a stateful firewall does: replies to the node's own connections still pass.
    _iptables(box, node, "-I", "INPUT", "-i", "eth0", "-p", "tcp", "--dport", str(port),
              "-m", "conntrack", "--ctstate", "NEW", "-j", "DROP")
    _record(box, node, f"drop tcp/{port}")


def reject_port(box: Sandbox, name: str, port) -> None:
    """Inbound TCP to `port` (or a range "LOW:HIGH") on the node is answered with a reset: connects are refused."""
    node = box.node(name)
    _iptables(box, node, "-I", "INPUT", "-i", "eth0", "-p", "tcp", "--dport", str(port),
              "-m", "conntrack", "--ctstate", "NEW", "-j", "REJECT", "--reject-with", "tcp-reset")
    _record(box, node, f"reject tcp/{port}")


def drop_outbound(box: Sandbox, name: str, port) -> None:
    """The node's own new TCP connections to `port` (or a range "LOW:HIGH"; "all": any port) are dropped,
    as by an egress rule: its peers still reach it."""
    node = box.node(name)
    ports = [] if port == "all" else ["--dport", str(port)]
    _iptables(box, node, "-I", "OUTPUT", "-o", "eth0", "-p", "tcp", *ports, "-m", "conntrack", "--ctstate", "NEW",
              "-j", "DROP")
    _record(box, node, f"drop outbound tcp/{port}")


def blackhole(box: Sandbox, name: str) -> None:
    """Everything to the node is dropped, as for a node that hangs or lost its link."""
    node = box.node(name)
    _iptables(box, node, "-I", "INPUT", "-i", "eth0", "-j", "DROP")
    _record(box, node, "blackholed")


def set_mtu(box: Sandbox, name: str, mtu: int) -> None:
    node = box.node(name)
    sh("ip", "-n", node.netns, "link", "set", "eth0", "mtu", str(mtu))
    _record(box, node, f"mtu {mtu}")


def hostname_to_loopback(box: Sandbox, name: str) -> None:
    """The node's own name resolves to 127.0.1.1, the Debian convention that breaks Gloo."""
    node = box.node(name)
    box._write_hosts(node, own_addr="127.0.1.1")
    _record(box, node, "own hostname -> 127.0.1.1")


def stop_sshd(box: Sandbox, name: str) -> None:
    node = box.node(name)
    pid = node.sshd_pid
    if pid_alive(pid):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
    _record(box, node, "sshd stopped")


def start_sshd(box: Sandbox, name: str) -> None:
    node = box.node(name)
    if not box.sshd_alive(node):
        if not first_process_alive(node.init_pid, node.netns):
            node.mounts = []  # the node was down: its mounts went with it
        box._start_sshds([node])
    box.faults[node.name] = [f for f in box.faults.get(node.name, []) if f != "sshd stopped"]
    box.save()


def bind(box: Sandbox, name: str, source: str, target: str) -> None:
    """Show `source` at `target` on this node only (per-node software, e.g. a different package)."""
    node = box.node(name)
    node_exec(box, name, ["mount", "--bind", source, target])
    node.mounts.append(target)
    _record(box, node, f"{target} <- {source}")


def small_disk(box: Sandbox, name: str, target: str, size_kib: int) -> None:
    """On this node only, `target` is a filesystem of `size_kib` KiB (a tmpfs): a disk that fills up."""
    node = box.node(name)
    node_exec(box, name, ["mkdir", "-p", target])
    node_exec(box, name, ["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", target])
    node.mounts.append(target)
    _record(box, node, f"{target}: {size_kib} KiB")


def read_only(box: Sandbox, name: str, target: str) -> None:
    """On this node only, `target` (a shared directory, say) is mounted read-only."""
    node = box.node(name)
    node_exec(box, name, ["mount", "--bind", target, target])
    node_exec(box, name, ["mount", "-o", "remount,bind,ro", target])
    node.mounts.append(target)
    _record(box, node, f"{target} read-only")


def hide_program(box: Sandbox, name: str, program: str) -> None:
    """On this node only, `program` is not on PATH (an empty, non-executable file is bound over it)."""
    path = shutil.which(program)
    if path is None:
        raise SandboxError(f"{program} is not installed on this host: nothing to hide")
    bind(box, name, "/dev/null", os.path.realpath(path))
    _record(box, box.node(name), f"hidden program: {program}")


def _normalise(name: str) -> str:
    return name.lower().replace("-", "_")


def _package_of(entry: str) -> str:
    """'deepspeed' for deepspeed/, deepspeed-0.19.8.dist-info, deepspeed.py."""
    for suffix in (".dist-info", ".egg-info"):
        if entry.endswith(suffix):
            return _normalise(entry[: -len(suffix)].rsplit("-", 1)[0])
    return _normalise(entry[:-3] if entry.endswith(".py") else entry)


def mirror(box: Sandbox, name: str, directory: str, tag: str, keep: Callable[[str], bool]) -> str:
    """On this node only, `directory` shows a directory (returned, in the sandbox's own) of links to
    the entries `keep` accepts, plus what the caller puts there. The links go through the real
    directory bound at a private path inside the node: a link through `directory` itself would
    point back at the mirror. A later call on the same directory relinks in place."""
    node = box.node(name)
    original = os.path.join(box.dir, f"{tag}.{node.name}.orig")
    own = os.path.join(box.dir, f"{tag}.{node.name}.mirror")
    mounted = directory in node.mounts
    if not mounted:
        shutil.rmtree(own, ignore_errors=True)
    os.makedirs(original, exist_ok=True)
    os.makedirs(own, exist_ok=True)
    for entry in os.listdir(own):   # an earlier call's links would show what is left out now
        if os.path.islink(os.path.join(own, entry)):
            os.remove(os.path.join(own, entry))
    for entry in os.listdir(directory) if os.path.isdir(directory) else []:
        if keep(entry) and not os.path.lexists(os.path.join(own, entry)):
            os.symlink(os.path.join(original, entry), os.path.join(own, entry))
    if not mounted:
        node_exec(box, name, ["mount", "--bind", directory, original])
        node_exec(box, name, ["mount", "--bind", own, directory])
        node.mounts += [directory, original]
    return own


def hide_python_packages(box: Sandbox, name: str, site_packages: str, hidden: Sequence[str]) -> None:
    """On this node only, `site_packages` lacks the named entries (packages and their dist-info)."""
    hidden_names = {_normalise(h) for h in hidden}
    mirror(box, name, os.path.realpath(site_packages), "site", lambda entry: _package_of(entry) not in hidden_names)
    _record(box, box.node(name), f"hidden from python: {', '.join(hidden)}")


def python_package(box: Sandbox, name: str, site_packages: str, package: str, version: Optional[str]) -> None:
    """On this node only, the interpreter's metadata says `package` is at `version` (a dist-info of that version
    in place of the real one; the code stays), or, with None, that it is not installed: a node whose environment
    drifted. Calls add up on a node."""
    key = _normalise(package)
    changed = {key} | {_normalise(f.split(":")[0][len("python package "):]) for f in box.faults.get(name, [])
                       if f.startswith("python package ")}
    own = mirror(box, name, os.path.realpath(site_packages), "site",
                 lambda entry: not (entry.endswith((".dist-info", ".egg-info")) and _package_of(entry) in changed))
    for entry in os.listdir(own):   # this package's earlier stand-in, if any
        if not os.path.islink(os.path.join(own, entry)) and _package_of(entry) == key:
            shutil.rmtree(os.path.join(own, entry))
    if version:
        info = os.path.join(own, f"{key}-{version}.dist-info")
        os.makedirs(info)
        with open(os.path.join(info, "METADATA"), "w") as handle:
            handle.write(f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n")
    _record(box, box.node(name), f"python package {package}: {version or 'not installed'}")


def crash(box: Sandbox, name: str) -> None:
    """The node dies: every process in it (sshd, sessions, what they started) is killed at once."""
    node = box.node(name)
    pids = [int(p) for p in sh("ip", "netns", "pids", node.netns, check=False).stdout.split()]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    node.mounts = []  # they lived in the dead node's mount namespace
    _record(box, node, "sshd stopped")


def set_env(box: Sandbox, name: str, assignment: str) -> None:
    """Every SSH session on the node gets VAR=value (sshd's SetEnv), as a login profile would.

    The node's sshd restarts to take it; the node's processes and mounts stay.
    """
    node = box.node(name)
    var, sep, _ = assignment.partition("=")
    if not sep or not var.isidentifier():
        raise SandboxError(f"set-env takes VAR=value, not {assignment!r}")
    stop_sshd(box, name)
    with open(node.sshd_config, "a") as handle:
        handle.write(f"SetEnv {assignment}\n")
    start_sshd(box, name)
    _record(box, node, f"env {assignment}")


def stand_in(box: Sandbox, name: str, program: str, outputs: Dict[str, str], bin_dir: str = "/usr/local/sbin") -> None:
    """On this node only, `program` on PATH prints recorded files: outputs maps its arguments
    ("-q -x") to a file; any other arguments fail as the real tool does on a bad flag. For tools
    that cannot run here (nvidia-smi without a GPU), fed with output recorded on real machines.

    The node sees `bin_dir` (on sshd's PATH) as a mirror of what is there plus the stand-in;
    the host's directory is not touched."""
    node = box.node(name)
    own = mirror(box, name, bin_dir, "bin", lambda entry: entry != program)
    cases = ""
    for number, (args, path) in enumerate(outputs.items()):   # copied: the nodes' /tmp is their own
        copy = os.path.join(own, f".{program}.{number}")
        shutil.copyfile(path, copy)
        cases += f"  {shlex.quote(args)}) cat {shlex.quote(copy)} ;;\n"
    script = os.path.join(own, program)
    with open(script, "w") as handle:
        handle.write(f'#!/bin/sh\ncase "$*" in\n{cases}  *) echo "{program}: invalid option: $*" >&2; exit 2 ;;\n'
                     "esac\n")
    os.chmod(script, 0o755)
    _record(box, node, f"stand-in {program}: {', '.join(sorted(outputs))}")


def kernel_log(box: Sandbox, name: str, lines: Sequence[str]) -> None:
    """On this node only, /dev/kmsg holds these kernel messages (records of this boot, in
    /dev/kmsg's own format) instead of the host's: what a GPU node's kernel said."""
    node = box.node(name)
    path = os.path.join(box.dir, f"kmsg.{node.name}")
    with open(path, "w") as handle:
        for seq, line in enumerate(lines):
            handle.write(f"4,{seq},{1000000 + seq},-;{line}\n")
    bind(box, name, path, "/dev/kmsg")


def nvidia_smi(box: Sandbox, name: str, xml_path: str) -> None:
    """`sandbox fault nvidia-smi NODE FILE`: the node's nvidia-smi -q -x prints FILE (a recorded XML)."""
    if not os.path.isfile(xml_path):
        raise SandboxError(f"no such file: {xml_path}")
    stand_in(box, name, "nvidia-smi", {"-q -x": xml_path})


def kernel_log_file(box: Sandbox, name: str, path: str) -> None:
    """`sandbox fault kernel-log NODE FILE`: the node's /dev/kmsg holds FILE's lines (dmesg stamps dropped)."""
    try:
        with open(path) as handle:
            lines = handle.read().splitlines()
    except OSError as exc:
        raise SandboxError(f"cannot read {path}: {exc.strerror}") from None
    kernel_log(box, name, [line.split("] ", 1)[1] if line.startswith("[") and "] " in line else line
                           for line in lines])


def clear(box: Sandbox, name: str) -> None:
    """Undo every fault on the node."""
    node = box.node(name)
    if any(f.startswith("env ") for f in box.faults.get(node.name, [])):
        stop_sshd(box, name)
        box._write_sshd_config(node)
    start_sshd(box, name)
    cgroups.release_cpu(box, name)
    for target in reversed(node.mounts):
        node_exec(box, name, ["umount", "-l", target], check=False)
    node.mounts = []
    for chain in ("INPUT", "OUTPUT"):
        sh("ip", "netns", "exec", node.netns, "iptables", "-w", "-F", chain, check=False)
    sh("tc", "qdisc", "del", "dev", node.veth, "root", check=False)
    sh("ip", "netns", "exec", node.netns, "tc", "qdisc", "del", "dev", "eth0", "root", check=False)
    sh("ip", "-n", node.netns, "link", "set", "eth0", "mtu", "1500")
    if any(f.startswith("slurm drain") for f in box.faults.get(node.name, [])):
        resume(box, name)
    box._write_hosts(node)
    box.faults.pop(node.name, None)
    box.save()


def clear_all(box: Sandbox) -> None:
    for node in box.nodes:
        if box.faults.get(node.name) or node.mounts or not box.sshd_alive(node):
            clear(box, node.name)


def drain(box: Sandbox, name: str, reason: str) -> None:
    """Slurm drains the node with this reason (sandbox up --slurm), as an admin or a health check would."""
    node = box.node(name)
    slurm_drain(box, node.name, reason)
    _record(box, node, f"slurm drain: {reason}")


def resume(box: Sandbox, name: str) -> None:
    node = box.node(name)
    slurm_resume(box, node.name)
    box.faults[node.name] = [f for f in box.faults.get(node.name, []) if not f.startswith("slurm drain")]
    box.save()


def form_of(value_name: str) -> str:
    """What a knob's value must look like, for the message that refuses one."""
    return "an absolute path and a size in KiB (/ckpt:256)" if value_name == "DIR:KIB" else "a number"


def _dir_and_size(spec: str):
    """"/ckpt:64" -> ("/ckpt", 64); ValueError unless an absolute path and a whole number of KiB."""
    path, _, size = spec.rpartition(":")
    if not path.startswith("/") or not size.isdigit():
        raise ValueError(spec)
    return path, int(size)


KNOBS = {
    "slow": (slow_link, "MBIT", float),
    "drop": (drop_port, "PORT", str),
    "reject": (reject_port, "PORT", str),
    "drop-out": (drop_outbound, "PORT", str),
    "set-env": (set_env, "VAR=VALUE", str),
    "package": (lambda box, name, spec: python_package(box, name, sysconfig.get_paths()["purelib"], *spec),
                "NAME==VERSION", lambda spec: (spec.split("==")[0], spec.split("==", 1)[1] or None)),
    "mtu": (set_mtu, "MTU", int),
    "hide": (hide_program, "PROGRAM", str),
    "read-only": (read_only, "DIR", str),
    "cpu-quota": (cgroups.cpu_quota, "CPUS", float),
    "small-disk": (lambda box, name, spec: small_disk(box, name, *spec), "DIR:KIB", _dir_and_size),
    "nvidia-smi": (nvidia_smi, "XML", str),
    "kernel-log": (kernel_log_file, "FILE", str),
    "loopback-hostname": (hostname_to_loopback, None, None),
    "stop-sshd": (stop_sshd, None, None),
    "start-sshd": (start_sshd, None, None),
    "blackhole": (blackhole, None, None),
    "crash": (crash, None, None),
    "drain": (drain, "REASON", str),
    "resume": (resume, None, None),
    "clear": (clear, None, None),
}


def knob_names() -> List[str]:
    return list(KNOBS)
