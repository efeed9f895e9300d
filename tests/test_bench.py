"""bench without the sandbox: the nccl-tests table against real nccl-tests output, the
bus-bandwidth factors against their formulas, and the judges on small stage results."""

import json
import os
import subprocess
import sys
import time

import pytest

from clustercheck.core.inventory import Node
from clustercheck.core.result import Status
from clustercheck.ranks.runs import RanksRun, NodeRun
from clustercheck.stages.bench.expected import Expected
from clustercheck.stages.bench.facts import BenchFacts
from clustercheck.stages.bench.rules import Expectations, judge_bench, pairwise_verdict, stage_outcome
from clustercheck.outputs.nccl_tests import (
    COLLECTIVES,
    HEADER,
    avg_busbw,
    bandwidths,
    format_row,
    parse_avg_busbw,
    parse_table,
    time_cell,
)
from tests.conftest import ROOT, clustercheck

RECORDED = os.path.join(os.path.dirname(__file__), "data", "nccl-tests", "all_reduce_perf_gb200_nvl72.txt")


def recorded():
    with open(RECORDED) as handle:
        return handle.read()


def test_bandwidths_reproduce_real_nccl_tests_figures():
    rows = parse_table(recorded())
    assert len(rows) == 5
    for row in rows:
        for placement in ("out_of_place", "in_place"):
            cell = row[placement]
            algbw, busbw = bandwidths("all_reduce", row["size"], cell["time_us"], 72)
            # the recorded time has 5 significant digits: allow that much
            assert algbw == pytest.approx(cell["algbw"], rel=2e-4, abs=0.006)
            assert busbw == pytest.approx(cell["busbw"], rel=2e-4, abs=0.006)


def test_avg_bus_bandwidth_is_the_mean_over_both_placements_of_every_row():
    assert avg_busbw(parse_table(recorded())) == pytest.approx(parse_avg_busbw(recorded()), abs=0.005)


def test_rows_and_header_print_exactly_as_nccl_tests():
    lines = recorded().splitlines()
    assert HEADER == lines[2:5]
    for line, row in zip(lines[5:10], parse_table(recorded())):
        assert format_row(row) == line


@pytest.mark.parametrize("n", [2, 3, 8, 72])
def test_bus_bandwidth_factors_follow_the_formulas(n):
    expected = {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n, "reduce_scatter": (n - 1) / n,
                "alltoall": (n - 1) / n, "broadcast": 1, "reduce": 1, "sendrecv": 1}
    assert {name: c.factor(n) for name, c in COLLECTIVES.items()} == pytest.approx(expected)


def test_time_cells_shrink_decimals_like_nccl_tests():
    assert time_cell(12.9) == "  12.90"
    assert time_cell(1806.7) == " 1806.7"
    assert time_cell(10094.4) == "  10094"


def stage(runs, events=(), name="bench", config=None):
    node_runs = {}
    for node, (code, lost, error) in runs.items():
        node_runs[node] = NodeRun(node, exit_code=code, lost=lost, error=error)
    first = next(iter(node_runs.values()))
    first.events = [{"event": "start", "world": len(runs), "ranks": [{"node": n, "local_rank": 0} for n in runs]},
                    *events]
    return RanksRun(name, node_runs, 3.0, config or {"iters": 5, "warmup": 2, "check": True, "size_budget": 2.0})


def test_a_node_lost_mid_run_is_the_culprit():
    result = stage({"n1": (1, False, "DistBackendError: Connection closed by peer"), "n2": (-1, True, ""),
                    "n3": (1, False, "DistBackendError: Connection reset by peer")})
    [finding] = stage_outcome(result, 60)
    assert finding.status is Status.FAIL and finding.nodes == ["n2"]
    assert "n2 went down mid-run" in finding.summary
    assert any(e.startswith("n2 (ranks 1): connection lost") for e in finding.evidence)


def test_a_hang_names_the_ranks_that_did_not_finish():
    result = stage({"n1": (1, False, "timed out"), "n2": (None, False, ""), "n3": (1, False, "timed out")},
                   events=[{"event": "row", "collective": "all_reduce", "size": 1024}])
    [finding] = stage_outcome(result, 60)
    assert finding.nodes == ["n2"] and "did not finish within 60 s" in finding.summary
    assert "last result: all_reduce at 1024 B" in finding.evidence


def pairs(speeds, confirm=()):
    events = [{"event": "pair", "phase": "matrix", "a": a, "b": b, "bytes": 10 ** 6, "time_us": 10 ** 3 / s}
              for (a, b), s in speeds.items()]
    events += [{"event": "pair", "phase": "confirm", "a": a, "b": b, "bytes": 10 ** 6, "time_us": 10 ** 3 / s}
               for (a, b), s in confirm]
    facts = BenchFacts([Node(n) for n in ("n1", "n2", "n3", "n4")], [])
    facts.stages.append(stage({n.name: (0, False, "") for n in facts.nodes}, events, config={"pairwise": "full"}))
    return facts


def test_pairwise_names_the_slow_node():
    speeds = {("n1", "n4"): 1.0, ("n2", "n3"): 0.25, ("n1", "n3"): 0.26, ("n2", "n4"): 1.1, ("n1", "n2"): 1.0,
              ("n3", "n4"): 0.24}
    [finding] = pairwise_verdict(pairs(speeds, confirm=[(("n3", "n1"), 0.25), (("n3", "n4"), 0.26)]))
    assert finding.check == "bench.pairwise.node" and finding.nodes == ["n3"]


def test_pairwise_names_a_slow_link_between_two_good_nodes():
    speeds = {("n1", "n4"): 1.0, ("n2", "n3"): 0.1, ("n1", "n3"): 1.0, ("n2", "n4"): 1.1, ("n1", "n2"): 1.0,
              ("n3", "n4"): 0.95}
    [finding] = pairwise_verdict(pairs(speeds))
    assert finding.check == "bench.pairwise.link" and finding.nodes == ["n2", "n3"]
    assert "n2 <-> n3" in finding.summary


def three_pairs(speeds, confirm):
    facts = pairs(speeds, confirm)
    facts.nodes = facts.nodes[:3]
    return facts


def test_a_suspect_as_fast_as_the_pair_measured_beside_it_is_said_unsteady_not_named():
    """Recorded on CI's loaded host (in-job check, 3 nodes): n1 <-> n2 fell from 1.063 to 0.512 GB/s between the
    round robin and its confirmation, so n3's confirmation (0.637) was slow only next to the earlier figure."""
    speeds = {("n1", "n2"): 1.063, ("n1", "n3"): 0.455, ("n2", "n3"): 0.325}
    [finding] = pairwise_verdict(three_pairs(speeds, confirm=[(("n2", "n1"), 0.512), (("n3", "n1"), 0.637)]))
    assert (finding.check, finding.status, finding.nodes) == ("bench.pairwise.unsteady", Status.WARN, [])
    assert finding.summary.startswith("could not tell whether n3 is slow: n3 was slow with its partners in the "
                                      "round robin (0.390 GB/s against 1.063 between the others)")
    assert "reached 0.637 GB/s against 0.512 for the pair measured beside it" in finding.summary
    assert "confirm n2 <-> n1: 0.512 GB/s" in finding.evidence


def test_a_slow_node_among_three_is_named_when_its_confirmation_is_slow_beside_a_fast_pair():
    speeds = {("n1", "n2"): 1.0, ("n1", "n3"): 0.3, ("n2", "n3"): 0.29}
    [finding] = pairwise_verdict(three_pairs(speeds, confirm=[(("n2", "n1"), 0.95), (("n3", "n1"), 0.31)]))
    assert (finding.check, finding.status, finding.nodes) == ("bench.pairwise.node", Status.FAIL, ["n3"])


def test_wrong_data_fails_and_expected_bandwidth_is_quoted():
    row = {"event": "row", "collective": "all_reduce", "size": 2 ** 20, "count": 2 ** 18, "type": "float",
           "redop": "sum", "root": -1, "nranks": 2, "in_place": {"time_us": 1000.0, "wrong": 3}}
    facts = BenchFacts([Node("n1"), Node("n2")], [])
    facts.stages.append(stage({"n1": (0, False, ""), "n2": (0, False, "")}, [row, {"event": "done"}]))
    facts.expected = Expected(2.0, "--expect-busbw")
    found = {f.check: f for f in judge_bench(facts, Expectations(), 60)}
    assert found["bench.data"].status is Status.FAIL
    assert "3 wrong elements" in found["bench.data"].evidence[0]
    # 1 MiB in 1 ms over 2 ranks: algbw 1.049 GB/s, busbw the same (2(n-1)/n = 1): 52% of 2 GB/s
    assert found["bench.expected.all_reduce"].status is Status.FAIL
    assert "52% of expected 2 GB/s" in found["bench.expected.all_reduce"].summary


@pytest.mark.parametrize("args, needle", [
    (["-b", "12Q"], "--min-bytes takes a size like 8, 64K, 16M or 1G: '12Q'"),
    (["-c", "all_reduce,allreduce"], "unknown collective"),
    (["-b", "1M", "-e", "1K"], "--min-bytes is above --max-bytes"),
])
def test_bad_options_are_bad_input(args, needle):
    proc = clustercheck("bench", *args)
    assert proc.returncode == 64
    assert needle in proc.stderr


def test_two_benches_on_one_machine_at_once_both_measure(tmp_path):
    """Two checks of this machine at once (two users on one login node, or CI's two workers) each rendezvous on a
    port of their own: both print their table and end READY; before, both took torchrun's 29400 and the second's
    ranks failed to start ("the torchrun launch on localhost")."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    argv = [sys.executable, "-m", "clustercheck", "bench", "-b", "1M", "-e", "1M", "--pairwise", "off", "--json"]
    procs = []
    for _ in range(2):   # the second a few seconds later: the first ends while the second still measures
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                      cwd=tmp_path))
        time.sleep(3)
    try:
        outputs = [p.communicate(timeout=240) for p in procs]
    finally:
        for p in procs:
            p.kill()
    for proc, (out, err) in zip(procs, outputs):
        assert proc.returncode == 0, err[-3000:]
        assert json.loads(out)["verdict"] == "OK", out[-3000:]
