"""`clustercheck bench` against the sandbox: real torchrun, real Gloo collectives between
network namespaces, a link slowed with tc tbf, a node killed mid-sweep."""

import json
import subprocess
import sys
import time

import pytest

from clustercheck.errors import EXIT_FAIL, EXIT_OK
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


def test_pairwise_names_the_node_whose_link_is_slowed(box, tmp_path):
    slow = box.nodes[2].name
    faults.slow_link(box, slow, 100)
    code, doc = run_bench(box, box.nodes_file, "-c", "all_reduce", "-b", "256K", "-e", "256K", "-n", "2", "-w", "1",
                          "--pairwise", "--pair-bytes", "1M")
    assert code == EXIT_FAIL
    found = {f["check"]: f for f in doc["findings"] if f["status"] != "OK"}
    assert set(found) == {"bench.pairwise.node"}, found
    assert found["bench.pairwise.node"]["nodes"] == [slow]
    pairs = doc["stages"][1]["pairs"]
    assert len([p for p in pairs if p["phase"] == "matrix"]) == 6


def test_a_node_killed_mid_sweep_is_named_and_nothing_is_left_running(box, tmp_path):
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
    [finding] = [f for f in doc["findings"] if f["check"] == "bench.sweep"]
    assert finding["nodes"] == [victim.name]
    assert f"{victim.name} went down mid-run" in finding["summary"]
    assert elapsed < 60, elapsed      # the peers notice at once, not at the 120 s deadline
    assert gone("clustercheck_bench_worker") and gone("torch.distributed.run")
