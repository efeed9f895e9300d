"""PyTorch Flight Recorder dumps (issue 50): real dumps of 4 gloo ranks (tests/data/flight-recorder, made by its
make_dumps.py with torch 2.13.0) judged: the rank that stopped and the collective it never entered, with its
sequence number and group; the rank that called all_reduce with other sizes. A pickle that would run something is
refused unrun; a dump cut short, two jobs' dumps in one directory, a recorder version not known: UNKNOWN."""

import glob
import io
import json
import os
import pickle
import shutil

import pytest

from clustercheck.explain.verdict import explain
from clustercheck.flight.findings import judge
from clustercheck.flight.read import PlainUnpickler, read_dumps
from tests.conftest import clustercheck

DATA = os.path.join(os.path.dirname(__file__), "data", "flight-recorder")
FORMS = ("pickle", "json")


def dumps(scenario, form):
    return sorted(glob.glob(os.path.join(DATA, scenario, form, "*")))


def judged(paths):
    doc, findings = judge(read_dumps(paths))
    return doc, {f.check: f for f in findings}


@pytest.mark.parametrize("form", FORMS)
def test_the_rank_that_stopped_and_the_all_reduce_it_never_entered_are_named(form):
    doc, findings = judged(dumps("hang-world", form))
    [gap] = doc["missing"]
    assert (gap["op"], gap["seq"], gap["group"]) == ("all_reduce", 8, "default_pg")
    assert gap["ranks_missing"] == [2] and gap["ranks_waiting"] == [0, 1, 3] and doc["stopped"] == [2]
    assert set(findings) == {"flight.missing"} and findings["flight.missing"].status.name == "FAIL"
    summary = findings["flight.missing"].summary
    assert summary.startswith("rank(s) 2 never entered all_reduce #8 of the world")
    if form == "pickle":     # only the pickle carries the frames: each rank's own line at the call
        assert any("rank 0: waits in all_reduce #8" in line and "make_dumps.py:" in line
                   for line in findings["flight.missing"].evidence)


@pytest.mark.parametrize("form", FORMS)
def test_a_hang_in_a_subgroup_names_the_subgroup_its_ranks_and_who_waits_where(form):
    doc, findings = judged(dumps("hang-subgroup", form))
    first, then = doc["missing"]
    assert (first["group"], first["members"], first["op"], first["seq"]) == ("tp1", [2, 3], "all_reduce", 3)
    assert first["ranks_missing"] == [3] and first["ranks_waiting"] == [2]
    assert (then["group"], then["op"], then["ranks_missing"], then["ranks_waiting"]) == (
        "default_pg", "barrier", [2, 3], [0, 1])
    assert doc["stopped"] == [3]            # rank 2 is not stopped: it waits in tp1's all_reduce
    assert "group 'tp1'" in findings["flight.missing"].summary
    assert "rank 2: waits in all_reduce #3 of tp1" in " ".join(findings["flight.missing"].evidence)


def test_the_subgroup_is_named_when_the_worlds_next_collective_was_created_before_it(tmp_path):
    """Ranks 0 and 1, outside tp1, race on to the world's barrier while rank 2 enters tp1's all_reduce: on a
    cluster the barrier may be created first (seen on the sandbox). The gap whose missing rank stopped outside any
    collective is named, not the barrier that ranks 2 and 3 miss because rank 2 waits in tp1."""
    for path in dumps("hang-subgroup", "json"):
        doc = json.load(open(path))
        if doc["entries"][-1]["process_group"][1] == "default_pg":
            doc["entries"][-1]["time_created_ns"] -= 60 * 10 ** 9
        (tmp_path / os.path.basename(path)).write_text(json.dumps(doc))
    doc, findings = judged(sorted(str(p) for p in tmp_path.iterdir()))
    assert doc["missing"][0]["group"] == "default_pg"          # created first, as set up
    summary = findings["flight.missing"].summary
    assert summary.startswith("rank(s) 3 never entered all_reduce #3 of group 'tp1'"), summary


@pytest.mark.parametrize("form", FORMS)
def test_a_desync_names_the_rank_with_other_sizes_against_the_majority(form):
    doc, findings = judged(dumps("mismatch", form))
    [bad] = doc["mismatch"]
    assert (bad["group"], bad["seq"]) == ("default_pg", 8)
    majority, odd = bad["calls"]
    assert majority["ranks"] == [0, 2, 3] and majority["input_sizes"] == [[4]]
    assert odd["ranks"] == [1] and odd["input_sizes"] == [[8]] and odd["op"] == "all_reduce"
    assert "rank(s) 1 called all_reduce #8" in findings["flight.mismatch"].summary
    assert not doc["missing"]


class Reduce:
    def __reduce__(self):
        return (os.system, ("echo pwned > /tmp/should-never-exist",))


def test_the_unpickler_refuses_a_pickle_that_would_call_os_system_without_calling_it(tmp_path):
    payload = pickle.dumps({"version": "2.10", "entries": [], "x": Reduce()}, protocol=2)   # built, never loaded
    with pytest.raises(pickle.UnpicklingError, match="system"):
        PlainUnpickler(io.BytesIO(payload)).load()
    (tmp_path / "nccl_trace_rank_0").write_bytes(payload)
    read = read_dumps([str(tmp_path / "nccl_trace_rank_0")])
    [(path, why)] = read.unreadable
    assert path.endswith("nccl_trace_rank_0") and "system" in why and not read.dumps
    assert not os.path.exists("/tmp/should-never-exist")


def _copy(tmp_path, scenario="hang-world", form="pickle"):
    target = tmp_path / scenario
    shutil.copytree(os.path.join(DATA, scenario, form), target)
    return target


@pytest.mark.parametrize("form", FORMS)
def test_a_dump_cut_short_is_unknown_naming_the_file(tmp_path, form):
    target = _copy(tmp_path, form=form)
    cut = sorted(target.iterdir())[1]
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])
    proc = clustercheck("explain", str(target), "--json")
    doc = json.loads(proc.stdout)
    assert doc["verdict"] != "OK" and proc.returncode in (2, 3)
    unreadable = [f for f in doc["findings"] if f["check"] == "flight.unreadable"]
    assert unreadable and unreadable[0]["status"] == "UNKNOWN" and cut.name in unreadable[0]["summary"]
    [line] = [u for u in doc["flight_recorder"]["unreadable"]]
    assert "cut short or corrupt" in line["why"]


def test_two_jobs_dumps_in_one_directory_are_unknown_never_judged_together(tmp_path):
    target = _copy(tmp_path, form="json")
    other = json.loads((target / "nccl_trace_rank_3.json").read_text())
    for entry in other["entries"]:          # the same program run a day later: another job's dump of rank 3
        entry["time_created_ns"] += 24 * 3600 * 10 ** 9
    (target / "nccl_trace_rank_3.json").write_text(json.dumps(other))
    doc, findings = judged(sorted(str(p) for p in target.iterdir()))
    assert findings["flight.unreadable"].status.name == "UNKNOWN"
    assert "nccl_trace_rank_3.json" in findings["flight.unreadable"].summary
    assert "another job" in findings["flight.unreadable"].summary
    assert not doc["missing"] and "flight.missing" not in findings


def test_an_unknown_recorder_version_is_unknown_naming_the_file(tmp_path):
    target = _copy(tmp_path, form="json")
    for path in target.iterdir():
        doc = json.loads(path.read_text())
        doc["version"] = "3.0"
        path.write_text(json.dumps(doc))
    proc = clustercheck("explain", str(target), "--json")
    doc = json.loads(proc.stdout)
    assert proc.returncode == 3 and doc["verdict"] == "UNKNOWN"
    [finding] = [f for f in doc["findings"] if f["check"] == "flight.unreadable"]
    assert "'3.0'" in finding["summary"] and "nccl_trace_rank_" in finding["summary"]


def test_explain_reads_dumps_beside_logs_and_says_so_in_its_json(tmp_path):
    target = _copy(tmp_path, "hang-subgroup", "pickle")
    (target / "train-rank0.log").write_text("step 1 loss 2.0\n[rank0]: waiting in all_reduce\n")
    proc = clustercheck("explain", str(target), "--json")
    doc = json.loads(proc.stdout)
    assert proc.returncode == 2 and doc["flight_recorder"]["stopped"] == [3]
    assert any(f["check"] == "flight.missing" for f in doc["findings"])
    assert "train-rank0.log" in " ".join(doc["files"])


def test_a_directory_without_dumps_has_no_flight_recorder_part(tmp_path):
    (tmp_path / "train.log").write_text("step 1 loss 2.0\n")
    assert explain([str(tmp_path)]).flight == {}
