"""`clustercheck bench` against the sandbox: real torchrun, real Gloo collectives between
network namespaces, a link slowed with tc tbf, a node killed mid-sweep."""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from clustercheck.core.errors import EXIT_FAIL, EXIT_OK
from clustercheck.sandbox import faults
from tests.conftest import gone, leftover

pytestmark = pytest.mark.sandbox


def bench_argv(box, nodes_file, *args):
    return [sys.executable, "-m", "clustercheck", "bench", nodes_file, "-F", box.ssh_config,
            "--python", sys.executable, "--json", *args]


def nodes_file(box, tmp_path, count):
    path = tmp_path / "nodes.txt"
    path.write_text("\n".join(node.name for node in box.nodes[:count]) + "\n")
    return str(path)


def run_bench(box, path, *args, timeout=240):
    proc = subprocess.run(bench_argv(box, path, *args), capture_output=True, text=True, timeout=timeout)
    assert proc.stdout.strip(), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_a_three_node_sweep_of_every_collective_is_correct_and_sane(box, tmp_path):
    code, doc = run_bench(box, nodes_file(box, tmp_path, 3), "-c", "all", "-b", "1K", "-e", "256K", "-f", "16",
                          "-n", "2", "-w", "1")
    assert code == EXIT_OK, [f for f in doc["findings"] if f["status"] != "OK"]
    [sweep] = doc["stages"]
    assert sweep["start"]["world"] == 3 and sweep["start"]["backend"] == "gloo"
    assert {r["collective"] for r in sweep["rows"]} == {"all_reduce", "all_gather", "reduce_scatter", "alltoall",
                                                        "broadcast", "reduce", "sendrecv"}
    assert len(sweep["rows"]) == 7 * 3
    for row in sweep["rows"]:
        for placement in ("out_of_place", "in_place"):
            if row.get(placement):
                assert row[placement]["wrong"] == 0
                assert 0 < row[placement]["busbw"] < 100   # GB/s: CPU copies over veth, not magic
    assert set(doc["avg_busbw"]) == {r["collective"] for r in sweep["rows"]}
    assert gone("clustercheck_bench_worker")


def test_a_node_at_50_mbit_is_named_before_the_sweep_and_the_sweep_stops_at_its_budget(box, tmp_path):
    """Issue 15: 4 nodes, one at 50 Mbit/s, the others unlimited; stderr is a pipe, not a TTY."""
    slow = box.nodes[2].name
    faults.slow_link(box, slow, 50)
    # a 2 s size budget (the default is 5 s) makes the sweep stop below 64M here whatever the host's speed
    proc = subprocess.run(bench_argv(box, box.nodes_file, "--pairwise", "--size-budget", "2"), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == EXIT_FAIL, proc.stderr
    doc = json.loads(proc.stdout)
    found = {f["check"]: f for f in doc["findings"] if f["status"] != "OK"}
    assert set(found) == {"bench.pairwise.node", "bench.budget"}, found
    assert found["bench.pairwise.node"]["nodes"] == [slow]
    assert "were not measured" in found["bench.budget"]["summary"]
    [stage] = doc["stages"]
    assert len([p for p in stage["pairs"] if p["phase"] == "matrix"]) == 6     # auto: every pair at 4 nodes
    assert stage["budget"] and max(r["size"] for r in stage["rows"]) < 64 * 2 ** 20
    # progress: a line per round and per size, the slow node named before the first size
    lines = [line for line in proc.stderr.splitlines() if line.startswith("[bench] ")]
    rounds = [i for i, line in enumerate(lines) if " round " in line]
    sizes = [i for i, line in enumerate(lines) if line.startswith("[bench] all_reduce ")]
    named = [i for i, line in enumerate(lines) if "pair rounds done" in line or "slowest" in line and slow in line]
    assert len(rounds) >= 3 and len(sizes) == len(stage["rows"]) and named and named[0] < sizes[0], proc.stderr
    assert "\r" not in proc.stderr
    assert gone("clustercheck_bench_worker")


def test_the_adaptive_search_names_the_slowed_node_in_three_rounds(box, tmp_path, loaded_host):
    slow = box.nodes[1].name
    faults.slow_link(box, slow, 100)
    code, doc = run_bench(box, box.nodes_file, "-c", "all_reduce", "-b", "64K", "-e", "64K", "--pairwise", "adaptive",
                          "--pair-bytes", "1M")
    found = {f["check"]: f for f in doc["findings"] if f["status"] != "OK"}
    assert code == EXIT_FAIL, (found, doc["stages"][0].get("pairs"))
    assert set(found) == {"bench.pairwise.node"}, found
    assert found["bench.pairwise.node"]["nodes"] == [slow]
    # a busy core beside it (as the suite loads the host) may have a healthy node's exchanges measured again, never
    # the slowed node's: two slow confirmations settle it
    assert [p["phase"] for p in doc["stages"][0]["pairs"] if slow in (p["a"], p["b"])] == \
        ["screen", "confirm", "confirm"]


def test_a_node_killed_mid_sweep_is_named_and_nothing_is_left_running(box, tmp_path, loaded_host):
    victim = box.nodes[2]
    argv = bench_argv(box, nodes_file(box, tmp_path, 3), "-c", "all_reduce", "-b", "32M", "-e", "32M", "-n", "200",
                      "--timeout", "120", "--op-timeout", "30")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        while leftover("clustercheck_bench_worker") < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(3)  # into the sweep
        faults.crash(box, victim.name)
        start = time.monotonic()
        out, err = proc.communicate(timeout=120)
        elapsed = time.monotonic() - start
    finally:
        proc.kill()
    assert proc.returncode == EXIT_FAIL, err
    doc = json.loads(out)
    [finding] = [f for f in doc["findings"] if f["check"] == "bench.torchrun"]
    assert finding["nodes"] == [victim.name]
    assert f"{victim.name} went down mid-run" in finding["summary"]
    assert elapsed < 60, elapsed      # the peers notice at once, not at the 120 s deadline
    assert gone("clustercheck_bench_worker") and gone("torch.distributed.run")


def test_nccl_s_log_is_captured_per_rank_read_on_the_nodes_and_removed_never_on_the_console(box, tmp_path):
    """Issue 38, the plumbing where it can run: Gloo here, so each rank writes a recorded NCCL INFO log where
    the environment file's NCCL_DEBUG_FILE tells it (as NCCL does on GPUs); each node reads its own files,
    sends back the summary, and removes them; the console shows none of it; the report has the path table."""
    recorded = os.path.join(box.dir, "recorded-nccl.log")     # where every node sees it (their /tmp is their own)
    shutil.copy(os.path.join(os.path.dirname(__file__), "data", "nccl-logs",
                             "socket-ansiprefix-2.7.8-pytorch-issue-68893.txt"), recorded)
    path = nodes_file(box, tmp_path, 2)
    for node in box.nodes[:2]:
        faults.set_env(box, node.name, f"CLUSTERCHECK_TEST_NCCL_LOG={recorded}")
    env = dict(os.environ, CLUSTERCHECK_TEST_CAPTURE_NCCL="1")
    proc = subprocess.run(bench_argv(box, path, "-b", "1K", "-e", "4K", "-n", "1", "-w", "0", "--pairwise", "off",
                                     "--nproc-per-node", "2"),
                          capture_output=True, text=True, timeout=240, env=env)
    doc = json.loads(proc.stdout)
    paths = doc["nccl_paths"]
    assert sorted(paths) == sorted(n.name for n in box.nodes[:2]), paths
    # two rank processes per node, two files read there (the recording's own host and pid inside each)
    assert all(p["files"] == 2 and p["between"].startswith("NET/Socket") for p in paths.values()), paths
    assert "NCCL INFO" not in proc.stderr and "NCCL INFO" not in proc.stdout.split('"nccl_paths"')[0]
    for node in box.nodes[:2]:
        left = faults.node_exec(box, node.name, ["sh", "-c", "ls /tmp/*/nccl.*.log 2>/dev/null | wc -l"]).stdout
        assert left.strip() == "0"
