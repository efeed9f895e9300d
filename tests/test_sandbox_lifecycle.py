"""The sandbox itself: up twice leaves no debris, down removes everything, even after a crash."""

import os
import subprocess

import pytest

from clustercheck.sandbox import Sandbox, down, list_sandboxes
from tests.conftest import clustercheck

pytestmark = pytest.mark.sandbox


def debris(name):
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    sshd = subprocess.run(["pgrep", "-f", f"^sshd: /usr/sbin/sshd -D -f /run/clustercheck-sandbox/{name}/"],
                          capture_output=True, text=True)
    anything = subprocess.run(["pgrep", "-f", f"clustercheck-sandbox/{name}/"], capture_output=True, text=True)
    etc = os.listdir("/etc/netns") if os.path.isdir("/etc/netns") else []
    return {
        "netns": [line.split()[0] for line in netns.splitlines() if line.startswith(f"{name}-n")],
        "links": [line.split(": ")[1] for line in links.splitlines() if line.split(": ")[1].startswith(f"{name}-")],
        "etc": [e for e in etc if e.startswith(f"{name}-n")],
        "sshd": sshd.stdout.split(),
        "processes": anything.stdout.split(),   # each node's first process and sshd, munged, slurmctld...
        "state": os.path.exists(f"/run/clustercheck-sandbox/{name}"),
    }


def test_up_twice_then_down_leaves_nothing(sandbox):
    name = f"l{os.getpid() % 10000}"
    try:
        first = Sandbox.up(2, name)
        second = Sandbox.up(2, name)
        assert len(debris(name)["netns"]) == 2 and len(debris(name)["sshd"]) == 2
        # Coexists with the session's sandbox, in a subnet of its own.
        assert second.subnet != sandbox.subnet and first.subnet == second.subnet
        assert name in list_sandboxes() and sandbox.name in list_sandboxes()
    finally:
        down(name)
    assert debris(name) == {"netns": [], "links": [], "etc": [], "sshd": [], "processes": [], "state": False}


def test_down_after_a_crash_finds_everything_by_name_even_a_node_whose_namespace_lost_its_name(sandbox):
    name = f"c{os.getpid() % 10000}"
    try:
        box = Sandbox.up(2, name)
        os.unlink(os.path.join(box.dir, "state.json"))  # as if the process died mid-way
        # and a node's namespace lost its name while its processes ran (a `down` that raced an `up`)
        subprocess.run(["ip", "netns", "del", box.nodes[0].name], check=True)
    finally:
        proc = clustercheck("sandbox", "down", "--name", name)
    assert proc.returncode == 0
    assert debris(name) == {"netns": [], "links": [], "etc": [], "sshd": [], "processes": [], "state": False}


def test_cli_status_and_fault(sandbox):
    node = sandbox.nodes[3].name
    try:
        proc = clustercheck("sandbox", "fault", "mtu", node, "1280", "--name", sandbox.name)
        assert proc.returncode == 0 and "mtu 1280" in proc.stdout
        status = clustercheck("sandbox", "status", "--name", sandbox.name)
        assert node in status.stdout and "mtu 1280" in status.stdout
        bad = clustercheck("sandbox", "fault", "mtu", node, "big", "--name", sandbox.name)
        assert bad.returncode == 64 and "MTU must be a number" in bad.stderr
    finally:
        clustercheck("sandbox", "fault", "clear", node, "--name", sandbox.name)
