"""NCCL's path judged from a log alone (issue 44): the network named as users know it, GPUDirect, the fallback line,
the node of every line, and explain's first screen; on real logs of public threads (tests/data/nccl-logs/SOURCES.md,
whose columns say each file's transport, GDR and plugin)."""

import json
import os
import subprocess
import sys

import pytest

from clustercheck.explain.verdict import explain, render
from clustercheck.onnode import nccl_log_prefix, nccl_log_reader

DATA = os.path.join(os.path.dirname(__file__), "data", "nccl-logs")


def nccl_json(name):
    return explain([os.path.join(DATA, name)])


def network_of(paths):
    named = [p["network"] for p in paths.values() if p["network"]]
    return max(set(named), key=named.count) if named else None


@pytest.mark.parametrize("name, took", [
    ("ibext-sharp-nvls-noprefix-2.24.3-nccl-issue-1584.txt", "InfiniBand"),
    ("socket-1rank-plugin-v7-missing-2.19.3-nccl-issue-1267.txt", "Socket"),
])
def test_a_job_of_one_node_has_no_network_between_nodes_and_says_the_net_nccl_took(name, took):
    """NCCL's nNodes 1: nothing crossed a network, so no network between nodes is named (the held-out logs' labels
    say "none"); the net NCCL took, the one it would use between nodes, is said beside it, and a fallback to
    sockets is said as what a job across nodes would get, never as sockets between nodes."""
    result = nccl_json(name)
    [(node, path)] = result.nccl.items()
    assert path["network"] is None and path["one_node"], path
    assert path["between"] == f"none: one node (NCCL took {took}, its net between nodes)", path
    for finding in result.findings:
        assert "fell back to TCP sockets between nodes" not in finding.summary, finding


@pytest.mark.parametrize("name, network, gpudirect, fallback", [
    ("ib-gdr-cumem-2node-h20-nccl-issue-1189.txt", "InfiniBand", True, None),
    ("ibext-nogdr-8node-nccl-issue-1814.txt", "InfiniBand", False, None),
    ("ib-mlx4-azure-2node-2.5.6-nccl-tests-issue-36.txt", "InfiniBand", None, None),
    ("roce-macvlan-pod-2.13.4-multus-cni-issue-1100.txt", "RoCE", None, None),
    ("roce-mlx4-vethbootstrap-deit-issue-28.txt", "RoCE", None, None),
    ("build44-vllm-project-vllm-6201.txt", "RoCE", None, None),                  # merged ports: [0]={[0] mlx5_7:1/RoCE
    ("build44-nvidia-nccl-tests-373.txt", "RoCE", False, "NCCL_P2P_LEVEL"),
    ("efa-ofi-p5en-16nic-nccl-issue-1597.txt", "EFA", None, None),
    ("efa-ofi-g6e-4pod1proc-nogdr-training-on-eks.txt", "EFA", False, None),       # NET/OFI ... disabling GDR
    ("build44-aws-aws-ofi-nccl-161.txt", "EFA", False, None),                     # libfabric: FI_HMEM requires RDMA
    # no provider named, but EC2's own host names (ip-172-32-36-209): aws-ofi-nccl there is EFA (as its poster says)
    ("efa-mpirun-ringP2PIPC-warn-aws-ofi-nccl-issue-24.txt", "EFA", False, None),
    # one node (nNodes 1): no network between nodes, whatever net NCCL took (the next test)
    ("ibext-sharp-nvls-noprefix-2.24.3-nccl-issue-1584.txt", None, None, None),   # prefix stripped by its poster
    ("socket-2.3.7-oldformat-pytorch-issue-14870.txt", "Socket", None, "libibverbs"),     # 2.3: Using internal Network
    ("build44-horovod-horovod-313.txt", "Socket", None, "libibverbs"),             # 2.2: no "NCCL" in the prefix
    ("build44-ggml-org-llama.cpp-23523.txt", "Socket", None, "libibverbs"),        # 2.25 says it as INFO
    ("socket-ansiprefix-2.7.8-pytorch-issue-68893.txt", "Socket", None, "libibverbs"),
    ("socket-ibdisable1-ipv6-2.5.6-nccl-issue-529.txt", "Socket", None, "NCCL_IB_DISABLE set by environment to 1"),
    ("socket-1rank-plugin-v7-missing-2.19.3-nccl-issue-1267.txt", None, None, "ncclNetPlugin_v7"),
    ("socket-ibextplugin-ibdisable1-azureml-2.10.3-mlflow-issue-8444.txt", "Socket", None, "NCCL_IB_DISABLE"),
    ("socket-dockerbridge-pluginfail-2.21.5-nccl-issue-1504.txt", None, None, "eth0:172.17.2.7"),
    ("socket-pluginfail-dlerror-2.20.5-vllm-issue-10453.txt", None, None, None),   # no plugin: not a fallback
    # the check half's misses (issue 44), one per class: NCCL's socket net on lo; "NET/Socket : GPU Direct RDMA
    # Disabled" said on sockets; IB found no device / "Failed to initialize NET plugin IB" with no plugin loaded, so
    # Socket is the net left; a Linux bridge (br0) under the bootstrap; the IB transport named by its own WARN
    # ("NET/IB : Got completion from peer"); any NET/OFI line (aws-ofi-nccl, no provider named)
    ("check44-kubeflow-pytorch-operator-202.txt", "Socket", None, "NET/Socket : Using [0]lo:127.0.0.1"),
    ("check44-nvidia-nccl-1053.txt", "Socket", False, "NCCL_IB_DISABLE set by environment to 1"),
    ("check44-nvidia-nccl-2057.txt", "Socket", None, "NET/IB : No device found"),
    ("check44-pytorch-pytorch-111424.txt", "Socket", None, "NET/IB : No device found"),
    ("check44-nvidia-nccl-392.txt", "RoCE", False, "Bootstrap : Using br0:10.137.141.16"),
    ("check44-nvidia-nccl-928.txt", "InfiniBand", None, None),
    ("check44-nvidia-nccl-tests-245.txt", "libfabric", False, None),
])
def test_the_network_gpudirect_and_the_fallback_line_are_read_from_the_log_alone(name, network, gpudirect, fallback):
    result = nccl_json(name)
    paths = result.nccl
    assert network_of(paths) == network
    said = {p["gpudirect"] for p in paths.values()} - {None}
    assert said == ({gpudirect} if gpudirect is not None else set()), said
    lines = [p["fallback"] for p in paths.values() if p["fallback"]]
    if fallback:
        assert any(fallback in line for line in lines), lines
        assert result.exit_code >= 1            # a fallback is at least a WARN
    else:
        assert not lines


def test_a_failed_transfer_names_the_network_and_stays_a_failure():
    """Three hosts' only NCCL lines are the IB transport's completion errors: the WARN names the net in use
    (InfiniBand, its peers on ib0) and the job failed (exit 2), whatever else the log lacks."""
    result = nccl_json("check44-nvidia-nccl-928.txt")
    assert set(result.nccl) == {"H100-1", "H100-2", "H100-5"}
    assert {p["network"] for p in result.nccl.values()} == {"InfiniBand"}
    assert result.exit_code == 2


def test_an_info_line_is_never_a_failure():
    """The plugin NCCL did not find quotes a dlerror ("cannot open shared object file"): it was read as "a module does
    not import" and failed a healthy node. A log of INFO lines alone is never exit 2."""
    for name in sorted(os.listdir(DATA)):
        if not name.endswith(".txt"):
            continue
        text = open(os.path.join(DATA, name), errors="replace").read()
        if "WARN" in text or "retrying" in text:
            continue
        result = nccl_json(name)
        failed = [(f.check, f.summary) for f in result.findings if f.status.name == "FAIL"]
        assert result.exit_code != 2 and not failed, (name, failed)
        # ...and READY only where the log shows the job's end (issue 48; nccl-tests' "Avg bus bandwidth"), else a
        # hang or a log cut there
        checks = {f.check for f in result.findings}
        ended = "explain.ended" in checks or "Avg bus bandwidth" in text
        assert (result.exit_code < 2) if ended else (result.exit_code == 3 and checks & {"explain.hang",
                                                                                          "explain.no-end"}), name
    dlerror = nccl_json("socket-pluginfail-dlerror-2.20.5-vllm-issue-10453.txt")
    assert not any(f.check == "explain.import" for f in dlerror.findings)


def test_every_line_is_given_a_node_and_none_is_called_a_question_mark():
    for name in sorted(os.listdir(DATA)):
        if name.endswith(".txt"):
            nodes = set(nccl_json(name).nccl)
            assert "?" not in nodes and "" not in nodes, name
    assert set(nccl_json("ib-warn-collmismatch-pdshprefix-2.14.3-nccl-issue-969.txt").nccl) == {"so-ucloud-10-10-23-10"}
    assert set(nccl_json("ibext-sharp-nvls-noprefix-2.24.3-nccl-issue-1584.txt").nccl) == {"log"}   # the file's


@pytest.mark.parametrize("head, node", [
    ("gpu-node-2:1234:1240 [3] ", "gpu-node-2"),                           # NCCL's own
    ("[1,26]<stdout>:ip-172-32-36-209:57:57 [2] ", "ip-172-32-36-209"),      # Open MPI tag before NCCL's prefix
    ("[1,3]<stderr>:", "rank 3"),                                            # Open MPI tag, NCCL's prefix stripped
    ("12: ", "rank 12"),                                                     # srun --label
    ("[5] ", "rank 5"),                                                      # a bare [N]
    ("(RayTrainWorker pid=4711, ip=10.0.0.7) ", "10.0.0.7"),                 # Ray
    ("gpu-node-7: ", "gpu-node-7"),                                          # pdsh
    ("", "log"),                                                             # nothing: the file's node
])
def test_the_node_of_a_line_comes_from_every_prefix_ncc_and_launchers_write(head, node):
    assert nccl_log_prefix.where(head, "log")[0][0] == node


def test_explain_shows_the_path_per_node_on_its_first_screen_and_all_of_it_in_json():
    result = nccl_json("ib-gdr-cumem-2node-h20-nccl-issue-1189.txt")
    screen = render(result, as_json=False, verbose=False)
    assert "NCCL's path" in screen and "H20-GPU-06: network InfiniBand; between nodes NET/IB/GDRDMA" in screen
    assert "GPUDirect RDMA yes" in screen
    proc = subprocess.run([sys.executable, "-m", "clustercheck", "explain", "--json",
                           os.path.join(DATA, "socket-ibdisable1-ipv6-2.5.6-nccl-issue-529.txt")],
                          capture_output=True, text=True, timeout=120)
    doc = json.loads(proc.stdout)
    [(node, path)] = doc["nccl_paths"].items()
    assert path["network"] == "Socket" and path["fallback"].startswith("NCCL_IB_DISABLE")
    # the fallback is a WARN; the log shows no end of the job: UNKNOWN, never READY (issue 48)
    statuses = {f["check"]: f["status"] for f in doc["findings"]}
    assert "WARN" in statuses.values() and "UNKNOWN" in {statuses.get("explain.hang"), statuses.get("explain.no-end")}
    assert proc.returncode == 3
    assert {"network", "gpudirect", "fallback", "plugin", "between", "inside"} <= set(path)


def test_lines_joined_on_one_are_each_read():
    """A pasted log whose lines were joined with space padding (DeepEP#106): every connection on the line counts."""
    ranks, job = {}, {}
    line = open(os.path.join(DATA, "ibext-gdr-wrappedlines-2node-DeepEP-issue-106.txt"), errors="replace").read()
    joined = max(line.splitlines(), key=lambda l: l.count("NCCL INFO"))
    assert joined.count("NCCL INFO") > 1
    nccl_log_reader.read_nccl_line(joined, ranks, job)
    assert sum(sum(r["inter"].values()) for r in ranks.values()) == joined.count("via NET/")


DIAG = os.path.join(os.path.dirname(__file__), "data", "nccl-diag")


def diag_findings(name):
    return [f for f in explain([os.path.join(DIAG, name)]).findings if f.check == "nccl.diag"]


def test_ncc_diagnostics_that_passed_are_said_and_a_flagged_check_warns_naming_the_odd_ranks():
    """NCCL 2.31's DIAG reports as its documentation prints them (tests/data/nccl-diag/SOURCES.md): [OK] checks are
    named as passed; an [INFO] (informational in NCCL: init goes on) is a WARN with the check, its lines and the
    ranks of each value group, blaming no node (the report does not say where a rank runs)."""
    [ok] = diag_findings("nccl-docs-ras-diagnostics-ok-2.31.txt")
    assert ok.status.name == "OK" and "CUDA driver version" in ok.summary and "NVLink" in ok.summary
    [env] = diag_findings("nccl-docs-ras-diagnostics-env-mismatch-2.31.txt")
    assert env.status.name == "WARN" and "NCCL environment" in env.summary and not env.nodes
    assert "NCCL_DEBUG=WARN on rank(s) 4, 5, 6, 7" in env.summary and "NCCL_DEBUG=INFO on rank(s) 0" in env.summary
    [p2p] = diag_findings("nccl-docs-active-diagnostics-p2p-partial-2.31.txt")
    assert p2p.status.name == "WARN" and "only 52/56" in p2p.evidence[0] and "NVLink or PCIe" in p2p.remedy
    assert [f.status.name for f in diag_findings("nccl-docs-active-diagnostics-ok-2.31.txt")] == ["OK"]
    assert explain([os.path.join(DIAG, "nccl-docs-ras-diagnostics-env-mismatch-2.31.txt")]).exit_code == 1


def test_bench_and_smoke_turn_ncc_diagnostics_on_where_every_node_s_nccl_has_them_and_read_the_report():
    from clustercheck.nccl.diag_judge import judge_nccl_diag
    from clustercheck.ranks.nccl_capture import NcclLogCapture, has_diagnostics, nccl_version, plan_capture, read_diag
    from clustercheck.ranks.runs import NodeRun
    assert has_diagnostics(["2.31.0", "2.31.2"]) and not has_diagnostics(["2.31.0", "2.30.7"])
    assert not has_diagnostics(["2.31.0", None])             # a node whose NCCL is unknown: not turned on
    assert nccl_version({"packages": {"versions": {"nccl_wheel": "nvidia-nccl-cu12 2.31.2"}}}) == "2.31.2"
    assert plan_capture({}, diagnostics=True).env["NCCL_RUN_RAS_DIAGNOSTICS"] == "1"
    assert "NCCL_RUN_DIAGNOSTICS" not in plan_capture({}, diagnostics=False).env
    assert "NCCL_RUN_DIAGNOSTICS" not in plan_capture({"NCCL_RUN_DIAGNOSTICS": "0"}, diagnostics=True).env
    report = open(os.path.join(DIAG, "nccl-docs-ras-diagnostics-env-mismatch-2.31.txt")).read().splitlines()
    capture = NcclLogCapture()
    read_diag(capture, {"node042": NodeRun("node042", diag=report), "node043": NodeRun("node043")})
    assert list(capture.summaries) == ["node042"]
    [warn] = judge_nccl_diag(capture.summaries["node042"]["ranks"])
    assert warn.status.name == "WARN" and "NCCL environment" in warn.summary
