"""The watch's view of the links (clustercheck/injob/sockets.py, links.py): what a rank's own TCP sockets carried,
read from the kernel for real, and the judge that names a slowed node link or link from every rank's window."""

import socket
import threading
import time

import pytest

from clustercheck.injob import sockets
from clustercheck.injob.links import pair_rates, slow_link
from clustercheck.injob.straggler import JOB, judge_window


def test_a_sockets_bytes_and_sending_time_are_read_from_the_kernel_for_its_peer_and_a_closed_one_is_gone():
    server = socket.create_server(("127.0.0.1", 0))
    received = []

    def sink():
        conn, _ = server.accept()
        with conn:
            while True:
                data = conn.recv(1 << 20)
                if not data:
                    break
                received.append(len(data))
    reader = threading.Thread(target=sink)
    reader.start()
    sender = socket.create_connection(server.getsockname())
    before, _ = sockets.read()
    sender.sendall(b"x" * (16 << 20))
    deadline = time.monotonic() + 10
    while sum(received) < 16 << 20 and time.monotonic() < deadline:
        time.sleep(0.01)
    after, addrs = sockets.read()
    moved = sockets.since(after, before)
    assert "127.0.0.1" in addrs
    count, micros = moved["127.0.0.1"]
    # both ends are this process's sockets: the sender's 16 MiB acknowledged (the receiver's side acknowledged none)
    assert 16 << 20 <= count <= (16 << 20) + 4096 and micros >= 0, moved
    sender.close()
    reader.join(timeout=10)
    server.close()
    time.sleep(0.05)
    gone, _ = sockets.read()
    assert "127.0.0.1" not in gone or gone["127.0.0.1"][0] < count, gone


def window(rates, hosts=("n1", "n2", "n3"), per_host=2, seconds=0.01):
    """Each node's ranks as the watch posts them: each rank's addresses, and what its sockets carried to a peer
    node's address over the window at the given bytes a second while sending (1 MiB each)."""
    out = {}
    for index, host in enumerate(hosts):
        for local in range(per_host):
            rank = index * per_host + local
            links = {f"10.0.0.{hosts.index(b) + 1}": [1 << 20, int((1 << 20) / rate * 1e6)]
                     for (a, b), rate in rates.items() if a == host and local == 0}
            links[f"10.0.0.{index + 1}"] = [1 << 20, 100]         # within the node: never compared
            out[rank] = {"host": host, "addrs": [f"10.0.0.{index + 1}"], "links": links, "step_s": 0.02,
                         "forward_s": 0.001, "between_s": 0.0001, "backward_s": 0.001, "best_step_s": 0.005,
                         "last_step": 40}
    return out


RING = [("n1", "n2"), ("n2", "n3"), ("n3", "n1")]


def test_a_nodes_slowed_link_is_named_from_the_pairs_it_is_in_and_not_the_nodes_beside_it():
    """Gloo's ring over 3 nodes: n1 -> n2, n2 -> n3, n3 -> n1. n2's link at 100 Mbit/s both ways: two of the three
    pairs hold it (the median of all would be slow too): named from its pairs against the pair without it."""
    rates = {pair: (12.5e6 if "n2" in pair else 600e6) for pair in RING}
    found = slow_link(window(rates))
    assert found.subject == "n2's link" and found.nodes == ["n2"], found
    assert "12.5 MB/s n1 -> n2, 12.5 MB/s n2 -> n3" in found.summary and "600 MB/s" in found.summary
    assert "NIC" in found.remedy


def test_a_slow_link_between_two_fast_nodes_is_named_as_the_link():
    pairs = [("n1", "n2"), ("n2", "n1"), ("n1", "n3"), ("n3", "n1"), ("n2", "n3"), ("n3", "n2")]
    rates = {pair: (20e6 if set(pair) == {"n1", "n3"} else 700e6) for pair in pairs}
    found = slow_link(window(rates))
    assert found.subject == "n1 <-> n3" and found.nodes == ["n1", "n3"], found
    assert "switch ports" in found.remedy


def test_links_alike_two_nodes_or_too_little_traffic_name_nothing():
    assert slow_link(window({pair: 600e6 * (1 + 0.2 * i) for i, pair in enumerate(RING)})) is None
    assert slow_link(window({("n1", "n2"): 1e6, ("n2", "n1"): 600e6}, hosts=("n1", "n2"))) is None
    little = window({pair: (12.5e6 if "n2" in pair else 600e6) for pair in RING})
    for numbers in little.values():
        numbers["links"] = {peer: [4096, micros] for peer, (_, micros) in numbers["links"].items()}
    assert pair_rates(little) == {} and slow_link(little) is None


def test_the_job_slower_with_every_rank_waiting_and_a_slowed_link_names_the_link_and_no_rank():
    """Every rank's step 4x its best, no rank's own work grown (they all wait in the all-reduce): the job's line
    names n2's link, from the ranks' own sockets, and no rank; with the links alike it names nothing."""
    slowed = window({pair: (12.5e6 if "n2" in pair else 600e6) for pair in RING})
    [slow] = judge_window(slowed, 1.3)
    assert slow.rank == JOB and slow.host == "n2" and slow.slowdown == pytest.approx(4.0)
    assert slow.how.startswith("the network: n2's link moves the job's traffic at") and "only waits" in slow.how
    alike = window({pair: 600e6 for pair in RING})
    [slow] = judge_window(alike, 1.3)
    assert slow.rank == JOB and slow.host == "" and "the network, or on a GPU" in slow.how


def test_a_node_whose_cpus_are_throttled_is_named_from_its_ranks_cpu_wait_and_its_link_not_blamed():
    """Seen on the sandbox: a 0.1-CPU quota on n2's ranks, every rank's step 6.7x its best, no rank's forward or
    backward grown in the mean, and n2's sockets slow too (on a veth the throttled process sends its own packets):
    the job's line blamed n2's link (a wrong remedy: its NIC). The ranks' threads' wait for a CPU says it: n2's
    ranks waited 80 ms a step, their peers 2 ms; n2's rank is named, its CPUs taken, and no link."""
    slowed = window({pair: (5e6 if "n2" in pair else 13e6) for pair in RING})
    for rank, numbers in slowed.items():
        numbers.update(step_s=0.1, best_step_s=0.016, cpu_wait_s=0.08 if numbers["host"] == "n2" else 0.002)
    named = judge_window(slowed, 1.3)
    assert {s.host for s in named} == {"n2"} and JOB not in {s.rank for s in named}, named
    assert named[0].how.startswith("its CPUs are taken: its training thread waited 0.08 s a step for a CPU"), \
        named[0].how
    # waiting too little to be named (1.18x), but beyond the others': the link is not blamed for it either
    for numbers in slowed.values():
        numbers["cpu_wait_s"] = 0.015 if numbers["host"] == "n2" else 0.002
    [slow] = judge_window(slowed, 1.3)
    assert slow.rank == JOB and slow.host == "" and "link" not in slow.how.split(":")[1], slow.how


def test_a_job_already_slower_for_no_node_then_for_a_slowed_link_says_the_link_when_it_comes():
    """Seen on the sandbox: the loaded host made the job 1.45x slower from step 41 (no node named), an episode
    still open when a node's link was slowed; the link was never said. The job's episodes are kept by what they
    name: the link's begins on its own, the drift's ends."""
    from clustercheck.injob.straggler import Episodes
    episodes = Episodes(2)
    alike = window({pair: 600e6 for pair in RING})
    slowed = window({pair: (12.5e6 if "n2" in pair else 600e6) for pair in RING})
    said = [e for step in (10, 20) for e in episodes.feed(judge_window(alike, 1.3), step)]
    assert [(e.kind, e.slow.host) for e in said] == [("began", "")]
    said = [e for step in (30, 40) for e in episodes.feed(judge_window(slowed, 1.3), step)]
    assert [(e.kind, e.slow.host) for e in said] == [("began", "n2"), ("ended", "")], said


def test_a_loaded_hosts_uneven_cpu_waits_name_no_rank():
    """Seen in a fresh-clone run with the suite's other worker beside it: a healthy rank's wait 0.016 s a step
    against its peers' 0.007 s (2.3x, 60% of its 27 ms step) was named "its CPUs are taken", and so was a rank of a
    2-rank job. A wait counts at CPU_RATIO (4x) its peers' and a quarter of the step at least."""
    ranks = window({pair: 600e6 for pair in RING})
    for rank, numbers in ranks.items():
        numbers.update(step_s=0.0268, best_step_s=0.0178, cpu_wait_s=0.016 if rank == 1 else 0.007)
    assert [s.rank for s in judge_window(ranks, 1.3)] == [JOB]
    ranks[1]["cpu_wait_s"] = 0.004          # 4x a 0.001 s peer wait, but a seventh of its step: its CPUs are not it
    for rank in (0, 2, 3, 4, 5):
        ranks[rank]["cpu_wait_s"] = 0.001
    assert [s.rank for s in judge_window(ranks, 1.3)] == [JOB]
