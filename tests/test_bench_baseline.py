"""Years of nccl-tests logs as a baseline, and "% of expected" from published figures.

The logs under tests/data/nccl-tests/ are real runs (sources in tests/data/README.md): the old
format (an error column, no root), Open MPI's --tag-output prefix, NCCL's own lines between
the rows, a run that names its collective only in the file name."""

import json
import os

import pytest

from clustercheck.core.errors import InputError
from clustercheck.core.inventory import Node
from clustercheck.core.result import Status
from clustercheck.core.thresholds import parse_config
from clustercheck.node.facts import Probed
from clustercheck.preflight.diff import diff_reports, load_report
from clustercheck.ranks.runs import RanksRun, NodeRun
from clustercheck.stages.bench.baseline import read_baseline
from clustercheck.stages.bench.expected import gbits, published
from clustercheck.stages.bench.facts import BenchFacts
from clustercheck.stages.bench.render import percent_line
from clustercheck.stages.bench.rules import Expectations, judge_bench
from clustercheck.outputs.nccl_tests import parse_avg_busbw, parse_table

DATA = os.path.join(os.path.dirname(__file__), "data", "nccl-tests")


def data(name):
    return os.path.join(DATA, name)


@pytest.mark.parametrize("name, rows, peak", [
    ("all_reduce_perf_old_format.txt", 31, 123.57),
    ("all_reduce_perf_mpirun_tagged.txt", 32, 483.35),
    ("all_reduce_perf_multinode.txt", 32, 469.21),
    ("all_reduce_perf_mpirun_tagged_efa_2node_old_format.txt", 30, 43.81),
    ("all_reduce_perf_collective_concluded_tagged.txt", 8, 2.31),
    ("all_reduce_perf_collective_concluded_2node.txt", 1, 191.76),
])
def test_every_recorded_format_reads_back_to_its_own_average(name, rows, peak):
    with open(data(name)) as handle:
        text = handle.read()
    parsed = parse_table(text)
    assert len(parsed) == rows
    cells = [row[p]["busbw"] for row in parsed for p in ("out_of_place", "in_place") if row.get(p)]
    # nccl-tests prints the mean of every busbw cell: reading every row right gives the same number
    assert sum(cells) / len(cells) == pytest.approx(parse_avg_busbw(text), abs=0.01)
    baseline = read_baseline(data(name))
    assert baseline.kind == "nccl-tests" and list(baseline.busbw) == ["all_reduce"]
    assert max(baseline.busbw["all_reduce"].values()) == peak


def test_the_old_format_has_an_error_not_a_wrong_count():
    with open(data("all_reduce_perf_old_format.txt")) as handle:
        first = parse_table(handle.read())[0]
    assert "root" not in first and first["out_of_place"]["wrong"] is None
    assert first["out_of_place"]["error"] == 2e-07


def test_a_file_that_is_neither_json_nor_a_table_is_bad_input_naming_it(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\nhello\n")
    with pytest.raises(InputError) as caught:
        read_baseline(str(path))
    assert str(path) in str(caught.value) and "no table rows" in str(caught.value)
    nameless = tmp_path / "run1.log"
    with open(data("all_gather_perf_2x2080ti.txt")) as handle:    # its columns fit all_gather and alltoall
        nameless.write_text(handle.read())
    with pytest.raises(InputError, match="which collective"):
        read_baseline(str(nameless))


def sweep_facts(rows, nodes=("n1", "n2")):
    runs = {n: NodeRun(n, exit_code=0) for n in nodes}
    runs[nodes[0]].events = [{"event": "start", "world": len(nodes), "ranks": []},
                             *({"event": "row", "collective": "all_reduce", "count": size // 4, "type": "float",
                                "redop": "sum", "root": -1, "nranks": 16, "size": size,
                                "in_place": {"time_us": size / busbw / 1e3 * (2 * 15 / 16), "wrong": 0}}
                               for size, busbw in rows), {"event": "done"}]
    facts = BenchFacts([Node(n) for n in nodes], [])
    facts.stages.append(RanksRun("torchrun", runs, 1.0, {}))
    return facts


def test_bench_against_an_nccl_tests_log_compares_at_the_largest_common_size():
    baseline = read_baseline(data("all_reduce_perf_multinode.txt"))     # 469.21 GB/s at 16 GB, 2x H100 nodes
    slow = sweep_facts([(2 ** 30, 300.0), (4 * 2 ** 30, 330.0)])
    found = {f.check: f for f in judge_bench(slow, Expectations(baseline=baseline), 60)}
    verdict = found["bench.baseline.all_reduce"]
    assert verdict.status is Status.WARN          # 330 of 465 GB/s at 4 GB: 71%, below 90%, above 70%
    assert "4294967296 B" in verdict.summary
    old = baseline.busbw["all_reduce"][4 * 2 ** 30]
    assert f"{330 / old:.0%} of the baseline's {old:.3f}" in verdict.summary


def test_no_size_in_common_is_unknown_not_ok():
    baseline = read_baseline(data("all_reduce_perf_collective_concluded_2node.txt"))   # one row: 10 GiB
    found = {f.check: f for f in judge_bench(sweep_facts([(2 ** 20, 1.0)]), Expectations(baseline=baseline), 60)}
    assert found["bench.baseline.all_reduce"].status is Status.UNKNOWN
    assert "no message size in common" in found["bench.baseline.all_reduce"].summary


def test_diff_takes_an_nccl_tests_log_as_the_old_side(tmp_path):
    new = {"command": "preflight", "nodes": ["a", "b"], "findings": [],
           "bench": {"stages": [{"rows": [{"collective": "all_reduce", "size": 16 * 2 ** 30,
                                           "in_place": {"busbw": 380.0}}]}]}}
    changes = diff_reports(load_report(data("all_reduce_perf_multinode.txt")), new)
    assert changes.bandwidth == [("all_reduce at 17179869184 B", 469.21, 380.0, pytest.approx(380 / 469.21))]
    assert changes.worse and not changes.nodes_added


def probed(name, gpus, ports=()):
    return Probed(Node(name), facts={"gpu": {"gpus": [{"name": g} for g in gpus]}, "infiniband": list(ports)})


def test_the_published_figure_follows_the_gpus_and_the_fabric():
    h100 = ["NVIDIA H100 80GB HBM3"] * 8
    single = published([probed("a", h100)], "nccl", ring=False)
    assert single.gbps == 480.0 and "nccl-tests/issues/212" in single.source
    assert published([probed("a", h100)], "nccl", ring=True).gbps == 370.0
    ndr = [{"state": "ACTIVE", "rate": "400 Gb/sec (4X NDR)"}] * 8
    two = published([probed("a", h100, ndr), probed("b", h100, ndr[:4])], "nccl", ring=False)
    assert two.gbps == pytest.approx(4 * 400 / 8 * 0.96)        # the node with 4 active ports sets the pace
    assert published([probed("a", h100), probed("b", h100)], "nccl", ring=False) is None   # no RDMA: no figure
    assert published([probed("a", [])], "gloo", ring=False) is None
    assert gbits("200 Gb/sec (4X HDR)") == 200.0


def test_expected_fraction_and_figure_come_from_the_config_file():
    config = parse_config("[bench]\nexpected_busbw = 380\nexpected_fraction = 0.85\n", "cc.toml")
    assert config.bench.expected_busbw == 380.0 and config.bench.expected_fraction == 0.85
    with pytest.raises(InputError) as caught:
        parse_config("[bench]\nexpected_fraction = 1.5\n", "cc.toml")
    assert str(caught.value) == "cc.toml:2: expected_fraction must be above 0 and at most 1: '1.5'"


def test_a_run_below_ninety_percent_of_expected_is_a_finding_with_the_percentage():
    from clustercheck.stages.bench.expected import Expected
    facts = sweep_facts([(2 ** 30, 400.0)])
    facts.expected = Expected(480.0, "8x H100 SXM ...")
    [finding] = [f for f in judge_bench(facts, Expectations(), 60) if f.check == "bench.expected.all_reduce"]
    assert finding.status is Status.WARN and "83% of expected 480 GB/s" in finding.summary
    facts.expected = Expected(420.0, "[bench] expected_busbw")
    [finding] = [f for f in judge_bench(facts, Expectations(), 60) if f.check == "bench.expected.all_reduce"]
    assert finding.status is Status.OK and "95% of expected" in finding.summary
    assert json.dumps(finding.to_dict())


def test_gb200_b200_and_their_nics_have_published_figures():
    """Issue 42: the GPUs users buy now. A GB200 compute tray (4 GPUs) is held to Azure's measured Ring figure; an
    8x B200 node to ml-engineering's nccl-tests figures, NVLS and ring apart; a B200 count no one measured to none."""
    tray = published([probed("a", ["NVIDIA GB200"] * 4)], "nccl", ring=False)
    assert tray.gbps == 679.6 and "ND_GB200_v6_results.md" in tray.source
    assert published([probed("a", ["NVIDIA GB200"] * 4)], "nccl", ring=True).gbps == 679.6
    hgx = published([probed("a", ["NVIDIA B200"] * 8)], "nccl", ring=False)
    assert hgx.gbps == 838.0 and "stas00/ml-engineering" in hgx.source
    assert published([probed("a", ["NVIDIA B200"] * 8)], "nccl", ring=True).gbps == 682.2
    assert published([probed("a", ["NVIDIA B200"] * 4)], "nccl", ring=False) is None    # not the tray's row
    cx7 = [{"state": "ACTIVE", "rate": "400 Gb/sec (4X NDR)"}] * 4            # a GB200 tray's four ConnectX-7
    assert published([probed(n, ["NVIDIA GB200"] * 4, cx7) for n in "ab"], "nccl", ring=False).gbps == \
        pytest.approx(4 * 48.0)
    cx8 = [{"state": "ACTIVE", "rate": "800 Gb/sec (4X XDR)"}] * 8            # ConnectX-8: ~760 measured with Ring
    assert published([probed(n, ["NVIDIA B300"] * 8, cx8) for n in "ab"], "nccl", ring=False).gbps == \
        pytest.approx(768.0)


def test_a_healthy_b200_node_swept_to_the_default_1g_is_not_held_to_its_8g_nvls_figure():
    """On 8x B200, NVLS lifts busbw only from 8 GiB (740.64 at 4 GiB, 838.0 at 8 GiB): the default 1 GiB sweep of a
    healthy node (~723 GB/s) must not WARN against 838, while a sweep that ran 8 GiB and stayed at 723 must."""
    hgx = published([probed("a", ["NVIDIA B200"] * 8)], "nccl", ring=False)
    facts = sweep_facts([(2 ** 29, 689.0), (2 ** 30, 723.3)], nodes=("b200",))
    facts.expected = hgx
    [finding] = [f for f in judge_bench(facts, Expectations(), 60) if f.check == "bench.expected.all_reduce"]
    assert finding.status is Status.OK and "98% of expected 740.6 GB/s" in finding.summary
    assert "under 8 GiB" in finding.evidence[0]
    line = percent_line(facts, "all_reduce", facts.figures.by_collective["all_reduce"])
    assert "= 98% of expected 740.6 GB/s" in line                   # the table under it says the same
    facts = sweep_facts([(2 ** 30, 723.3), (8 * 2 ** 30, 723.3)], nodes=("b200",))
    facts.expected = hgx
    [finding] = [f for f in judge_bench(facts, Expectations(), 60) if f.check == "bench.expected.all_reduce"]
    assert finding.status is Status.WARN and "86% of expected 838 GB/s" in finding.summary
    ring = published([probed("a", ["NVIDIA B200"] * 8)], "nccl", ring=True)
    assert ring.at_largest(2 ** 30) == (682.2, ring.source)             # Ring has no such step: one figure

def test_a_recorded_b200_all_gather_reads_and_is_never_held_to_the_all_reduce_figure():
    """Two Google Cloud A4 nodes (8x B200, eight 400G RDMA NICs each) ran all_gather_perf: the log reads as an
    all_gather baseline, and the published figure for such nodes (an all_reduce figure: 8 x 48 GB/s) is not
    compared with it, whose 268.59 GB/s would read as 70% of 384 and FAIL a healthy pair."""
    baseline = read_baseline(data("all_gather_perf_2x8xb200_gke_a4.txt"))
    assert list(baseline.busbw) == ["all_gather"] and len(baseline.busbw["all_gather"]) == 24
    assert baseline.busbw["all_gather"][2 * 2 ** 30] == 268.59
    nics = [{"state": "ACTIVE", "rate": "400 Gb/sec (4X NDR)"}] * 8
    pair = published([probed(n, ["NVIDIA B200"] * 8, nics) for n in ("a4-0", "a4-1")], "nccl", ring=False)
    assert pair.gbps == pytest.approx(384.0)
    facts = sweep_facts([(2 * 2 ** 30, 268.59)])
    facts.stages[0].runs["n1"].events[1]["collective"] = "all_gather"
    facts.expected = pair
    found = {f.check: f for f in judge_bench(facts, Expectations(), 60)}
    assert "bench.bandwidth.all_gather" in found          # the row was read and judged as what it is
    assert not any(check.startswith("bench.expected") for check in found)
