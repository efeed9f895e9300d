"""SSH fan-out against the sandbox: real sshd in network namespaces, real paramiko."""

import os
import signal
import subprocess
import sys
import time

import pytest

from clustercheck.core.errors import EXIT_FAIL, EXIT_INTERRUPTED, EXIT_OK, EXIT_UNKNOWN
from clustercheck.core.inventory import read_inventory
from clustercheck.sandbox import faults
from clustercheck.transport.base import Outcome
from clustercheck.transport.fanout import Cluster, FanoutOptions
from clustercheck.transport.sshconfig import SSHSettings
from tests.conftest import clustercheck, leftover

pytestmark = pytest.mark.sandbox


def cli(box, *args, **kwargs):
    return clustercheck("run", box.nodes_file, "-F", box.ssh_config, *args, **kwargs)


def cluster(box, connect_timeout_s=5.0, **settings):
    nodes = read_inventory(box.nodes_file)
    return Cluster(nodes, FanoutOptions(ssh=SSHSettings(config_path=box.ssh_config,
                                                        connect_timeout_s=connect_timeout_s, **settings)))


def by_node(results):
    return {r.node: r for r in results}


def test_run_folds_identical_outputs(box):
    proc = cli(box, "--", "echo same; hostname")
    assert proc.returncode == EXIT_OK, proc.stderr
    names = [n.name for n in box.nodes]
    for name in names:  # each node's own hostname: one block per node
        assert f"{name} (1)" in proc.stdout
    folded = cli(box, "--", "uname -s")
    assert f"{box.name}-n[1-4] (4)" in folded.stdout
    assert folded.stdout.count("Linux") == 1
    assert "ok: 4/4 nodes" in folded.stdout


def test_exit_code_reflects_the_worst_node(box):
    proc = cli(box, "--", f'test "$(hostname)" != {box.nodes[2].name}')
    assert proc.returncode == EXIT_FAIL
    assert f"command failed: {box.nodes[2].name}: exit code 1" in proc.stdout


def test_without_the_sandbox_ssh_config_names_do_not_resolve(box, tmp_path):
    empty = tmp_path / "ssh_config"
    empty.write_text("")
    proc = clustercheck("run", box.nodes_file, "-F", str(empty), "--", "true")
    assert proc.returncode == EXIT_UNKNOWN
    assert "unreachable: name does not resolve" in proc.stdout


def test_unknown_host_key_refused_then_accepted_with_the_flag(box, tmp_path):
    known = tmp_path / "known_hosts"
    refused = cli(box, "--known-hosts", str(known), "--", "true")
    assert refused.returncode == EXIT_UNKNOWN
    for node in box.nodes:  # each with its own fingerprint, to compare before accepting
        assert f"host key unknown: {node.name}: ssh-ed25519 key SHA256:" in refused.stdout
    assert "--accept-new-hostkeys" in refused.stdout
    assert not known.exists() or known.read_text() == ""

    accepted = cli(box, "--known-hosts", str(known), "--accept-new-hostkeys", "--", "true")
    assert accepted.returncode == EXIT_OK, accepted.stdout
    lines = known.read_text().splitlines()
    # Four connections wrote at once: one line each, none lost, none doubled.
    assert sorted(line.split()[0] for line in lines) == sorted(n.addr for n in box.nodes)
    assert cli(box, "--known-hosts", str(known), "--", "true").returncode == EXIT_OK


def test_changed_host_key_is_always_refused(box, tmp_path):
    victim = box.nodes[1]
    other_key = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other_key)], check=True)
    kind, b64 = other_key.with_suffix(".pub").read_text().split()[:2]
    known = tmp_path / "known_hosts"
    lines = [line for line in open(box.known_hosts).read().splitlines() if not line.startswith(victim.addr + " ")]
    known.write_text("\n".join(lines + [f"{victim.addr} {kind} {b64}"]) + "\n")
    proc = cli(box, "--known-hosts", str(known), "--accept-new-hostkeys", "--", "true")
    assert proc.returncode == EXIT_UNKNOWN
    assert f"host key changed: {victim.name}" in proc.stdout
    assert "ok: 3/4 nodes" in proc.stdout
    assert known.read_text().count(victim.addr) == 1  # nothing was added for the victim


def test_stopped_sshd_and_blackholed_node_while_others_succeed(box):
    refused, silent = box.nodes[1], box.nodes[2]
    faults.stop_sshd(box, refused.name)
    faults.blackhole(box, silent.name)
    with cluster(box, connect_timeout_s=2.0) as c:
        start = time.monotonic()
        results = by_node(c.run("hostname", 10))
        wall = time.monotonic() - start
    assert results[refused.name].outcome is Outcome.REFUSED
    assert results[silent.name].outcome is Outcome.CONNECT_TIMEOUT
    # Bounded by the connect timeout (with room for a loaded machine), in parallel with the rest.
    assert results[silent.name].elapsed_s < 2.0 + 2.0
    assert wall < 2.0 + 4.0
    for node in (box.nodes[0], box.nodes[3]):
        assert results[node.name].ok and results[node.name].stdout.strip() == node.name


def test_remote_command_is_killed_at_the_deadline(box):
    with cluster(box) as c:
        results = c.run("trap '' TERM; sleep 600.41 & sleep 600.42", 1.5)
    assert {r.outcome for r in results} == {Outcome.TIMED_OUT}
    time.sleep(1.5)
    assert leftover("sleep 600.4") == 0


@pytest.mark.parametrize("sig, exit_code, marker", [
    (signal.SIGINT, EXIT_INTERRUPTED, "600.51"),   # Ctrl-C: the tool closes its channels
    (signal.SIGKILL, -signal.SIGKILL, "600.61"),   # killed outright: the kernel closes the sockets
])
def test_remote_command_is_killed_when_the_tool_is_stopped(box, sig, exit_code, marker):
    proc = subprocess.Popen([sys.executable, "-m", "clustercheck", "run", box.nodes_file, "-F", box.ssh_config,
                             "--timeout", "300", "--", f"sleep {marker}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while leftover(f"^sleep {marker}") < len(box.nodes) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert leftover(f"^sleep {marker}") == len(box.nodes)
    proc.send_signal(sig)
    proc.communicate(timeout=30)
    assert proc.returncode == exit_code
    time.sleep(1.5)
    assert leftover(f"^sleep {marker}") == 0


def test_one_connection_per_node_reused_and_files_cleaned_up(box):
    with cluster(box) as c:
        first = by_node(c.run("echo $SSH_CLIENT", 10))
        paths = by_node(c.each(lambda t, n: _put_and_cat(t)))
        second = by_node(c.run("echo $SSH_CLIENT", 10))
        for node in box.nodes:
            # Same client port: the same TCP connection served both commands.
            assert first[node.name].stdout == second[node.name].stdout
            assert paths[node.name].stdout == "payload"
        tmpdirs = {n: r.detail for n, r in paths.items()}
        for name, tmpdir in tmpdirs.items():   # each node's /tmp is its own: look from inside the node
            assert faults.node_exec(box, name, ["test", "-d", tmpdir], check=False).returncode == 0
    for name, tmpdir in tmpdirs.items():
        assert tmpdir.startswith("/tmp/clustercheck.")
        assert faults.node_exec(box, name, ["test", "-e", tmpdir], check=False).returncode == 1


def _put_and_cat(transport):
    path = transport.put(b"payload", "file.txt")
    result = transport.run(f"cat {path}", 10)
    result.detail = os.path.dirname(path)  # carried out for the assertion
    return result


def _jump_config(box, tmp_path, via: str) -> str:
    first, target = box.nodes[0], box.nodes[1]
    text = open(box.ssh_config).read()
    text = (f"Host jumped\n    HostName {target.addr}\n    {via}\n\n" + text +
            f"\nHost jumped\n    User root\n    IdentityFile {box.client_key}\n    IdentitiesOnly yes\n"
            f"    UserKnownHostsFile {box.known_hosts}\n")
    path = tmp_path / "ssh_config"
    path.write_text(text.replace("{first}", first.name))
    return str(path)


@pytest.mark.parametrize("via", ["ProxyJump {first}", "ProxyCommand ssh -F {config} -W %h:%p {first}"])
def test_reaches_a_node_only_through_a_bastion(box, tmp_path, via):
    target = box.nodes[1]
    bridge_addr = box.host_addr
    # The target refuses SSH from this host directly; only the first node can reach it.
    subprocess.run(["ip", "netns", "exec", target.netns, "iptables", "-w", "-I", "INPUT", "-s", bridge_addr,
                    "-p", "tcp", "--dport", "22", "-j", "DROP"], check=True)
    box.faults.setdefault(target.name, []).append("ssh from host dropped")
    config = _jump_config(box, tmp_path, via.replace("{config}", box.ssh_config))
    nodes = tmp_path / "nodes.txt"
    nodes.write_text("jumped\n")
    direct = clustercheck("run", box.nodes_file, "-F", box.ssh_config, "--connect-timeout", "1", "--", "true")
    assert f"unreachable: connect timed out: {target.name}" in direct.stdout
    proc = clustercheck("run", str(nodes), "-F", config, "--", "hostname")
    assert proc.returncode == EXIT_OK, proc.stdout + proc.stderr
    assert target.name in proc.stdout


def test_fault_knobs_change_what_the_node_sees(box):
    node = box.nodes[0]
    faults.hostname_to_loopback(box, node.name)
    faults.set_mtu(box, node.name, 1400)
    faults.slow_link(box, node.name, 100)
    with cluster(box) as c:
        result = c.run("getent hosts $(hostname); cat /sys/class/net/eth0/mtu; tc qdisc show dev eth0", 10,
                       nodes=[n for n in c.nodes if n.name == node.name])[0]
    assert result.stdout.startswith(f"127.0.1.1       {node.name}")
    assert "\n1400\n" in result.stdout
    assert "tbf" in result.stdout and "100Mbit" in result.stdout


def test_dropped_and_rejected_port(box):
    dropped, rejected = box.nodes[2], box.nodes[3]
    faults.drop_port(box, dropped.name, 22)
    faults.reject_port(box, rejected.name, 22)
    with cluster(box, connect_timeout_s=1.5) as c:
        results = by_node(c.run("true", 5))
    assert results[dropped.name].outcome is Outcome.CONNECT_TIMEOUT
    assert results[rejected.name].outcome is Outcome.REFUSED
    assert results[box.nodes[0].name].ok


def test_per_node_software_by_mount_namespace(box):
    import sysconfig

    site = sysconfig.get_paths()["purelib"]
    drifted = box.nodes[1]
    faults.hide_python_packages(box, drifted.name, site, ["tabulate"])
    with cluster(box) as c:
        results = by_node(c.run(f"{sys.executable} -c 'import tabulate, click; print(\"ok\")'", 30))
    assert results[drifted.name].outcome is Outcome.COMMAND_FAILED
    assert "No module named 'tabulate'" in results[drifted.name].stderr
    assert all(results[n.name].stdout == "ok\n" for n in box.nodes if n is not drifted)


def test_a_key_the_nodes_do_not_know_is_an_auth_failure(box, tmp_path):
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    config = tmp_path / "ssh_config"
    config.write_text(open(box.ssh_config).read().replace(box.client_key, str(stranger)))
    proc = clustercheck("run", box.nodes_file, "-F", str(config), "--", "true")
    assert proc.returncode == EXIT_UNKNOWN
    assert f"authentication failed: {box.name}-n[1-4]" in proc.stdout or all(
        f"authentication failed: {n.name}" in proc.stdout for n in box.nodes)
    assert "authorized_keys" in proc.stdout  # the remedy


def test_a_node_that_dies_mid_command_is_reported_at_once(box):
    victim = box.nodes[3]
    with cluster(box) as c:
        c.connect()
        # Kill the victim's sshd and every session under it while the command runs.
        killer = subprocess.Popen(["sh", "-c", f"sleep 1; ip netns pids {victim.netns} | xargs -r kill -9"])
        start = time.monotonic()
        results = by_node(c.run("sleep 5; echo done", 60))
        wall = time.monotonic() - start
        killer.wait()
    assert results[victim.name].outcome is Outcome.SSH_ERROR
    assert "connection lost" in results[victim.name].detail
    assert results[victim.name].elapsed_s < 5  # not the 60 s deadline
    assert all(results[n.name].stdout == "done\n" for n in box.nodes if n is not victim)
    assert wall < 30
    faults.start_sshd(box, victim.name)


def test_a_dead_bastion_fails_every_node_behind_it_in_one_timeout(box, tmp_path):
    bastion = box.nodes[0]
    faults.blackhole(box, bastion.name)
    names = [n.name for n in box.nodes[1:]]
    text = open(box.ssh_config).read().replace(f"Host {box.name}-n*\n",
                                               f"Host {' '.join(names)}\n    ProxyJump {bastion.name}\n"
                                               f"Host {box.name}-n*\n")
    config = tmp_path / "ssh_config"
    config.write_text(text)
    nodes = tmp_path / "nodes.txt"
    nodes.write_text("\n".join(names) + "\n")
    start = time.monotonic()
    proc = clustercheck("run", str(nodes), "-F", str(config), "--connect-timeout", "2", "--", "true")
    assert time.monotonic() - start < 2 * 3 + 3  # three nodes, one bastion timeout (with room)
    assert proc.returncode == EXIT_UNKNOWN
    assert f"unreachable: connect timed out: {box.name}-n[2-4] (jump host {bastion.name}: " in proc.stdout


def test_each_node_has_its_own_tmp_as_on_a_real_cluster(box):
    """The sandbox is no kinder than a cluster: a file in one node's /tmp is not on the others."""
    first, second = box.nodes[0].name, box.nodes[1].name
    token = f"/tmp/clustercheck-token-{os.getpid()}"
    assert faults.node_exec(box, first, ["touch", token]).returncode == 0
    assert faults.node_exec(box, first, ["test", "-e", token], check=False).returncode == 0
    assert faults.node_exec(box, second, ["test", "-e", token], check=False).returncode == 1
    assert not os.path.exists(token)
