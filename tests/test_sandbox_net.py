"""`clustercheck net` against the sandbox: real listeners and connections between network
namespaces, faults made with iptables, /etc/hosts, ip link and sshd's SetEnv."""

import json
import subprocess
import sys

import pytest

from clustercheck.core.errors import EXIT_FAIL, EXIT_OK
from clustercheck.sandbox import faults
from tests.conftest import clustercheck, gone

pytestmark = pytest.mark.sandbox


def net(box, *args):
    proc = clustercheck("net", box.nodes_file, "-F", box.ssh_config, "--python", sys.executable,
                        "--attempt-timeout", "2", "--json", *args)
    assert proc.returncode in (EXIT_OK, 1, EXIT_FAIL), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def problems(doc):
    return {f["check"]: f for f in doc["findings"] if f["status"] != "OK"}


def names(box):
    return [node.name for node in box.nodes]


def test_a_clean_sandbox_passes_and_says_what_to_set(box):
    code, doc = net(box)
    assert code == EXIT_OK, problems(doc)
    summaries = [f["summary"] for f in doc["findings"]]
    n = len(box.nodes)
    assert any(s.startswith(f"all connections open between {n} nodes: full mesh: every node to every other "
                            f"({n * (n - 1) * 4} connection attempts)") for s in summaries), summaries
    assert "ports 29500, 29400 are free and reachable on every node: any may be the master" in summaries
    assert "the peers are reached through eth0 on every node: set NCCL_SOCKET_IFNAME=eth0 GLOO_SOCKET_IFNAME=eth0" \
        in summaries
    assert gone("net_probe")


def test_a_dropped_port_fails_only_that_nodes_inbound_direction_as_filtered(box):
    master, others = names(box)[0], names(box)[1:]
    faults.drop_port(box, master, 29500)
    code, doc = net(box)
    assert code == EXIT_FAIL
    found = problems(doc)
    assert set(found) == {"net.master.reach"}, found
    assert found["net.master.reach"]["nodes"] == others
    assert f"cannot reach the rendezvous port {master}:29500 (filtered)" in found["net.master.reach"]["summary"]
    assert "--dport 29500" in found["net.master.reach"]["remedy"]
    # the other direction, and every other port on the master, are open
    for other in others:
        states = {(r["to"], r["port"]): r["state"] for r in doc["nodes"][other]["attempts"]["results"]}
        assert {s for (to, port), s in states.items() if (to, port) != (master, 29500)} == {"open"}


def test_launch_ports_on_every_node_name_who_cannot_be_the_master(box, tmp_path):
    """A node that is not this run's master dropping or rejecting 29500 cannot be MASTER_ADDR (WARN);
    the master dropping torchrun's 29400 is NOT READY; preflight says the same."""
    master, second, third = names(box)[:3]
    faults.drop_port(box, second, 29500)
    faults.reject_port(box, third, 29500)
    code, doc = net(box)
    assert code == 1, problems(doc)
    warn = [f for f in doc["findings"] if f["status"] == "WARN"]
    assert [(f["check"], f["summary"]) for f in warn] == [
        ("net.launch", f"{second} cannot be MASTER_ADDR: inbound 29500 filtered"),
        ("net.launch", f"{third} cannot be MASTER_ADDR: inbound 29500 refused")]
    preflight = clustercheck("preflight", box.nodes_file, "-F", box.ssh_config, "--python", sys.executable,
                             "--only", "env,net", "--reports-dir", str(tmp_path), timeout=180)
    assert preflight.returncode == 1 and "READY, WITH WARNINGS" in preflight.stdout, preflight.stdout[-2000:]
    faults.clear_all(box)
    faults.drop_port(box, master, 29400)
    code, doc = net(box)
    assert code == EXIT_FAIL
    [found] = [f for f in doc["findings"] if f["status"] == "FAIL"]
    assert found["check"] == "net.rdzv.reach" and f"rendezvous port {master}:29400 (filtered)" in found["summary"]
    preflight = clustercheck("preflight", box.nodes_file, "-F", box.ssh_config, "--python", sys.executable,
                             "--only", "env,net", "--reports-dir", str(tmp_path), timeout=180)
    assert preflight.returncode == EXIT_FAIL and "NOT READY" in preflight.stdout, preflight.stdout[-2000:]


def test_a_rejected_range_is_refused_and_names_the_node_and_ports(box):
    target = names(box)[2]
    faults.reject_port(box, target, "32768:60999")
    code, doc = net(box)
    assert code == EXIT_FAIL
    found = problems(doc)
    assert set(found) == {"net.inbound"}, found
    finding = found["net.inbound"]
    assert finding["nodes"] == [target]
    assert finding["summary"].startswith(f"{target} rejects inbound TCP on ports")
    assert finding["summary"].endswith("from every peer that tried (refused)")
    assert "32768-60999" in finding["remedy"]


def test_a_sampled_mesh_names_the_node_that_cannot_connect_out_and_no_other(box):
    culprit = names(box)[-1]
    faults.drop_outbound(box, culprit, "all")
    code, doc = net(box, "--mesh", "sampled", "--mesh-peers", "2")
    assert code == EXIT_FAIL
    found = problems(doc)
    assert found["net.outbound"]["nodes"] == [culprit], found
    assert found["net.outbound"]["summary"].startswith(f"{culprit} cannot open TCP connections to any peer (filtered")
    assert {c for c, f in found.items() if f["nodes"] != [culprit]} == set(), found
    assert doc["plan"]["mode"] == "sampled" and doc["plan"]["peers"] == 2
    assert doc["plan"]["retried"] > 0 and doc["plan"]["recovered"] == 0


def test_hostname_at_loopback_mtu_and_bogus_gloo_ifname_are_each_named(box):
    n1, n2, n3, n4 = names(box)[:4]
    faults.set_env(box, n4, "GLOO_SOCKET_IFNAME=ib9")   # restarts that node's sshd: first
    faults.hostname_to_loopback(box, n2)
    faults.set_mtu(box, n3, 9000)
    code, doc = net(box)
    assert code == EXIT_FAIL
    found = problems(doc)
    assert found["hostname.resolves"]["nodes"] == [n2]
    assert found["interface.mtu"]["nodes"] == [n3]
    assert found["env.ifname"]["nodes"] == [n4]
    assert "GLOO_SOCKET_IFNAME=ib9: no interface ib9" in found["env.ifname"]["evidence"][0]
    assert "net.inbound" not in found and "net.pair" not in found


def test_a_port_held_on_the_master_is_named_with_its_process(box):
    master = box.nodes[0]
    # started inside the node (its network and its process table), as a job on it would be
    holder = subprocess.Popen(["nsenter", "-t", str(master.init_pid), "-n", "-u", "-m", "-p", "--", sys.executable,
                               "-c", "import socket, time\ns = socket.socket(); s.bind(('0.0.0.0', 29517)); s.listen()\n"
                               "print('ready', flush=True); time.sleep(120)  # leftover-rendezvous"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        code, doc = net(box, "--master-port", "29517")
    finally:
        holder.kill()
        subprocess.run(["pkill", "-f", "leftover-rendezvous"])   # nsenter's child, in the node
        holder.wait()
    assert code == EXIT_FAIL
    finding = problems(doc)["net.master.free"]
    assert finding["nodes"] == [master.name]
    # the node's own pid (its process table), and the command that holds the port
    assert f"port 29517 on {master.name} is in use (held by pid " in finding["summary"]
    assert "leftover-rendezvous" in finding["summary"], finding
    pid = finding["summary"].split("held by pid ")[1].split(":")[0]
    assert f"kill {pid}" in finding["remedy"]


def test_links_and_node_ssh_opt_in(box):
    slow = names(box)[1]
    faults.slow_link(box, slow, 20)
    code, doc = net(box, "--links", "--stream-s", "0.3", "--node-ssh")
    found = problems(doc)
    assert found["net.link"]["nodes"] == [slow], found.get("net.link")
    n = len(box.nodes)
    assert len(doc["links"]) == n * (n - 1) // 2
    # the sandbox gives the nodes no keys of their own: pdsh would fail, and says why
    assert found["net.ssh"]["nodes"] == names(box)[1:]
    assert "pdsh" in found["net.ssh"]["remedy"]
