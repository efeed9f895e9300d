"""The Flight Recorder reader's summaries (clustercheck/flight/summary.py) judge as the entries read whole did: a
plain reference judge here (every entry a dict, matched per sequence number, as the reader was before issue 50's
speed-up) agrees with clustercheck's on the real dumps and on synthesized ones (tests/flight_synth.py); the pool
of readers and the serial read agree; a corrupt file read in the pool is still named."""

import glob
import io
import json
import os
import pickle

import pytest

from clustercheck.flight.findings import judge
from clustercheck.flight.formats import INPUTS_MAY_DIFFER, OUTPUTS_MAY_DIFFER
from clustercheck.flight.judge import call_site
from clustercheck.flight.read import FILES_PER_WORKER, PlainUnpickler, read_dumps, rank_of
from tests import flight_synth

DATA = os.path.join(os.path.dirname(__file__), "data", "flight-recorder")
REAL = [os.path.join(DATA, s, f) for s in ("hang-world", "hang-subgroup", "mismatch") for f in ("pickle", "json")]


def plain_read(path):
    data = open(path, "rb").read()
    doc = PlainUnpickler(io.BytesIO(data)).load() if data[:1] == b"\x80" else json.loads(data)
    for entry in doc["entries"]:
        entry["process_group"] = tuple(entry["process_group"])
    return doc


def reference(paths):
    """Per group (in first-seen order): the first sequence number some member's last entry stops short of, with
    who is missing; the first whose op, sizes or dtypes differ, with who called what and where."""
    dumps = {rank_of(p): plain_read(p) for p in paths}
    groups, seen = {}, []
    for rank in sorted(dumps):
        by_pg = {}
        for e in dumps[rank]["entries"]:
            by_pg.setdefault(e["process_group"], []).append(e)
        for key, entries in by_pg.items():
            seen += [key] if key not in seen else []
            start, prev = 0, None
            for i, e in enumerate(entries):
                if not e["is_p2p"]:
                    start, prev = (i if prev is not None and e["collective_seq_id"] < prev else start), \
                        e["collective_seq_id"]
            seqs = {}
            for e in entries[start:]:
                if not e["is_p2p"]:
                    seqs.setdefault(e["collective_seq_id"], []).append(e)
            if seqs:
                status = dumps[rank].get("pg_status", {}).get(str(entries[-1].get("pg_id", -1))) or {}
                last = max(max(seqs), int(status.get("last_enqueued_collective", -1)))
                groups.setdefault(key, {})[rank] = (seqs, last)
    missing, mismatch = [], []

    def sig(entries):
        out = []
        for e in entries:
            op = e["profiling_name"].split(":", 1)[-1].split(" ", 1)[0]
            out.append((op, None if op in INPUTS_MAY_DIFFER else e["input_sizes"],
                        None if op in OUTPUTS_MAY_DIFFER else e["output_sizes"], e["input_dtypes"], e["output_dtypes"]))
        return repr(out)
    for key in (k for k in seen if k in groups):
        ranks = groups[key]
        first = min(last for _, last in ranks.values()) + 1
        if first <= max(last for _, last in ranks.values()):
            missing.append((key[1], first, sorted(r for r, (_, last) in ranks.items() if last < first)))
        base = ranks[min(ranks)][0]
        bad = [seq for r in ranks for seq, es in ranks[r][0].items() if seq in base and sig(es) != sig(base[seq])]
        if bad:
            calls = {}
            for r in sorted(ranks):
                if min(bad) in ranks[r][0]:
                    es = ranks[r][0][min(bad)]
                    calls.setdefault(sig(es), [[], es[0]])[0].append(r)
            mismatch.append((key[1], min(bad), sorted(([r, e["input_sizes"], call_site(e)] for r, e in calls.values()),
                                                      key=lambda c: (-len(c[0]), c[0]))))
    return sorted(missing), mismatch     # the judge orders the gaps by when their collectives were created


def ours(paths, workers=1):
    doc, findings = judge(read_dumps(paths, workers=workers))
    missing = [(g["group"], g["seq"], g["ranks_missing"]) for g in doc["missing"]]
    mismatch = [(b["group"], b["seq"], [[c["ranks"], c["input_sizes"], c["at"]] for c in b["calls"]])
                for b in doc["mismatch"]]
    return (sorted(missing), mismatch), doc, [(f.check, f.summary, f.evidence) for f in findings]


@pytest.mark.parametrize("folder", REAL)
def test_the_real_dumps_judge_as_read_whole(folder):
    paths = sorted(glob.glob(os.path.join(folder, "*")))
    assert ours(paths)[0] == reference(paths)


@pytest.mark.parametrize("name,how", flight_synth.SCENARIOS, ids=[n for n, _ in flight_synth.SCENARIOS])
def test_synthesized_dumps_judge_as_read_whole(tmp_path, name, how):
    paths = flight_synth.write(str(tmp_path), **how)
    judged, doc, _ = ours(paths)
    assert judged == reference(paths)
    assert doc["missing"] or doc["mismatch"] or name == "clean"      # every scenario but one has something to find


def test_a_desync_names_the_odd_ranks_own_line_read_again_from_its_file(tmp_path):
    paths = flight_synth.write(str(tmp_path), odd=(5, 6))
    _, doc, _ = ours(paths)
    [bad] = doc["mismatch"]
    odd = [c for c in bad["calls"] if c["ranks"] == [5]][0]
    assert odd["input_sizes"] == [[1024, 8]] and odd["at"] == "train_r1.py:103 in train_step"


def test_a_desync_whose_file_changed_since_is_still_named_without_a_line(tmp_path):
    paths = flight_synth.write(str(tmp_path), odd=(5, 6))
    read = read_dumps(paths)
    open(paths[5], "wb").write(pickle.dumps({"version": "2.10", "entries": []}, protocol=2))
    doc, findings = judge(read)
    odd = [c for c in doc["mismatch"][0]["calls"] if c["ranks"] == [5]][0]
    assert odd["input_sizes"] == [[1024, 8]] and odd["at"] == ""


def test_the_pool_and_the_serial_read_agree_and_name_a_corrupt_file(tmp_path):
    paths = flight_synth.write(str(tmp_path), ranks=2 * FILES_PER_WORKER, steps=6, stop=(9, 4), odd=(3, 2))
    cut = paths[17]
    open(cut, "wb").write(open(cut, "rb").read()[:500])
    serial, pooled = ours(paths, workers=1), ours(paths, workers=2)
    assert serial == pooled
    assert serial[1]["unreadable"] == [{"file": cut, "why": serial[1]["unreadable"][0]["why"]}]
    assert "cut short or corrupt" in serial[1]["unreadable"][0]["why"]
    assert [f[0] for f in pooled[2]][0] == "flight.unreadable"


def test_an_entry_without_its_fields_mid_dump_is_unreadable_naming_the_file(tmp_path):
    paths = flight_synth.write(str(tmp_path), ranks=4, steps=4)
    doc = pickle.loads(open(paths[2], "rb").read())
    del doc["entries"][5]["collective_seq_id"]
    open(paths[2], "wb").write(pickle.dumps(doc, protocol=2))
    read = read_dumps(paths)
    assert [(p, "fields" in why) for p, why in read.unreadable] == [(paths[2], True)]
