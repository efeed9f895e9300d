"""`clustercheck preflight` and `diff` against the sandbox: a clean 3-node cluster is READY;
a drifted package, a dropped port, a slowed link or a dead node makes it NOT READY with
the right finding first; diff shows exactly what changed; the report is well formed."""

import importlib.util
import json
import os
import re
import subprocess
import sys
import threading
import time

import pytest

from clustercheck.core.errors import EXIT_FAIL, EXIT_OK
from clustercheck.preflight.sequence import STAGE_NAMES
from clustercheck.sandbox import faults
from tests.conftest import clustercheck, gone, needs_pdsh

pytestmark = pytest.mark.sandbox


def preflight(box, tmp_path, name, *args):
    nodes = tmp_path / "nodes.txt"
    nodes.write_text("\n".join(node.name for node in box.nodes[:3]) + "\n")
    proc = on_a_pipe([sys.executable, "-m", "clustercheck", "preflight", str(nodes), "-F", box.ssh_config,
                      "--python", sys.executable, "--reports-dir", str(tmp_path / "reports"), "--name", name,
                      "--attempt-timeout", "2", "--connect-timeout", "3", "--bench-max-bytes", "4M",
                      "--smoke-steps", "20", *args], timeout=600)
    [report] = [p for p in (tmp_path / "reports").iterdir() if p.name.endswith(f"-{name}.json")]
    with open(report) as handle:
        return proc, json.load(handle), str(report)


def on_a_pipe(argv, timeout):
    """argv with stdout and stderr on pipes, as a Slurm output file or `| tee` sees them; the result has
    `stderr_lines`: (seconds since the start, line) as each line arrived."""
    started = time.monotonic()
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, lines = [], []
    readers = [threading.Thread(target=lambda: out.append(child.stdout.read())),
               threading.Thread(target=lambda: lines.extend((time.monotonic() - started, line.rstrip("\n"))
                                                            for line in child.stderr))]
    for reader in readers:
        reader.start()
    try:
        child.wait(timeout)
    finally:
        child.kill()
        for reader in readers:
            reader.join()
    proc = subprocess.CompletedProcess(argv, child.returncode, "".join(out), "\n".join(t for _, t in lines))
    proc.stderr_lines = lines
    return proc


def longest_silence(lines):
    """(seconds, the line after it) of the longest wait for a line on stderr, the start counted."""
    times = [0.0] + [t for t, _ in lines]
    gaps = [(b - a, lines[i][1]) for i, (a, b) in enumerate(zip(times, times[1:]))]
    return max(gaps, default=(float("inf"), ""))


def first_problem(doc):
    return next(f for f in doc["findings"] if f["status"] == "FAIL") if any(
        f["status"] == "FAIL" for f in doc["findings"]) else None


def check_markdown(md_path):
    """Tables well formed (every row as many cells as its header) and every image present."""
    text = open(md_path).read()
    table = []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            table.append(line)
            continue
        if table:
            widths = {len(re.findall(r"(?<!\\)\|", row)) for row in table}
            assert len(widths) == 1, table[:3]
            assert re.match(r"^\|[-| ]+\|$", table[1]), table[1]
            table = []
    for image in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text):
        assert os.path.exists(os.path.join(os.path.dirname(md_path), image)), image
    return text


@needs_pdsh
def test_a_clean_sandbox_is_ready_and_the_report_is_well_formed(box, tmp_path):
    proc, doc, path = preflight(box, tmp_path, "clean")
    assert proc.returncode == EXIT_OK, proc.stdout + proc.stderr
    # progress a user sees on a pipe: every stage (device, storage, bench, smoke run long) says what it does within
    # 5 s of the start and then at least every 10 s, and each long one ends with its total time
    lines = proc.stderr_lines
    assert lines and lines[0][0] <= 5.0, lines[:3]
    assert longest_silence(lines)[0] <= 10.0, (longest_silence(lines), lines)
    long = [name for name, stage in doc["stages"].items() if stage["wall_s"] > 5]
    assert {"device", "bench", "smoke"} <= set(long), doc["stages"]
    for stage in long:
        assert any(re.match(rf"\[{stage}\] done: OK in [0-9.]+ s$", text) for _, text in lines), (stage, lines)
    assert any(re.match(r"\[device\] [0-9]+ s: measuring every device .*, [0-9] of 3 nodes answered$", text)
               for _, text in lines), lines
    assert {s: v["status"] for s, v in doc["stages"].items()} == {name: "OK" for name in STAGE_NAMES}
    text = check_markdown(path[:-5] + ".md")
    assert text.startswith("# READY (")
    for section in ("## Findings", "## Stages", "## Versions and settings", "## Network", "## Bandwidth",
                    "## Training", "## How to launch"):
        assert section in text
    assert "`clustercheck smoke " in text and doc["version"]
    first = box.nodes[0]
    assert doc["launch"]["ready"] and doc["launch"]["spec"]["master_addr"] == first.addr
    assert f"--node-rank 2 --master-addr {first.addr} --master-port 29500" in text
    assert gone("entry.py --mode") and gone("clustercheck_bench_worker")


def test_a_drifted_package_is_the_first_finding_and_diff_shows_exactly_it(box, tmp_path):
    _, clean, clean_path = preflight(box, tmp_path, "before", "--only", "env")
    victim = box.nodes[2].name
    site = os.path.dirname(os.path.dirname(importlib.util.find_spec("deepspeed").origin))
    faults.hide_python_packages(box, victim, site, ["deepspeed"])
    proc, broken, broken_path = preflight(box, tmp_path, "after", "--only", "env")
    assert proc.returncode == EXIT_FAIL
    assert first_problem(broken)["check"] == "packages.same" and first_problem(broken)["nodes"] == [victim]
    diff = clustercheck("diff", clean_path, broken_path)
    assert diff.returncode == EXIT_FAIL
    lines = diff.stdout.splitlines()
    assert f"  deepspeed on {victim}: 0.19.8 -> not installed" in lines or any(
        line.startswith(f"  deepspeed on {victim}:") and line.endswith("-> not installed") for line in lines)
    assert [line for line in lines if line.startswith("new ")] == [
        f"new FAIL: [env] 1 training-stack package differs on {victim}: deepspeed"]
    assert "Verdict: WORSE" in diff.stdout
    # The same comparison inside preflight, on the screen and in --json.
    again, _, _ = preflight(box, tmp_path, "again", "--only", "env", "--baseline", clean_path)
    assert again.returncode == EXIT_FAIL and f"new FAIL: [env] 1 training-stack package differs on {victim}: deepspeed" in again.stdout
    as_json, _, _ = preflight(box, tmp_path, "json", "--only", "env", "--baseline", clean_path, "--json")
    changes = json.loads(as_json.stdout)["changes"]
    assert changes["worse"] and [f["check"] for f in changes["new_findings"]] == ["packages.same"]


def test_a_dropped_port_is_named_first_and_skips_what_would_hang(box, tmp_path):
    faults.drop_port(box, box.nodes[0].name, 29500)
    proc, doc, path = preflight(box, tmp_path, "port", "--skip", "device,storage")
    assert proc.returncode == EXIT_FAIL
    assert first_problem(doc)["check"] == "net.master.reach"
    assert not doc["launch"]["ready"] and "29500" in doc["launch"]["reason"]
    assert "Not ready to launch: FAIL" in open(path[:-5] + ".md").read()
    assert doc["stages"]["bench"]["status"] == "SKIPPED"
    assert "collectives would hang" in doc["stages"]["bench"]["skipped"]


def test_a_slowed_link_is_named_by_the_bench(box, tmp_path):
    slow = box.nodes[1].name
    faults.slow_link(box, slow, 100)
    proc, doc, _ = preflight(box, tmp_path, "slow", "--skip", "device,storage,smoke")
    assert proc.returncode == EXIT_FAIL
    first = first_problem(doc)
    assert first["check"] == "bench.pairwise.node" and first["nodes"] == [slow]


def test_a_dead_node_is_named_first(box, tmp_path):
    dead = box.nodes[2].name
    faults.blackhole(box, dead)
    proc, doc, _ = preflight(box, tmp_path, "dead", "--skip", "device,storage")
    assert proc.returncode == EXIT_FAIL
    first = first_problem(doc)
    assert first["check"] == "reach" and first["nodes"] == [dead] and first["stage"] == "env"
    assert doc["stages"]["smoke"]["status"] == "SKIPPED"
