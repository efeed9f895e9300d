"""NCCL's RAS read (issue 44): the standard-library client speaks NCCL's text protocol to a port that replays reports
recorded from NCCL's documentation and users' issues (tests/data/nccl-diag/SOURCES.md; tests/ras_replay.py stands in
for NCCL, which cannot run here), and the judge names the dead or missing ranks and the collective the ranks disagree
on. A closed, silent or garbage port is UNKNOWN with why, never a hang."""

import os
import socket
import threading

from clustercheck.nccl.ras_judge import judge_ras
from clustercheck.onnode import nccl_ras_client
from tests.ras_replay import start_in_thread

DATA = os.path.join(os.path.dirname(__file__), "data", "nccl-diag")


def recorded(name):
    with open(os.path.join(DATA, name), "rb") as handle:
        return handle.read()


def ask(port, deadline_s=5.0):
    return nccl_ras_client.ask(f"127.0.0.1:{port}", deadline_s)


def test_a_json_report_names_the_missing_rank_with_its_process_and_host():
    doc = ask(start_in_thread(recorded("nccl-docs-ras-json-2.29.1.json")))
    assert doc["answered"] and doc["format"] == "json" and doc["protocol"] == "2"
    [missing] = judge_ras({"n1": doc})
    assert missing.status.name == "FAIL" and missing.nodes == ["172.16.64.245"]
    assert "rank 1 (process 1524345 on 172.16.64.245, GPU 1) unresponsive" in missing.evidence[0]


def test_an_ncc_before_json_answers_in_text_and_the_collective_ranks_disagree_on_is_named():
    """NCCL 2.26.2 (nccl#1911): SET FORMAT is an unknown command there; the verbose text report is read."""
    doc = ask(start_in_thread(recorded("nvidia-nccl-1911-ras-mismatch-2.26.2.txt"), json_ok=False))
    assert doc["answered"] and doc["format"] == "text"
    [mismatch] = judge_ras({"n1": doc, "n2": doc}, hung=True)
    assert mismatch.status.name == "WARN" and "AllGather operation counts" in mismatch.summary
    assert "30 ranks have launched up to operation 640" in mismatch.summary and not mismatch.nodes
    assert any("rank 12 (process 323032 on 10.137.190.124, GPU 4)" in line for line in mismatch.evidence)


def test_dead_processes_and_a_healthy_job_are_said_as_ras_says_them():
    dead = judge_ras({"n1": {"answered": True, "format": "text", "reply": recorded("nccl-docs-ras-status-dead.txt")
                             .decode()}})
    assert [f.status.name for f in dead] == ["FAIL", "FAIL"] and dead[0].nodes == ["172.16.64.213"]
    assert "dead" in dead[0].summary and "The missing rank: 21" in dead[1].evidence[0]
    [ok] = judge_ras({"n1": {"answered": True, "format": "text",
                             "reply": recorded("nvidia-nccl-1730-ras-ok-then-torch-timeout-2.26.2.txt").decode()}})
    assert ok.status.name == "OK" and "1 communicator(s)" in ok.summary


def test_a_closed_silent_or_garbage_port_is_unknown_with_why_and_never_a_hang():
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()                      # nothing listens there now
    docs = {"closed": ask(port), "garbage": ask(start_in_thread(b"", mode="garbage")),
            "silent": None}
    waited = threading.Thread(target=lambda: docs.update(silent=ask(start_in_thread(b"", mode="silent"), 1.0)))
    waited.start()
    waited.join(60)                     # a bound on a hang, not a timing: the client's deadline is 1 s
    assert not waited.is_alive()
    assert "nothing listens" in docs["closed"]["why"]
    assert "not NCCL's RAS protocol" in docs["garbage"]["why"]
    assert "no answer" in docs["silent"]["why"]
    findings = judge_ras(docs)
    assert {f.status.name for f in findings} == {"UNKNOWN"} and sorted(n for f in findings for n in f.nodes) == \
        ["closed", "garbage", "silent"]


def test_a_bad_ras_address_is_said():
    assert "NCCL_RAS_ADDR" in nccl_ras_client.ask("localhost", 1.0)["why"]


def test_a_hang_s_evidence_carries_what_ras_said_and_nothing_where_no_ncc_job_answered():
    from clustercheck.ranks.forensics import Forensics, hang_report
    said = judge_ras({"n1": {"answered": True, "format": "text",
                             "reply": recorded("nccl-docs-ras-status-dead.txt").decode()},
                      "n2": {"answered": False, "why": "nothing listens on localhost:28028"}}, hung=True)
    _, evidence, _, _ = hang_report(30.0, Forensics("rank 3 is stopped", ras=said), 600)
    ras = [line for line in evidence if line.startswith("NCCL RAS:")]
    assert len(ras) == 2 and "dead" in ras[0] and "process 3487984 on 172.16.64.213" in ras[0]
    assert not any("nothing listens" in line for line in evidence)     # Gloo, or RAS off: not said in the hang
