"""`clustercheck net` without the sandbox: the round-robin schedule, the judges on small
mesh results, and the node program's listener and connections on this machine."""

import itertools
import json
import socket
import sys

import pytest

from clustercheck.core.inventory import Node
from clustercheck.core.result import Status
from clustercheck.node.gather import parse_document as parse_line
from clustercheck.onnode import inline_command, net_probe
from clustercheck.onnode.rounds import round_robin
from clustercheck.stages.net.facts import NetFacts
from clustercheck.stages.net.rules import judge_net, links, mesh
from clustercheck.transport.local import LocalTransport


@pytest.mark.parametrize("count", [2, 3, 4, 7, 16])
def test_round_robin_pairs_every_node_once_per_round_and_every_pair_once(count):
    names = [f"n{i}" for i in range(count)]
    rounds = round_robin(names)
    seen = [frozenset(pair) for pairs in rounds for pair in pairs]
    assert sorted(map(sorted, seen)) == sorted(map(sorted, map(frozenset, itertools.combinations(names, 2))))
    for pairs in rounds:
        members = [n for pair in pairs for n in pair]
        assert len(members) == len(set(members))


def facts_with(states):
    """NetFacts for nodes a, b, c with the given {(from, to, port): state}; other attempts open."""
    nodes = [Node(n) for n in "abc"]
    facts = NetFacts(nodes)
    for node in nodes:
        facts.listeners[node.name] = {"schema": 1, "ports": {"ephemeral": [40000, 50000]},
                                      "launch": [{"port": 29500, "bound": True}, {"port": 29400, "bound": True}],
                                      "ephemeral_range": [32768, 60999]}
    for source in "abc":
        results = []
        for target in "abc":
            if target == source:
                continue
            for port in [29500, 29400, 40000, 50000]:
                results.append({"to": target, "port": port, "state": states.get((source, target, port), "open")})
        facts.mesh[source] = {"results": results}
    return facts


def test_mesh_blames_the_inbound_side_when_every_peer_fails():
    facts = facts_with({("a", "c", 40000): "filtered", ("b", "c", 40000): "filtered"})
    [finding] = mesh(facts)
    assert finding.check == "net.inbound" and finding.nodes == ["c"]
    assert finding.summary == "c drops inbound TCP on port 40000 from every peer that tried (filtered)"


def test_mesh_names_a_single_failing_pair_and_direction():
    facts = facts_with({("b", "c", 40000): "refused", ("b", "c", 50000): "refused"})
    [finding] = mesh(facts)
    assert finding.check == "net.pair" and finding.nodes == ["b", "c"]
    assert finding.summary == "b -> c: ports 40000, 50000 refused"


def test_master_port_unreachable_is_its_own_finding():
    facts = facts_with({("b", "a", 29500): "filtered", ("c", "a", 29500): "filtered"})
    found = {f.check: f for f in judge_net(facts) if f.status is not Status.OK}
    assert set(found) == {"net.master.reach"}
    assert found["net.master.reach"].nodes == ["b", "c"]


def test_links_name_the_node_common_to_the_slow_pairs():
    facts = NetFacts([Node(n) for n in "abcd"])
    for x, y in itertools.combinations("abcd", 2):
        slow = "c" in (x, y)
        facts.links.append({"from": x, "to": y, "rtt_ms": 0.1, "mbit_s": 20.0 if slow else 9000.0})
    [finding] = links(facts)
    assert finding.status is Status.WARN and finding.nodes == ["c"]
    assert "20 Mb/s" in finding.evidence[0]


def test_parse_line_reports_what_went_wrong():
    assert parse_line(None) == (None, "no answer")
    assert parse_line('{"schema": 1, "fatal": "boom"}')[1] == "the probe failed: boom"
    assert parse_line("Traceback ...")[1].startswith("unreadable answer")
    assert parse_line('{"schema": 1, "ready": true}')[0] == {"schema": 1, "ready": True}


def test_listener_and_connections_on_this_machine():
    transport = LocalTransport()
    listener = transport.start(inline_command(sys.executable, "net_probe",
                                              ["listen", "--samples", "2", "--hold", "30"]))
    try:
        ready = json.loads(listener.readline(20))
        ports = ready["ports"]["ephemeral"]
        low, high = ready["ephemeral_range"]
        assert len(ports) == 2 and all(low <= p <= high for p in ports)
        with socket.socket() as closed:  # a port nobody listens on
            closed.bind(("127.0.0.1", 0))
            free_port = closed.getsockname()[1]
        targets = [["me", "127.0.0.1", p] for p in ports] + [["nobody", "127.0.0.1", free_port],
                                                             ["nowhere", "no-such-host.invalid", 1]]
        result = transport.run(inline_command(sys.executable, "net_probe",
                                              ["connect", "--targets", json.dumps(targets), "--timeout", "2"]), 30)
        states = {(r["to"], r["port"]): r["state"] for r in json.loads(result.stdout)["results"]}
        assert states == {("me", ports[0]): "open", ("me", ports[1]): "open", ("nobody", free_port): "refused",
                          ("nowhere", 1): "unresolved"}
        link = json.loads(transport.run(inline_command(sys.executable, "net_probe", [
            "link", "--host", "127.0.0.1", "--port", str(ports[0]), "--stream-s", "0.1"]), 30).stdout)
        assert link["bytes"] > 0 and link["mbit_s"] > 0 and link["rtt_ms"] > 0
    finally:
        listener.stop()
        transport.close()


def test_port_holder_names_this_process():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        holder = net_probe.port_holder(sock.getsockname()[1])
    assert holder["pid"] is not None
    assert "python" in holder["command"] or "pytest" in holder["command"]


def test_a_node_other_than_the_master_that_drops_a_launch_port_cannot_be_master_addr():
    """Any node may be the master (Slurm: the first of each allocation; DeepSpeed: the first host)."""
    facts = facts_with({("a", "b", 29500): "filtered", ("c", "b", 29500): "filtered",
                        ("a", "c", 29400): "refused", ("b", "c", 29400): "refused"})
    found = [f for f in judge_net(facts) if f.status is not Status.OK]
    assert [(f.check, f.status, f.nodes) for f in found] == [("net.launch", Status.WARN, ["b"]),
                                                             ("net.launch", Status.WARN, ["c"])]
    assert found[0].summary == "b cannot be MASTER_ADDR: inbound 29500 filtered"
    assert found[1].summary == "c cannot be MASTER_ADDR: inbound 29400 refused"
    assert facts.blocking_failures() == []   # a launch with a as the master does not meet them


def test_the_rendezvous_port_on_the_master_fails():
    facts = facts_with({("b", "a", 29400): "filtered", ("c", "a", 29400): "filtered"})
    [found] = [f for f in judge_net(facts) if f.status is not Status.OK]
    assert found.check == "net.rdzv.reach" and found.status is Status.FAIL and found.nodes == ["b", "c"]
    assert "cannot reach the rendezvous port a:29400 (filtered)" in found.summary
    assert len(facts.blocking_failures()) == 2


# ---- at 1,000 nodes: the sampled plan, and one finding per cause ----------------------------
from clustercheck.stages.net.sampling import FULL_MESH_MAX, plan_mesh  # noqa: E402


def test_a_sampled_plan_tests_every_node_from_k_peers_both_ways_and_the_master_from_all():
    names = [f"n{i}" for i in range(1000)]
    plan = plan_mesh(names, "auto", peers=8, seed=3)
    assert plan.mode == "sampled"
    sources = {n: 0 for n in names}
    for source, targets in plan.targets.items():
        assert source not in targets and len(set(targets)) == len(targets)
        assert "n0" in targets or source == "n0"
        for target in targets:
            sources[target] += 1
    assert all(len([t for t in plan.targets[s] if t != "n0"]) >= 7 for s in names)
    assert min(c for n, c in sources.items() if n != "n0") >= 8 and sources["n0"] == 999
    assert plan.pairs < 10 * 1000


def test_the_full_mesh_is_kept_up_to_its_size_and_on_request():
    assert plan_mesh([f"n{i}" for i in range(FULL_MESH_MAX)]).mode == "full"
    assert plan_mesh([f"n{i}" for i in range(FULL_MESH_MAX + 1)]).mode == "sampled"
    assert plan_mesh([f"n{i}" for i in range(300)], "full").pairs == 300 * 299


def planned_facts(count, state_of):
    """NetFacts of a sampled plan over `count` nodes; state_of(source, target, port) -> state."""
    nodes = [Node(f"n{i}") for i in range(count)]
    facts = NetFacts(nodes)
    facts.plan = plan_mesh([n.name for n in nodes], "auto", peers=8, seed=1)
    for i, node in enumerate(nodes):
        launch = [{"port": 29500, "bound": True}, {"port": 29400, "bound": True}]
        facts.listeners[node.name] = {"schema": 1, "ports": {"ephemeral": [40000 + i]},
                                      "ephemeral_range": [32768, 60999], "launch": launch}
    for source, targets in facts.plan.targets.items():
        facts.mesh[source] = {"results": [
            {"to": t, "port": p, "state": state_of(source, t, p)}
            for t in targets for p in (29500, 29400, 40000 + int(t[1:]))]}
    return facts


def problems(facts):
    return [f for f in judge_net(facts) if f.status is not Status.OK]


def test_one_node_dropping_a_port_among_1000_is_named_once():
    facts = planned_facts(1000, lambda s, t, p: "filtered" if t == "n417" and p == 40417 else "open")
    [finding] = problems(facts)
    assert (finding.check, finding.nodes) == ("net.inbound", ["n417"])
    assert finding.summary == "n417 drops inbound TCP on port 40417 from every peer that tried (filtered)"
    assert len(finding.evidence) == 1


def test_a_node_that_cannot_connect_out_is_named_not_its_peers():
    facts = planned_facts(1000, lambda s, t, p: "filtered" if s == "n55" else "open")
    found = problems(facts)
    assert {(f.check, tuple(f.nodes)) for f in found} >= {("net.outbound", ("n55",))}
    assert all("n55" in f.nodes for f in found), [f.summary for f in found]
    assert not [f for f in found if f.check in ("net.inbound", "net.launch")]


def test_a_clean_1000_node_mesh_says_which_plan_ran_and_what_a_retry_saved():
    facts = planned_facts(1000, lambda s, t, p: "open")
    facts.mesh["n3"]["results"][0]["first_state"] = "filtered"
    facts.recovered = 1
    assert problems(facts) == []
    [ok] = [f for f in judge_net(facts) if f.check == "net.mesh"]
    assert "sampled: each node to 8 random peers" in ok.summary and "1 failed at first" in ok.summary

