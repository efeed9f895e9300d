"""Fan-out and connection settings that need no sandbox: a failing worker never hangs the run,
a failure on one node is that node's outcome, and --connect-timeout beats ssh_config."""

import socket
import threading
import time

import paramiko
import pytest

from clustercheck.core import threads
from clustercheck.core.inventory import Node
from clustercheck.runner.options import ClusterOptions
from clustercheck.stages.net.gather import gather_net
from clustercheck.stages.net.options import NetOptions
from clustercheck.transport.base import Outcome, TransportError
from clustercheck.transport.fanout import Cluster, parallel_map
from clustercheck.transport.local import LocalTransport
from clustercheck.transport.sshconfig import DEFAULT_CONNECT_TIMEOUT_S, SSHSettings, resolve


def finishes(func, within_s=20.0):
    """(finished, what func returned or raised): a hang is reported, not waited for."""
    box = {}

    def target():
        try:
            box["value"] = func()
        except BaseException as exc:  # noqa: B036
            box["error"] = exc
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(within_s)
    return not thread.is_alive(), box


def test_a_raising_function_on_more_items_than_workers_ends_and_raises_the_first_error():
    tried = []

    def boom(item):
        tried.append(item)
        raise ValueError(f"item {item}")

    finished, box = finishes(lambda: parallel_map(boom, list(range(10)), 4))
    assert finished, "parallel_map hung after its workers raised"
    assert isinstance(box.get("error"), ValueError) and str(box["error"]) == "item 0"
    assert sorted(tried) == list(range(10))   # every item was tried, whatever the others raised


def test_results_keep_input_order_when_some_items_raise_and_others_do_not():
    def half(item):
        if item % 2:
            raise KeyError(item)
        time.sleep(0.01 * (10 - item))
        return item * 10

    finished, box = finishes(lambda: parallel_map(half, list(range(10)), 3))
    assert finished and isinstance(box["error"], KeyError) and box["error"].args == (1,)
    assert parallel_map(lambda i: i * 10, list(range(10)), 3) == [i * 10 for i in range(10)]


def test_a_map_waited_on_in_another_thread_ends_when_the_run_is_stopped():
    """stop_all takes the workers off the queue: the thread waiting on the map is told so, not left waiting for
    the items no worker will take (the interrupt path joins every thread within its deadline)."""
    started = threading.Event()

    def slow(item):
        started.set()
        time.sleep(0.5)
        return item

    def waited():
        return parallel_map(slow, list(range(50)), 2)

    box = {}
    waiter = threading.Thread(target=lambda: box.update(result=_caught(waited)), daemon=True)
    waiter.start()
    assert started.wait(10)
    assert threads.stop_all(5.0) == []
    waiter.join(5.0)
    assert not waiter.is_alive(), "the waiting thread was still waiting after the stop"
    assert isinstance(box["result"], threads.Stopped) and "of 50 items not done" in str(box["result"])


def _caught(func):
    try:
        return func()
    except Exception as exc:    # noqa: BLE001 - the test reads what it raised
        return exc


def test_any_failure_in_a_step_is_that_nodes_outcome_and_the_others_finish():
    nodes = [Node("localhost"), Node("127.0.0.1")]

    def step(transport, node):
        if node.name == "127.0.0.1":
            raise RuntimeError("a bug in a step")
        return transport.run("echo fine", 10)

    with Cluster(nodes) as cluster:
        finished, box = finishes(lambda: cluster.each(step))
    assert finished
    first, second = box["value"]
    assert first.ok and first.stdout.strip() == "fine"
    assert second.outcome is Outcome.TOOL_ERROR and second.detail == "RuntimeError: a bug in a step"
    assert second.outcome.exit_code == 3 and not second.outcome.reached   # could not check: never OK


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class DropsOnSSHCheck(LocalTransport):
    """The local machine, except that the connection drops when the node-to-node SSH check runs."""

    def run(self, command, timeout_s):
        if " ssh --hosts " in command:
            raise TransportError(Outcome.SSH_ERROR, f"{self.name}: connection lost (node down or sshd killed)")
        return super().run(command, timeout_s)


def test_a_connection_dropped_during_net_node_ssh_is_a_result_not_a_traceback():
    nodes = [Node("localhost"), Node("127.0.0.1")]
    with Cluster(nodes) as cluster:
        cluster.transports["localhost"] = DropsOnSSHCheck("localhost")
        facts = gather_net(cluster, nodes, NetOptions(master_port=free_port(), rdzv_port=free_port(), samples=1,
                                                      attempt_timeout_s=1.0,
                                                      node_ssh=True))
    assert facts.node_ssh["from"] == "localhost"
    assert "connection lost" in facts.node_ssh["error"]


def config(text, tmp_path):
    path = tmp_path / "ssh_config"
    path.write_text(text)
    return paramiko.SSHConfig.from_path(str(path))


@pytest.mark.parametrize("given, in_config, expected", [
    (3.0, "ConnectTimeout 30", 3.0),                  # the command line wins, as OpenSSH's -o does
    (None, "ConnectTimeout 30", 30.0),                # else the config
    (None, "", DEFAULT_CONNECT_TIMEOUT_S),            # else the default
    (45.0, "", 45.0),
])
def test_connect_timeout_on_the_command_line_beats_ssh_config(tmp_path, given, in_config, expected):
    cfg = config(f"Host node*\n  HostName 10.9.9.9\n  {in_config}\n", tmp_path)
    target = resolve(cfg, "node1", SSHSettings(connect_timeout_s=given))
    assert target.connect_timeout_s == expected


def test_connect_timeout_flag_reaches_the_ssh_settings():
    assert ClusterOptions(connect_timeout_s=3.0).fanout_options().ssh.connect_timeout_s == 3.0
    assert ClusterOptions().fanout_options().ssh.connect_timeout_s is None   # not given: the config decides


def test_an_empty_list_of_nodes_runs_nowhere():
    with Cluster([Node("localhost")]) as cluster:
        assert cluster.run("true", 10, []) == [] and len(cluster.run("true", 10)) == 1


class StatusAfterTheWait:
    """A channel whose exit status and close arrive just after wait() gave up (paramiko's thread)."""

    def __init__(self):
        self.status_event = self
        self.exit_status = 0
        self._set = False

    def wait(self, timeout_s):
        self._set = True   # ...arrives a moment too late for this wait
        return False

    def is_set(self):
        return self._set

    @property
    def closed(self):
        return self._set


def test_an_exit_status_that_arrives_with_the_close_is_not_read_as_none():
    """A run that ended well, status and close landing together, was reported as exit -1 on a loaded host."""
    from clustercheck.transport.ssh import SSHRunning
    running = SSHRunning.__new__(SSHRunning)
    running.chan = StatusAfterTheWait()
    assert running.wait(0.05) == 0


def test_an_indexed_ssh_config_answers_as_paramiko_does(tmp_path):
    from clustercheck.transport.sshconfig import IndexedSSHConfig
    text = "".join(f"Host n{i}\n  HostName 10.0.{i // 250}.{i % 250}\n" for i in range(1000))
    text += ("Host n7 n8\n  Port 2222\n  User early\nHost n*\n  User root\n  IdentityFile ~/.ssh/a\n"
             "Host !n9 n*\n  IdentityFile ~/.ssh/b\nMatch host n5\n  Port 2200\nHost *\n  Port 22\n")
    plain = config(text, tmp_path)
    indexed = IndexedSSHConfig.indexed(plain)
    for name in ["n0", "n5", "n7", "n8", "n9", "n999", "other"]:
        assert indexed.lookup(name) == plain.lookup(name), name


def test_indexed_known_hosts_find_plain_hashed_and_pattern_entries(tmp_path):
    from paramiko.hostkeys import HostKeys

    from clustercheck.transport.hostkeys import KnownHosts
    key = paramiko.Ed25519Key(data=bytes.fromhex(
        "0000000b7373682d6564323535313900000020" + "11" * 32))
    line = f"{key.get_name()} {key.get_base64()}"
    hashed = HostKeys.hash_host("hashed-node")
    path = tmp_path / "known_hosts"
    path.write_text("".join(f"10.0.0.{i} {line}\n" for i in range(200)) + f"{hashed} {line}\n*.pattern {line}\n")
    known = KnownHosts([str(path)])
    assert set(known.lookup("10.0.0.42")) == {"ssh-ed25519"}
    assert set(known.lookup("hashed-node")) == {"ssh-ed25519"}
    plain = HostKeys(str(path))
    for name in ["10.0.0.7", "hashed-node", "a.pattern", "nowhere"]:   # as paramiko, patterns included
        assert set(known.lookup(name)) == set(plain.lookup(name) or {}), name
    assert known.lookup("10.0.0.250") == {}
    known.add("10.0.0.250", key)
    assert set(known.lookup("10.0.0.250")) == {"ssh-ed25519"}


def ssh_to(port, tmp_path):
    from clustercheck.transport.ssh import SSHTransport
    from clustercheck.transport.sshconnect import SSHContext
    path = tmp_path / "ssh_config"
    path.write_text(f"Host stalled\n  HostName 127.0.0.1\n  Port {port}\n  User nobody\n")
    known = tmp_path / "known_hosts"
    known.write_text("")
    ctx = SSHContext(SSHSettings(config_path=str(path), user_known_hosts=[str(known)], connect_timeout_s=30.0))
    return SSHTransport(ctx, "stalled")


@pytest.mark.parametrize("stage", ["handshake", "tcp"])
def test_closing_a_transport_ends_its_connect_in_progress_at_once(tmp_path, stage):
    """Ctrl-C while a node is still connecting (a loaded node's sshd slow to send its banner, a node whose SYNs
    are dropped) closes its transport: the connect in the worker ends within a second, not at its 30 s timeout,
    so the interrupted run stops its threads and exits as it normally does."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0 if stage == "tcp" else 8)
    port = server.getsockname()[1]
    fillers = []
    if stage == "tcp":   # the accept queue full and never accepted: the kernel drops the next SYN (SYN_SENT)
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
            fillers.append(filler)
        time.sleep(0.2)
    transport = ssh_to(port, tmp_path)
    try:
        closer = threading.Timer(1.0, transport.close)
        closer.start()
        started = time.monotonic()
        done, box = finishes(transport.connect, within_s=15)
        took = time.monotonic() - started
        assert done, "connect still blocked 15 s after the transport was closed"
        assert isinstance(box.get("error"), TransportError) and "stopped while connecting" in box["error"].detail
        assert took < 3.0, took
        assert transport._client is None
    finally:
        for filler in fillers:
            filler.close()
        server.close()
