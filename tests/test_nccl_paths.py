"""Which path NCCL really took (issue 38), read from real NCCL INFO logs of public threads and repositories
(tests/data/nccl-logs/SOURCES.md) and judged against the node's facts: sockets on an RDMA node, a failed plugin and
differing versions FAIL naming the node; GPUDirect off, P2P off, a virtual bootstrap interface WARN."""

import os
import subprocess
import sys

import pytest

from clustercheck.nccl.path_judge import judge_paths, path_rows, paths_by_host, paths_by_node
from clustercheck.onnode import nccl_log_reader

DATA = os.path.join(os.path.dirname(__file__), "data", "nccl-logs")
IB_UP = {"infiniband": [{"device": "mlx5_0", "port": 1, "state": "ACTIVE", "link_layer": "InfiniBand"}]}


def summary(name):
    return nccl_log_reader.summarize_files([os.path.join(DATA, name)])


def by_check(findings):
    return {f.check: f for f in findings}


def test_every_recorded_log_is_read_without_a_crash_and_says_what_it_holds():
    """Every log but one gives a fact (a path, the network, a version, the bootstrap, the plugin, a WARN); the one
    that does not was anonymised to `pod-id:num:num` by its poster, which no NCCL writes."""
    names = sorted(n for n in os.listdir(DATA) if n.endswith(".txt"))
    assert len(names) >= 40
    silent = []
    for name in names:
        read = summary(name)
        paths = paths_by_host(read)
        judge_paths(paths)            # never raises, whatever the log holds
        if not read["job"] and not any(p.inter or p.intra or p.networks or p.network or p.versions or p.bootstrap or
                                       p.plugin or any(r["warns"] for r in p.ranks) for p in paths.values()):
            silent.append(name)
    assert silent == ["nvls-na-commline-anonymized-nccl-issue-1466.txt"]


@pytest.mark.parametrize("name, between, inside", [
    ("ib-gdr-cumem-2node-h20-nccl-issue-1189.txt", "NET/IB/GDRDMA", "P2P/CUMEM"),
    ("ibext-nogdr-8node-nccl-issue-1814.txt", "NET/IBext_v8", None),
    ("efa-ofi-mpirun-2node-2.12.7-terraform-aws-eks-blueprints.txt", "NET/AWS Libfabric", None),
    ("efa-ofi-g6e-4pod1proc-nogdr-training-on-eks.txt", "NET/Libfabric", None),
    ("efa-ofi-g6e-1pod4proc-shm-training-on-eks.txt", None, "SHM"),
    ("socket-ansiprefix-2.7.8-pytorch-issue-68893.txt", "NET/Socket", None),
    ("p2p-directpointer-1proc8gpu-nccl-issue-1817.txt", None, "P2P/direct pointer"),
    ("efa-mpirun-ringP2PIPC-warn-aws-ofi-nccl-issue-24.txt", "NET/AWS Libfabric", "P2P/IPC"),
])
def test_the_path_between_and_inside_nodes_is_read_in_every_version_s_words(name, between, inside):
    paths = paths_by_host(summary(name))
    betweens = {n for p in paths.values() for n in p.inter}
    insides = {n for p in paths.values() for n in p.intra}
    if between:
        assert between in betweens, betweens
    if inside:
        assert inside in insides, insides


def test_versions_bootstrap_and_plugins_are_read():
    efa = paths_by_host(summary("efa-ofi-mpirun-2node-2.12.7-terraform-aws-eks-blueprints.txt"))
    assert {v for p in efa.values() for v in p.versions} == {"2.12.7"}
    assert {i for p in efa.values() for i in p.bootstrap} == {"eth0"}
    lo = paths_by_host(summary("socket-lo-2.10.3-nccl-issue-1126.txt"))
    assert {i for p in lo.values() for i in p.bootstrap} == {"lo"}
    failed = paths_by_host(summary("socket-1rank-plugin-v7-missing-2.19.3-nccl-issue-1267.txt"))
    [path] = failed.values()
    assert path.plugin["status"] == "failed" and "ncclNetPlugin" in path.plugin["detail"]
    absent = paths_by_host(summary("socket-pluginfail-dlerror-2.20.5-vllm-issue-10453.txt"))
    assert all(p.plugin["status"] == "none" for p in absent.values())    # no plugin there: not a failure


def test_sockets_between_nodes_on_an_rdma_node_fail_naming_the_node_and_the_cause_line():
    """A recorded 2.7.8 run whose ranks connected over NET/Socket, on a node whose probe shows an active IB port."""
    paths = paths_by_host(summary("socket-ansiprefix-2.7.8-pytorch-issue-68893.txt"))
    [node] = paths
    found = by_check(judge_paths(paths, {node: IB_UP}))
    transport = found["nccl.transport"]
    assert transport.status.name == "FAIL" and transport.nodes == [node]
    assert "over TCP sockets though it has an active RDMA port" in transport.summary
    assert "NET/Socket" in transport.evidence[0]
    no_rdma = by_check(judge_paths(paths, {node: {"infiniband": []}}))["nccl.transport"]   # no RDMA port: the
    assert no_rdma.status.name == "WARN" and "libibverbs" in " ".join(no_rdma.evidence)     # log's own line, a WARN


def test_ib_disabled_by_a_variable_is_the_cause_said():
    paths = paths_by_host(summary("socket-ibdisable1-ipv6-2.5.6-nccl-issue-529.txt"))
    path = next(iter(paths.values()))
    assert path.env.get("NCCL_IB_DISABLE") == "1"
    from clustercheck.nccl.path_judge import why_sockets
    assert why_sockets(path) == "NCCL_IB_DISABLE=1 is set"


def test_a_failed_plugin_warns_from_the_log_alone_and_fails_beside_an_active_rdma_port():
    paths = paths_by_host(summary("socket-1rank-plugin-v7-missing-2.19.3-nccl-issue-1267.txt"))
    plugin = by_check(judge_paths(paths))["nccl.plugin"]
    assert plugin.status.name == "WARN" and plugin.nodes == list(paths)
    [node] = paths
    assert by_check(judge_paths(paths, {node: IB_UP}))["nccl.plugin"].status.name == "FAIL"


def test_ncc_versions_differing_between_nodes_fail_naming_the_odd_node():
    """Three nodes: two ran the 2.27.3 recording, one the 2.12.7 recording (each node's own real log)."""
    summaries = {"n1": summary("efa-ofi-g6e-4pod1proc-nogdr-training-on-eks.txt"),
                 "n2": summary("efa-ofi-g6e-4pod1proc-nogdr-training-on-eks.txt"),
                 "n3": {"ranks": summary("efa-ofi-mpirun-2node-2.12.7-terraform-aws-eks-blueprints.txt")["ranks"][:1]}}
    version = by_check(judge_paths(paths_by_node(summaries), {n: {} for n in summaries}))["nccl.version"]
    assert version.status.name == "FAIL" and version.nodes == ["n3"]
    alone = by_check(judge_paths(paths_by_node(summaries)))["nccl.version"]     # a log may hold several runs
    assert alone.status.name == "WARN" and alone.nodes == ["n3"]


def test_rdma_without_gpudirect_warns_and_says_whether_it_was_possible():
    paths = paths_by_host(summary("ibext-nogdr-8node-nccl-issue-1814.txt"))
    [node] = paths
    off = by_check(judge_paths(paths))["nccl.gdr"]
    assert off.status.name == "WARN" and "is nvidia_peermem loaded" in off.summary
    possible = by_check(judge_paths(paths, {node: {"gpudirect": {"modules": ["nvidia_peermem"]}}}))["nccl.gdr"]
    assert "possible (nvidia_peermem is loaded) but off" in possible.summary
    gdr = paths_by_host(summary("ib-gdr-cumem-2node-h20-nccl-issue-1189.txt"))
    assert "nccl.gdr" not in by_check(judge_paths(gdr))


def test_a_virtual_bootstrap_interface_where_others_use_a_real_one_warns():
    summaries = {"n1": summary("socket-lo-2.10.3-nccl-issue-1126.txt"),
                 "n2": summary("efa-ofi-mpirun-2node-2.12.7-terraform-aws-eks-blueprints.txt")}
    boot = by_check(judge_paths(paths_by_node(summaries)))["nccl.bootstrap"]
    assert boot.status.name == "WARN" and boot.nodes == ["n1"] and "n1: Bootstrap : Using lo:127.0.0.1" in boot.evidence


def test_lines_cut_or_interleaved_are_read_line_by_line_never_a_crash():
    text = open(os.path.join(DATA, "ib-gdr-cumem-2node-h20-nccl-issue-1189.txt"), errors="replace").read()
    lines = text.splitlines()
    mangled = [line[: len(line) // 2] for line in lines] + [a + b for a, b in zip(lines[::2], lines[1::2])]
    result = nccl_log_reader.summarize(mangled)
    assert isinstance(result["ranks"], list)
    assert path_rows(paths_by_host(result)) is not None


def test_the_reader_runs_alone_on_a_node_with_the_standard_library(tmp_path):
    log = tmp_path / "nccl.host.123.log"
    log.write_text(open(os.path.join(DATA, "ib-gdr-cumem-2node-h20-nccl-issue-1189.txt"), errors="replace").read())
    out = subprocess.run([sys.executable, "-S", nccl_log_reader.__file__, str(log), str(tmp_path / "missing.log")],
                         capture_output=True, text=True, check=True).stdout
    import json
    doc = json.loads(out)
    assert doc["ranks"] and doc["unreadable"][0].endswith("No such file or directory")


def test_the_capture_asks_nccl_for_a_file_per_rank_and_respects_the_user_s_own_setting():
    from clustercheck.ranks.nccl_capture import plan_capture
    ours = plan_capture({})
    assert ours.env == {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET,ENV,BOOTSTRAP",
                        "NCCL_DEBUG_FILE": "nccl.%h.%p.log"} and not ours.said
    theirs = plan_capture({"NCCL_DEBUG": "WARN", "NCCL_SOCKET_IFNAME": "eth0"})
    assert theirs.env == {} and theirs.said == "your NCCL_DEBUG=WARN respected"


def test_a_user_s_nccl_debug_on_the_console_is_read_from_the_ranks_stderr_and_too_little_is_said():
    from clustercheck.ranks.nccl_capture import NcclLogCapture, read_captured, unread
    from clustercheck.ranks.runs import NodeRun
    text = open(os.path.join(DATA, "socket-ansiprefix-2.7.8-pytorch-issue-68893.txt"), errors="replace").read()
    runs = {"n1": NodeRun("n1", exit_code=0, stderr=text)}
    info = read_captured(None, [], {}, NcclLogCapture({}, "your NCCL_DEBUG=INFO respected"), runs,
                         {"NCCL_DEBUG": "INFO"})
    assert info.summaries["n1"]["ranks"] and unread(info) == ""
    warn = read_captured(None, [], {}, NcclLogCapture({}, "your NCCL_DEBUG=WARN respected"), runs,
                         {"NCCL_DEBUG": "WARN"})
    assert "says too little of its path" in unread(warn)


def test_the_nodes_read_their_own_files_and_remove_them(tmp_path):
    """The node-side step through the local transport (a real shell and interpreter): two ranks' files read
    into one summary, then gone."""
    from clustercheck.core.inventory import local_inventory
    from clustercheck.ranks.nccl_capture import NcclLogCapture, plan_capture, read_captured
    from clustercheck.ranks.runs import NodeRun
    from clustercheck.transport.fanout import Cluster, FanoutOptions
    recorded = open(os.path.join(DATA, "ib-gdr-cumem-2node-h20-nccl-issue-1189.txt"), errors="replace").read()
    for pid in (111, 222):
        (tmp_path / f"nccl.host.{pid}.log").write_text(recorded)
    [node] = local_inventory()
    with Cluster([node], FanoutOptions()) as cluster:
        capture = read_captured(cluster, [node], {node.name: str(tmp_path)}, plan_capture({}),
                                {node.name: NodeRun(node.name)}, {})
    summary = capture.summaries[node.name]
    assert summary["files"] == 2 and summary["ranks"] and not list(tmp_path.glob("nccl.*.log"))
    assert isinstance(capture, NcclLogCapture)


def test_a_large_log_counted_in_bulk_reads_as_every_line_read_alone(monkeypatch):
    """explain and the nodes read a large job's log in blocks, its repeated lines (connections, `Connected all
    rings`) counted in bulk: the summary is the one each line read alone gives (ranks, their order, the counts of
    every path, the WARNs), and most connections are not read one by one."""
    lines = []
    for name in ("ib-gdr-cumem-2node-h20-nccl-issue-1189.txt", "check44-nvidia-nccl-928.txt",
                 "socket-lo-2.10.3-nccl-issue-1126.txt"):
        lines += open(os.path.join(DATA, name), errors="replace").read().split("\n") * 100
    alone, alone_job = {}, {}
    for line in lines:
        nccl_log_reader.read_nccl_line(line.rstrip("\r"), alone, alone_job)
    calls = []
    read_line = nccl_log_reader.read_nccl_line
    monkeypatch.setattr(nccl_log_reader, "read_nccl_line", lambda *args: calls.append(args[0]) or read_line(*args))
    bulk, bulk_job = {}, {}
    for start in range(0, len(lines), 200):          # blocks, as explain reads a log in chunks
        nccl_log_reader.read_nccl_lines(lines[start:start + 200], bulk, bulk_job)
    assert list(bulk.items()) == list(alone.items()) and bulk_job == alone_job
    assert [list(r["inter"].items()) for r in bulk.values()] == [list(r["inter"].items()) for r in alone.values()]
    connections = [line for line in lines if " via " in line]
    assert len([line for line in calls if " via " in line]) < len(connections) / 3
