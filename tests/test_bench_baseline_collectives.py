"""nccl-tests logs of every collective as a baseline, the collective read from the table's own columns.

Every log here is a real run (tests/data/README.md names each source): old-format tables without a
redop column (all_gather), with a root and no redop (broadcast), with a redop header over empty cells
(alltoall), old reduce_scatter and a script's log of five binaries; current-format tables without the
"Collective test starting" line, where all_gather and alltoall read alike (and all_reduce and sendrecv
on 2 ranks), so --collective or the file's name must say which."""

import os
import re
import shutil

import pytest

from clustercheck.core.errors import EXIT_BAD_INPUT, InputError
from clustercheck.core.result import Status
from clustercheck.preflight.diff import diff_reports, load_report, render_changes
from clustercheck.outputs.nccl_tests import read_tables
from clustercheck.stages.bench.baseline import read_baseline
from clustercheck.stages.bench.options import BenchOptions
from clustercheck.stages.bench.rules import Expectations, judge_bench
from clustercheck.stages.bench.stage import expectations
from clustercheck.outputs.nccl_tests import parse_avg_busbw
from tests.conftest import clustercheck
from tests.test_bench_baseline import sweep_facts

DATA = os.path.join(os.path.dirname(__file__), "data", "nccl-tests")


def nameless(tmp_path, name):
    """The log under a name that says nothing, as users keep them (run1.log): only its content can tell."""
    path = tmp_path / "run1.log"
    shutil.copyfile(os.path.join(DATA, name), path)
    return str(path)


def averages(text):
    """Each table's own "Avg bus bandwidth" line, in order."""
    return [float(v) for v in re.findall(r"Avg bus bandwidth\s*:\s*([\d.]+)", text)]


# (file, collective, rows, what the table's columns show)
TOLD_BY_COLUMNS = [
    ("all_gather_perf_old_format_8xa100.txt", "all_gather", 34,
     "no redop column, no root column, size = count x 4 B x 8, busbw/algbw 0.87"),
    ("alltoall_perf_old_format_8xa100.txt", "alltoall", 34,
     "an empty redop column, no root column, size = count x 4 B x 8"),
    ("broadcast_perf_old_format_8xa100.txt", "broadcast", 34, "no redop column, root 0, size = count x 4 B"),
    ("reduce_scatter_perf_old_format_8xa100.txt", "reduce_scatter", 34,
     "redop sum, no root column, size = count x 4 B x 8"),
    ("broadcast_perf_2x2080ti.txt", "broadcast", 28, "redop none, root 0, size = count x 4 B"),
    ("reduce_perf_2x2080ti.txt", "reduce", 28, "redop sum, root 0, size = count x 4 B"),
    ("all_reduce_perf_multinode.txt", "all_reduce", 32, "redop sum, root -1, size = count x 4 B, busbw/algbw 1.88"),
]


@pytest.mark.parametrize("name, collective, rows, columns", TOLD_BY_COLUMNS)
def test_the_collective_is_read_from_the_tables_own_columns(tmp_path, name, collective, rows, columns):
    path = nameless(tmp_path, name)
    baseline = read_baseline(path)
    assert list(baseline.busbw) == [collective]
    assert baseline.told[collective].startswith(f"the table's columns: {columns}")
    assert f"({collective}, from the table's columns: {columns}" in baseline.describe()
    with open(path) as handle:
        text = handle.read()
    [table] = read_tables(text)
    assert len(table.rows) == rows
    cells = [row[p]["busbw"] for row in table.rows for p in ("out_of_place", "in_place") if row.get(p)]
    # nccl-tests prints the mean of every busbw cell: every row read, and read right, gives the same number
    assert sum(cells) / len(cells) == pytest.approx(parse_avg_busbw(text), abs=0.01)


def test_the_old_all_gather_log_with_34_rows_and_its_own_average_is_a_baseline():
    """The issue's case: refused before (no redop column: "no table rows"), though it prints 34 rows."""
    baseline = read_baseline(os.path.join(DATA, "all_gather_perf_old_format_8xa100.txt"))
    assert len(baseline.busbw["all_gather"]) == 30          # 34 rows, the five of 0 B one size
    assert baseline.busbw["all_gather"][8589934592] == 230.07   # in-place, the row's better cell
    first = read_tables(open(os.path.join(DATA, "all_gather_perf_old_format_8xa100.txt")).read())[0].rows[0]
    assert "redop" not in first and "root" not in first and first["out_of_place"]["time_us"] == 34.27


def test_a_log_of_five_tables_gives_five_collectives_each_told_by_its_columns():
    path = os.path.join(DATA, "five_collectives_old_format_dgx2.txt")
    baseline = read_baseline(path)
    assert list(baseline.busbw) == ["all_gather", "all_reduce", "broadcast", "reduce", "reduce_scatter"]
    assert all(how.startswith("the table's columns") for how in baseline.told.values())
    # before June 2020 all_gather's busbw equalled its algbw: still told apart from broadcast by its sizes
    assert "size = count x 4 B x 12, busbw/algbw 1.00" in baseline.told["all_gather"]
    with pytest.raises(InputError, match="one run per file"):
        read_baseline(path, "all_gather")
    with open(path) as handle:
        text = handle.read()
    tables = read_tables(text)
    assert [len(t.rows) for t in tables] == [31] * 5
    for table, average in zip(tables, averages(text)):
        cells = [row[p]["busbw"] for row in table.rows for p in ("out_of_place", "in_place") if row.get(p)]
        assert sum(cells) / len(cells) == pytest.approx(average, abs=0.01)


# Tables whose columns fit two collectives: (file, what they fit)
AMBIGUOUS = [
    ("all_gather_perf_2x2080ti.txt", "all_gather or alltoall"),
    ("alltoall_perf_2x2080ti.txt", "all_gather or alltoall"),
    ("all_reduce_perf_2x2080ti.txt", "all_reduce or sendrecv"),      # 2 ranks: busbw = algbw
    ("sendrecv_perf_8xa100.txt", "all_reduce or sendrecv"),
]


@pytest.mark.parametrize("name, fits", AMBIGUOUS)
def test_a_table_its_columns_cannot_tell_asks_for_collective(tmp_path, name, fits):
    path = nameless(tmp_path, name)
    with pytest.raises(InputError) as caught:
        read_baseline(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:") and "which collective" in message
    assert f"are those of {fits}" in message and "pass --collective NAME (bench: --baseline-collective)" in message


@pytest.mark.parametrize("name, fits", AMBIGUOUS)
def test_the_files_name_or_collective_tells_and_is_said(tmp_path, name, fits):
    named = name.split("_perf")[0]
    baseline = read_baseline(os.path.join(DATA, name))
    assert baseline.told == {named: "the file's name"}
    other = fits.replace(named, "").replace(" or ", "")
    given = read_baseline(nameless(tmp_path, name), other)
    assert given.told == {other: "the command line"} and given.busbw[other] == baseline.busbw[named]
    assert f"({other}, from the command line)" in given.describe()


def test_collective_overrides_the_files_name_but_not_the_columns(tmp_path):
    path = os.path.join(DATA, "all_gather_perf_2x2080ti.txt")
    assert read_baseline(path, "alltoall").told == {"alltoall": "the command line"}
    with pytest.raises(InputError) as caught:
        read_baseline(path, "broadcast")
    assert str(caught.value).startswith(f"{path}: the collective given on the command line does not fit")
    assert "all_gather or alltoall" in str(caught.value) and str(caught.value).endswith(": 'broadcast'")


def test_bench_takes_baseline_collective_and_its_finding_says_where_the_collective_came_from(tmp_path):
    path = nameless(tmp_path, "alltoall_perf_2x2080ti.txt")
    baseline = expectations(BenchOptions(baseline=path, baseline_collective="alltoall")).baseline
    assert baseline.busbw["alltoall"][1073741824] == 4.73
    with pytest.raises(InputError, match="no --baseline was given"):
        BenchOptions(baseline_collective="alltoall")
    told = read_baseline(os.path.join(DATA, "all_gather_perf_old_format_8xa100.txt"))
    facts = sweep_facts([(2 ** 30, 150.0)])
    for event in facts.stages[0].runs["n1"].events:
        if event["event"] == "row":
            event["collective"] = "all_gather"
    found = {f.check: f for f in judge_bench(facts, Expectations(baseline=told), 60)}
    finding = found["bench.baseline.all_gather"]
    assert finding.status is not Status.UNKNOWN and "of the baseline's 220.610 GB/s" in finding.summary
    assert "all_gather, from the table's columns: no redop column" in finding.evidence[0]


def test_diff_reads_old_format_logs_of_any_collective_and_says_which(tmp_path):
    new = {"command": "preflight", "nodes": ["a"], "findings": [],
           "bench": {"stages": [{"rows": [{"collective": "broadcast", "size": 8589934592,
                                           "in_place": {"busbw": 200.0}}]}]}}
    old_path = os.path.join(DATA, "broadcast_perf_old_format_8xa100.txt")
    changes = diff_reports(load_report(old_path), new)
    assert changes.bandwidth == [("broadcast at 8589934592 B", 234.70, 200.0, pytest.approx(200 / 234.70))]
    text = render_changes(changes, old_path, "new.json")
    assert "old: nccl-tests output of broadcast, from the table's columns: no redop column, root 0" in text
    ambiguous = nameless(tmp_path, "alltoall_perf_2x2080ti.txt")
    with pytest.raises(InputError, match="which collective"):
        load_report(ambiguous)
    assert load_report(ambiguous, "alltoall")["told"] == {"alltoall": "the command line"}


def test_diff_collective_on_the_command_line(tmp_path):
    log = nameless(tmp_path, "all_gather_perf_2x2080ti.txt")
    proc = clustercheck("diff", log, log)
    assert proc.returncode == EXIT_BAD_INPUT and "which collective" in proc.stderr and "--collective" in proc.stderr
    proc = clustercheck("diff", log, log, "--collective", "alltoall")
    assert proc.returncode == 0, proc.stderr
    assert "old: nccl-tests output of alltoall, from the command line" in proc.stdout
    for bad, words in (("allgather", "unknown collective"), ("broadcast", "does not fit")):
        proc = clustercheck("diff", log, log, "--collective", bad)
        assert proc.returncode == EXIT_BAD_INPUT and words in proc.stderr and repr(bad) in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
