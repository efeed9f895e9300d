"""A host setting that breaks large flat networks (issue 42): the kernel's neighbour (ARP) table, 1,024 entries by
default, overflows on a flat network of more than about 1,000 hosts: "arp_cache: neighbor table overflow!" in the
kernel log (net/core/neighbour.c's words; the line as reported in Ubuntu bug 1780348 and Kubernetes guides), and
connections time out. env reads gc_thresh1..3 (IPv4 and IPv6) on every node and judges them against the cluster's
size; an overflow line in the kernel log is a finding."""

from clustercheck.core.result import Status
from clustercheck.node.neighbours import neighbour_tables
from clustercheck.onnode import kernlog, nodelib
from clustercheck.stages.env.judges import evaluate
from clustercheck.core.thresholds import Config
from tests.test_env_rules import cluster

DEFAULTS = {"gc_thresh1": 128, "gc_thresh2": 512, "gc_thresh3": 1024}
OVERFLOW = "[812345.118842] neighbour: arp_cache: neighbor table overflow!"


def node_doc(v4=DEFAULTS, v6=DEFAULTS, addresses=("10.0.0.1",), ipv6=()):
    return {"net": {"interfaces": {"lo": {"kind": "loopback", "state": "unknown", "ipv4": ["127.0.0.1"]},
                                   "eth0": {"kind": "physical", "state": "up", "ipv4": list(addresses),
                                            "ipv6": ["fe80::1", *ipv6]}},
                    "neighbour_table": {"ipv4": dict(v4), "ipv6": dict(v6)}}}


def nodes(num_nodes, doc=node_doc, **odd):
    return {f"n{i}": (odd.get(f"n{i}") or doc)() for i in range(num_nodes)}


def test_1100_nodes_on_the_kernel_default_fail_with_the_sysctl_that_fixes_it():
    raised = {"gc_thresh1": 2048, "gc_thresh2": 4096, "gc_thresh3": 8192}
    docs = nodes(1100, n7=lambda: node_doc(v4=raised))
    [small] = neighbour_tables(docs, 1100)
    assert (small.check, small.status) == ("neigh.ipv4", Status.FAIL) and "n7" not in small.nodes
    assert small.summary == "the neighbour (ARP) table is smaller than the cluster needs on n[0-6,8-1099]"
    assert small.evidence == ["n[0-6,8-1099]: net.ipv4.neigh.default.gc_thresh3 = 1024, under the 1099 entries it "
                              "needs (1099 peers x 1 interface(s))"]
    assert small.remedy.startswith("raise it on every node: sysctl -w net.ipv4.neigh.default.gc_thresh1=1099 "
                                   "net.ipv4.neigh.default.gc_thresh2=2198 net.ipv4.neigh.default.gc_thresh3=4396")


def test_two_interfaces_double_the_need_and_a_soft_limit_under_it_warns():
    docs = nodes(400, lambda: node_doc(addresses=("10.0.0.1",)))
    docs["n0"]["net"]["interfaces"]["eth1"] = {"kind": "physical", "state": "up", "ipv4": ["10.1.0.1"]}
    for doc in docs.values():      # a bridge with an address is no second network to the cluster's peers
        doc["net"]["interfaces"]["docker0"] = {"kind": "virtual", "state": "up", "ipv4": ["172.17.0.1"]}
    [soft] = neighbour_tables(docs, 400)
    assert soft.status is Status.WARN and soft.nodes == ["n0"]
    assert soft.evidence == ["n0: net.ipv4.neigh.default.gc_thresh2 = 512, under the 798 entries it needs: "
                             "collected after 5 s, re-resolved at every step"]


def test_ipv6_is_judged_where_a_node_has_a_global_ipv6_address():
    docs = nodes(1500, lambda: node_doc(v4={"gc_thresh1": 4096, "gc_thresh2": 8192, "gc_thresh3": 16384},
                                        ipv6=("2001:db8::7",)))
    [v6] = neighbour_tables(docs, 1500)
    assert (v6.check, v6.status) == ("neigh.ipv6", Status.FAIL) and "net.ipv6.neigh.default.gc_thresh3=" in v6.remedy
    only_link_local = nodes(1500, lambda: node_doc(v4={"gc_thresh1": 4096, "gc_thresh2": 8192, "gc_thresh3": 16384}))
    [ok] = neighbour_tables(only_link_local, 1500)
    assert ok.status is Status.OK and ok.summary == ("neighbour tables hold the 1499 entries 1500 nodes need (read "
                                                     "on every node)")


def test_a_table_a_container_hides_is_unknown_only_when_the_default_would_not_hold_the_cluster():
    hidden = {"unreadable": "/proc/sys/net/ipv4/neigh/default/gc_thresh1: not readable (a container's own network "
                            "namespace hides it)"}
    [unknown] = neighbour_tables(nodes(2000, lambda: node_doc(v4=hidden)), 2000)
    assert unknown.status is Status.UNKNOWN and "could not be read on n[0-1999]" in unknown.summary
    assert unknown.evidence == [hidden["unreadable"]] and "sysctl net.ipv4.neigh.default.gc_thresh3" in unknown.remedy
    [small] = neighbour_tables(nodes(8, lambda: node_doc(v4=hidden)), 8)
    assert small.status is Status.OK and "read on 0 of 8 nodes; where unread, the kernel default 1024" in small.summary


def test_the_probe_reads_both_families_and_says_what_it_cannot(tmp_path):
    for family, values in (("ipv4", (1024, 4096, 8192)), ("ipv6", (128, 512, None))):
        base = tmp_path / "sys" / "net" / family / "neigh" / "default"
        base.mkdir(parents=True)
        for key, value in zip(("gc_thresh1", "gc_thresh2", "gc_thresh3"), values):
            if value is not None:
                (base / key).write_text(f"{value}\n")
    tables = nodelib.collect_neighbour_table(str(tmp_path))
    assert tables["ipv4"] == {"gc_thresh1": 1024, "gc_thresh2": 4096, "gc_thresh3": 8192}
    assert tables["ipv6"]["unreadable"].endswith("gc_thresh3: not readable (a container's own network namespace "
                                                 "hides it)")


def test_an_overflow_in_the_kernel_log_is_a_finding_in_envs_report_naming_the_node():
    lines = ["[812340.000001] eth0: renamed from veth1fc0901", OVERFLOW, OVERFLOW,
             "[812346.2] net_ratelimit: 6400 callbacks suppressed"]
    [event] = kernlog.neighbour_overflows(lines)
    assert (event["table"], event["count"], event["line"]) == ("arp_cache", 2, "arp_cache: neighbor table overflow!")

    def overflowed(i, doc):
        doc["net"]["neighbour_table"] = {"ipv4": dict(DEFAULTS), "ipv6": dict(DEFAULTS)}
        doc["kernel_log"] = dict(doc.get("kernel_log") or {}, readable=True, neigh_overflow=[event] if i == 2 else [])
    findings = evaluate(cluster(4, overflowed), Config()).findings
    [overflow] = [f for f in findings if f.check.startswith("neigh") and f.status is not Status.OK]
    assert overflow.status is Status.FAIL and overflow.nodes == ["node03"]
    assert overflow.summary.startswith("node03's kernel logged \"arp_cache: neighbor table overflow!\" 2 time(s)")
    assert overflow.evidence[-1] == ("node03: net.ipv4.neigh.default.gc_thresh3 is 1024 now; other hosts on its "
                                     "network fill it beside the cluster's 3 peers")
    assert "sysctl -w net.ipv4.neigh.default.gc_thresh1=2048 " in overflow.remedy


def test_an_overflow_before_the_table_was_raised_is_a_warning():
    docs = nodes(3, lambda: node_doc(v4={"gc_thresh1": 4096, "gc_thresh2": 8192, "gc_thresh3": 16384}))
    docs["n1"]["kernel_log"] = {"neigh_overflow": kernlog.neighbour_overflows([OVERFLOW])}
    [old] = neighbour_tables(docs, 3)
    assert old.status is Status.WARN and old.evidence[-1] == ("n1: net.ipv4.neigh.default.gc_thresh3 is 16384 now, "
                                                              "above the kernel default: raised after the overflow?")
