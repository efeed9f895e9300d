"""No command prints READY with nothing checked: every command run as a user would (the real command line) on
empty, tiny and foreign inputs ends 64 (bad input, before any node) or not ready (2, 3), never 0 with READY; its
JSON's verdict is not OK and its metrics never say clustercheck_verdict 0. Where a command really checks this
machine (node-check, env, run, stacks of a live process), READY comes with what it checked and a count above 0.
Unreachable nodes are loopback's closed port 9: nothing leaves this host."""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time

import pytest

from clustercheck.core.errors import EXIT_BAD_INPUT, EXIT_FAIL, EXIT_OK, EXIT_UNKNOWN
from clustercheck.core.inventory import Defaults, local_inventory
from clustercheck.core.result import NOTHING_CHECKED_VERDICT, Finding, Status, note, verdict_line, worst
from clustercheck.metrics.build import finding_samples, run_samples
from clustercheck.runner.healthy import failed_nodes, healthy_nodes
from clustercheck.runner.stage import RunResult, StageResult
from clustercheck.tools.node_health import verdict as node_verdict
from tests.conftest import ROOT, clustercheck

DEAD = "Host dead*\n  HostName 127.0.0.1\n  Port 9\n"
READY = re.compile(r"(?<!NOT )\bREADY\b")          # READY and READY, WITH WARNINGS; never NOT READY
# the arguments each command needs besides the nodes (a flag it requires, a command for run)
NEEDS = {"stacks": ["--match", "train.py"], "plan": ["--params", "7B"], "storage": ["--checkpoint-dir", "/tmp/cc-x"],
         "run": ["--", "true"]}
CLUSTER_COMMANDS = ["env", "bench", "device", "storage", "net", "smoke", "preflight", "stacks", "plan", "run"]
WITH_JSON = ["env", "bench", "device", "storage", "net", "smoke", "preflight", "stacks"]
STAGES = ["env", "bench", "device", "storage", "net", "smoke"]


@pytest.fixture
def files(tmp_path):
    def write(name, content):
        path = tmp_path / name
        (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
        return str(path)
    return write


def command_line(command, nodes_file, *extra):
    """The command's argv: the nodes file, the flags it needs, then extra; run's remote command last."""
    needs = NEEDS.get(command, [])
    remote = needs[needs.index("--"):] if "--" in needs else []
    flags = needs[:needs.index("--")] if "--" in needs else needs
    return [command, *([nodes_file] if nodes_file else []), *flags, *extra, *remote]


def not_ready(proc, *codes):
    """Exit in codes (2 or 3 by default), no READY anywhere, no traceback."""
    codes = codes or (EXIT_FAIL, EXIT_UNKNOWN)
    said = proc.stdout + proc.stderr
    assert proc.returncode in codes, (proc.returncode, proc.stdout[-1500:], proc.stderr[-1500:])
    assert not READY.search(said), said[-2000:]
    assert "Traceback" not in said, said[-2000:]


def refused(proc, *words):
    assert proc.returncode == EXIT_BAD_INPUT, (proc.returncode, proc.stdout[-500:], proc.stderr[-1500:])
    assert "Error" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not READY.search(proc.stdout + proc.stderr)
    for word in words:
        assert word in proc.stderr, (word, proc.stderr)


def passed_count(text):
    """N of the verdict line's "N passed" (the last one)."""
    counts = re.findall(r"(\d+) passed", text)
    return int(counts[-1]) if counts else 0


def doc_of(proc):
    try:
        return json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(f"not one JSON document: {proc.stdout[-1000:]} {proc.stderr[-1000:]}") from None


def verdict_not_ok(doc):
    """A command's JSON verdict (a Status name; preflight's report: the verdict line) says no pass."""
    verdict = doc["verdict"]
    assert verdict != "OK" and not READY.search(verdict) and doc["exit_code"] != EXIT_OK, doc


# ---- a nodes file with no node: bad input, for every command and every output form -------------------------
@pytest.mark.parametrize("content", ["", "# only comments\n\n   # and another\n"], ids=["empty", "comments"])
@pytest.mark.parametrize("command", CLUSTER_COMMANDS)
def test_a_nodes_file_with_no_node_is_bad_input_for_every_command(files, command, content):
    nodes = files("nodes.txt", content)
    refused(clustercheck(*command_line(command, nodes)), nodes, "no nodes")


@pytest.mark.parametrize("command", STAGES + ["preflight"])
def test_no_node_is_bad_input_in_the_json_and_metrics_forms_too_before_any_push(files, command):
    # the gateway is loopback's closed port: a push tried would be a WARN at exit 1; bad input comes first
    nodes = files("nodes.txt", "# nothing here\n")
    proc = clustercheck(*command_line(command, nodes, "--json", "--pushgateway", "http://127.0.0.1:9"))
    refused(proc, nodes, "no nodes")
    assert proc.stdout == ""


# ---- a node that cannot be reached: nothing checked, never a pass ---------------------------------------
@pytest.mark.parametrize("command", CLUSTER_COMMANDS)
def test_a_node_that_cannot_be_reached_is_never_ready(files, tmp_path, command):
    extra = ["--reports-dir", str(tmp_path / "reports")] if command == "preflight" else []
    proc = clustercheck(*command_line(command, files("nodes.txt", "deadA\n"), "-F", files("cfg", DEAD), *extra))
    not_ready(proc)
    if command not in ("plan", "run"):      # plan says why on one line (UNKNOWN: ...); run is pdsh's summary
        assert "Verdict: " in proc.stdout and passed_count(proc.stdout) == 0, proc.stdout[-1500:]


@pytest.mark.parametrize("command", WITH_JSON)
def test_the_json_of_a_node_that_cannot_be_reached_has_no_ok_verdict_and_no_ok_finding(files, tmp_path, command):
    extra = ["--reports-dir", str(tmp_path / "reports")] if command == "preflight" else []
    proc = clustercheck(*command_line(command, files("nodes.txt", "deadA\ndeadB\n"), "-F", files("cfg", DEAD),
                                      "--json", *extra))
    not_ready(proc)
    doc = doc_of(proc)
    verdict_not_ok(doc)
    assert not [f for f in doc["findings"] if f["status"] == "OK" and f.get("checked", True)], doc["findings"]
    if command == "preflight":      # no node was seen: none is called healthy
        assert doc["healthy_nodes"] == [] and sorted(doc["failed_nodes"]) == ["deadA", "deadB"], doc


def test_preflight_with_every_stage_skipped_names_no_node_healthy(tmp_path):
    from clustercheck.preflight.sequence import STAGE_NAMES
    proc = clustercheck("preflight", "--skip", ",".join(STAGE_NAMES), "--reports-dir", str(tmp_path), "--json")
    not_ready(proc, EXIT_UNKNOWN)
    doc = doc_of(proc)
    verdict_not_ok(doc)
    assert doc["verdict"].startswith(NOTHING_CHECKED_VERDICT), doc["verdict"]
    assert doc["healthy_nodes"] == [] and doc["failed_nodes"] == ["localhost"], doc


# ---- metrics: clustercheck_verdict is never 0 with nothing checked -----------------------------------------
@pytest.fixture
def gateway(tmp_path):
    from tests.prometheus_servers import servers_or_skip
    running = servers_or_skip(tmp_path / "prometheus")
    yield running
    running.stop()


def pushed(servers, cluster):
    """metric{labels} -> value of what the gateway holds for the cluster."""
    found = {}
    for line in servers.scrape(servers.gateway).splitlines():
        match = re.match(r"^(clustercheck_\w+)\{([^}]*)\} (\S+)$", line)
        if match and f'cluster="{cluster}"' in match.group(2):
            labels = ",".join(sorted(p for p in match.group(2).split(",")
                                     if p.split("=")[0] not in ("cluster", "instance", "job")))
            found[f"{match.group(1)}{{{labels}}}"] = float(match.group(3))
    return found


def test_a_push_of_nothing_checked_never_says_verdict_0(gateway, files, tmp_path):
    from clustercheck.preflight.sequence import STAGE_NAMES
    proc = clustercheck("env", files("dead.txt", "deadA\n"), "-F", files("cfg", DEAD), "--pushgateway",
                        gateway.gateway)
    not_ready(proc)
    metrics = pushed(gateway, "dead")
    assert metrics["clustercheck_verdict{}"] != 0 and metrics['clustercheck_nodes{health="healthy"}'] == 0, metrics
    assert 'results pushed to' in proc.stdout and "note" in proc.stdout     # the push is no check that passed
    proc = clustercheck("preflight", "--skip", ",".join(STAGE_NAMES), "--reports-dir", str(tmp_path),
                        "--name", "skipped", "--pushgateway", gateway.gateway)
    not_ready(proc, EXIT_UNKNOWN)
    metrics = pushed(gateway, "skipped")
    assert metrics["clustercheck_verdict{}"] == 3 and metrics['clustercheck_nodes{health="healthy"}'] == 0, metrics


def test_node_check_s_textfile_says_verdict_0_only_with_checks_that_passed(tmp_path):
    """This machine has no GPU: node-check checks what it can (shm, memlock, the working directory) and says so."""
    proc = clustercheck("node-check", "--textfile", str(tmp_path), "-v")
    text = (tmp_path / "clustercheck.prom").read_text()
    verdict = float(re.search(r"^clustercheck_verdict (\S+)$", text, re.M).group(1))
    statuses = [float(v) for v in re.findall(r"^clustercheck_check_status\{[^}]*\} (\S+)$", text, re.M)]
    if verdict == 0:
        assert statuses and all(s == 0 for s in statuses), text
        assert proc.returncode == EXIT_OK and passed_count(proc.stdout) > 0, proc.stdout
        assert re.search(r"^CLUSTERCHECK OK - [1-9]\d* checks? passed$", proc.stdout, re.M), proc.stdout
        assert "shm" in text and re.search(r"^OK +/dev/shm", proc.stdout, re.M), proc.stdout   # says what it checked
    else:
        assert proc.returncode != EXIT_OK and not READY.search(proc.stdout), proc.stdout


def test_metrics_of_notes_alone_say_unknown():
    notes = [note("explain.skipped", "2 files skipped"), note("metrics.push", "results pushed")]
    samples = {(name, tuple(sorted(labels.items()))): value
               for name, labels, value in finding_samples("env", notes) + run_samples(notes, 1.0, ["n1"], [])}
    assert samples[("clustercheck_verdict", ())] == 3
    assert samples[("clustercheck_stage_status", (("stage", "env"),))] == 3
    assert not [key for key in samples if key[0] == "clustercheck_check_status"]      # a note is no check


# ---- node-check on this machine ------------------------------------------------------------------------------
def test_node_check_here_says_what_it_checked_and_how_many_passed():
    proc = clustercheck("node-check", "-v")
    line = proc.stdout.splitlines()[0]
    if proc.returncode == EXIT_OK:
        passed = passed_count(proc.stdout)
        assert passed > 0 and line == f"CLUSTERCHECK OK - {passed} check{'s' * (passed != 1)} passed", proc.stdout
        assert len(re.findall(r"^OK +\S", proc.stdout, re.M)) == passed, proc.stdout     # each named with -v
    else:
        assert not line.startswith("CLUSTERCHECK OK") and not READY.search(proc.stdout), proc.stdout
    npd = clustercheck("node-check", "--npd")
    assert npd.returncode == {0: 0, 1: 0, 2: 1, 3: 2}[proc.returncode] and "Traceback" not in npd.stderr


def test_node_check_s_verdict_over_notes_alone_is_unknown_naming_it():
    code, line = node_verdict([note("gpu.none", "no GPU on this node")])
    assert code == EXIT_UNKNOWN and line == "CLUSTERCHECK UNKNOWN - nothing was checked"
    code, line = node_verdict([note("gpu.none", "no GPU"), Finding("shm", Status.OK, "/dev/shm is large enough")])
    assert code == EXIT_OK and line == "CLUSTERCHECK OK - 1 check passed"


# ---- the runner: notes, a push and skipped stages never add up to a pass ---------------------------------------
def test_a_run_of_notes_and_a_push_is_unknown_and_calls_no_node_healthy():
    nodes = local_inventory(Defaults())
    push_failed = Finding("metrics.push", Status.WARN, "the results were not pushed to http://127.0.0.1:9")
    for after in ([], [push_failed], [note("metrics.push", "results pushed")]):
        run = RunResult(nodes, [StageResult("env", findings=[note("env.skipped", "a file skipped")])],
                        after=list(after))
        assert worst(run.findings) is Status.UNKNOWN and run.exit_code == EXIT_UNKNOWN, run.findings
        line = verdict_line(run.findings)
        assert line.startswith(NOTHING_CHECKED_VERDICT if push_failed not in after else "UNKNOWN: "), line
        assert healthy_nodes(run) == [] and failed_nodes(run) == ["localhost"]
    checked = RunResult(nodes, [StageResult("env", findings=[Finding("shm", Status.OK, "/dev/shm is large")])],
                        after=[push_failed])
    assert worst(checked.findings) is Status.WARN and healthy_nodes(checked) == ["localhost"]


# ---- this machine, really checked: READY only with checks that passed ------------------------------------------
def test_env_here_is_ready_only_with_checks_that_passed():
    proc = clustercheck("env", "--json")
    doc = doc_of(proc)
    passed = [f for f in doc["findings"] if f["status"] == "OK" and f.get("checked", True)]
    if proc.returncode in (EXIT_OK, 1):
        assert doc["verdict"] in ("OK", "WARN") and passed, doc["findings"]
    else:
        verdict_not_ok(doc)


def test_run_here_reports_the_one_node_it_ran_on():
    proc = clustercheck("run", "--", "true")
    assert proc.returncode == EXIT_OK and "ok: 1/1 nodes" in proc.stdout, proc.stdout + proc.stderr
    proc = clustercheck("run", "--", "false")
    assert proc.returncode == EXIT_FAIL and "ok: 0/1 nodes" in proc.stdout, proc.stdout


def test_plan_with_no_gpu_here_is_unknown_not_bad_input_nor_a_fit():
    proc = clustercheck("plan", "--params", "7B")         # this machine has no GPU: nothing to plan for
    not_ready(proc, EXIT_UNKNOWN)
    assert "UNKNOWN: " in proc.stderr and "no NVIDIA GPU" in proc.stderr, proc.stderr


# ---- stacks: a pass is a process dumped -----------------------------------------------------------------------
def test_stacks_that_matched_nothing_here_is_not_ready_and_its_json_says_so():
    proc = clustercheck("stacks", "--match", "no-such-process-of-clustercheck-4242", "--json")
    not_ready(proc, EXIT_FAIL)
    doc = doc_of(proc)
    verdict_not_ok(doc)
    assert doc["groups"] == [] and [f["check"] for f in doc["findings"]] == ["stacks.match"], doc
    text = clustercheck("stacks", "--match", "no-such-process-of-clustercheck-4242").stdout
    assert "Verdict: NOT READY (1 failed, 0 passed)" in text and text.count("Verdict:") == 1, text


@pytest.mark.skipif(shutil.which("py-spy") is None, reason="py-spy is not installed")
def test_stacks_of_a_live_process_here_is_ready_with_it_dumped():
    mark = f"cc-nothing-checked-{os.getpid()}"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", mark])
    try:
        time.sleep(0.5)
        proc = clustercheck("stacks", "--match", mark, "--json")
        doc = doc_of(proc)
        if proc.returncode == EXIT_OK:     # py-spy may lack ptrace rights here: then it is a FAIL, never READY
            assert doc["verdict"] == "OK" and sum(g["count"] for g in doc["groups"]) == 1, doc
            [dumped] = doc["findings"]
            assert dumped["check"] == "stacks.dumped" and "1 matching process(es) dumped" in dumped["summary"]
        else:
            verdict_not_ok(doc)
    finally:
        sleeper.kill()
        sleeper.wait()


# ---- explain: a pass is a log that says the job ended well ---------------------------------------------------------
NGINX = "".join(f'10.0.0.{i} - - [01/Dec/2026:10:00:0{i} +0000] "GET /x{i} HTTP/1.1" {code} 612 "-" "curl/8.0"\n'
                for i, code in enumerate((200, 404, 500, 200)))
UNITTEST = """test_add (test_math.TestMath) ... ok
test_div (test_math.TestMath) ... FAIL

======================================================================
FAIL: test_div (test_math.TestMath)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "test_math.py", line 10, in test_div
    self.assertEqual(1 / 2, 1)
AssertionError: 0.5 != 1

----------------------------------------------------------------------
Ran 2 tests in 0.001s

FAILED (failures=1)
"""
LS = """total 24
drwxr-xr-x  2 root root 4096 Dec  1 10:00 bin
-rw-r--r--  1 root root  220 Dec  1 10:00 .bashrc
lrwxrwxrwx  1 root root    7 Dec  1 10:00 lib -> usr/lib
"""
NCCL_INFO = "".join(f"node01:1234:1234 [0] NCCL INFO {line}\n" for line in (
    "Bootstrap : Using eth0:10.0.0.1<0>", "NET/Plugin: No plugin found (libnccl-net.so)",
    "cudaDriverVersion 12040", "NCCL version 2.21.5+cuda12.4", "Channel 00/02 :    0   1", "Connected all rings",
    "comm 0x5555 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId 0xabc - Init COMPLETE"))
FOREIGN = {"one-line.log": "hello world\n", "nginx-access.log": NGINX, "unittest.log": UNITTEST, "ls-l.txt": LS,
           "nccl-info.log": NCCL_INFO, "date.txt": "Tue Dec  1 10:00:00 UTC 2026\n"}


@pytest.mark.parametrize("name", sorted(FOREIGN))
def test_explain_of_a_log_that_says_nothing_of_an_end_is_never_ready(files, name):
    path = files(name, FOREIGN[name])
    proc = clustercheck("explain", path)
    not_ready(proc)
    assert passed_count(proc.stdout) == 0, proc.stdout
    doc = doc_of(clustercheck("explain", path, "--json"))
    verdict_not_ok(doc)


def test_explain_of_a_directory_of_foreign_logs_is_never_ready(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    for name, content in FOREIGN.items():
        (logs / name).write_text(content)
    (logs / "core.bin").write_bytes(b"\x7fELF\x00\x01\x02\xff" * 64)
    not_ready(clustercheck("explain", str(logs)))
    verdict_not_ok(doc_of(clustercheck("explain", str(logs), "--json")))
    nccl_only = tmp_path / "nccl"
    nccl_only.mkdir()
    for rank in range(2):
        (nccl_only / f"rank{rank}.log").write_text(NCCL_INFO.replace("[0]", f"[{rank}]"))
    not_ready(clustercheck("explain", str(nccl_only)))
    verdict_not_ok(doc_of(clustercheck("explain", str(nccl_only), "--json")))


@pytest.mark.parametrize("content, words", [
    ("", ["empty"]),
    (b"\x7fELF\x02\x01\x01\x00\x00\x00\xff\xfe" * 16, ["binary"]),
], ids=["empty", "binary"])
def test_explain_of_an_empty_or_binary_file_is_bad_input(files, content, words):
    path = files("job.log", content)
    refused(clustercheck("explain", path), path, *words)
    refused(clustercheck("explain", path, "--json"), path, *words)


def test_explain_of_an_empty_directory_is_bad_input(tmp_path):
    (tmp_path / "logs").mkdir()
    refused(clustercheck("explain", str(tmp_path / "logs")), "logs")


# ---- diff: reports that checked nothing compare to no "not worse" -------------------------------------------
def report(findings, nodes=("a",)):
    return json.dumps({"schema": 1, "command": "preflight", "nodes": list(nodes), "findings": findings})


NOTHING = {"check": "run.nothing", "status": "UNKNOWN", "summary": "nothing was checked: every stage was skipped",
           "stage": "run"}
A_NOTE = {"check": "explain.skipped", "status": "OK", "summary": "a file skipped", "checked": False, "stage": "env"}
PASSED = {"check": "shm", "status": "OK", "summary": "/dev/shm is at least 1 GiB", "stage": "env"}


@pytest.mark.parametrize("old, new", [
    ([], []), ([A_NOTE], [A_NOTE]), ([NOTHING], [NOTHING]), ([PASSED], []), ([PASSED], [NOTHING]),
    ([], [PASSED]),
], ids=["no-findings", "notes-only", "both-checked-nothing", "new-checked-nothing", "new-could-not-check",
        "old-checked-nothing"])
def test_diff_of_reports_that_checked_nothing_is_unknown(files, old, new):
    proc = clustercheck("diff", files("old.json", report(old)), files("new.json", report(new)))
    assert proc.returncode in (EXIT_UNKNOWN, EXIT_FAIL), proc.stdout     # NOTHING new in the new report is worse
    assert "not worse" not in proc.stdout and "checked nothing" in proc.stdout, proc.stdout
    if new != [NOTHING]:
        assert proc.returncode == EXIT_UNKNOWN and "Verdict: UNKNOWN: nothing was compared" in proc.stdout


def test_diff_of_reports_with_no_nodes_and_no_findings_is_unknown(files):
    empty = files("r.json", report([], nodes=()))
    proc = clustercheck("diff", empty, empty)
    assert proc.returncode == EXIT_UNKNOWN and "nothing was compared" in proc.stdout, proc.stdout


def test_diff_of_reports_that_checked_something_compares(files):
    checked = files("r.json", report([PASSED]))
    proc = clustercheck("diff", checked, checked)
    assert proc.returncode == EXIT_OK and "not worse (compared: nodes, versions and findings)" in proc.stdout


def test_preflight_against_a_baseline_keeps_its_own_fail_over_the_baselines_unknown(files, tmp_path):
    """Exit codes are not Nagios's order (FAIL 2 < UNKNOWN 3): a run that failed stays NOT READY (2) beside a
    baseline it could compare nothing with."""
    baseline = files("base.json", report([], nodes=("deadA",)))
    proc = clustercheck("preflight", files("nodes.txt", "deadA\n"), "-F", files("cfg", DEAD), "--baseline", baseline,
                        "--reports-dir", str(tmp_path), "--json")
    doc = doc_of(proc)
    assert proc.returncode == EXIT_FAIL == doc["exit_code"], (proc.returncode, doc["verdict"])
    assert doc["verdict"].startswith("NOT READY"), doc["verdict"]


# ---- injob: a rank that could not check never trains on a pass --------------------------------------------------
def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def injob(args, rank, world_size, port, timeout=120):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
               RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port))
    env.pop("CLUSTERCHECK_TEST_KILL_AT", None)
    return subprocess.run([sys.executable, "-m", "clustercheck.injob", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


@pytest.mark.parametrize("policy", ["stop", "warn"])
def test_injob_with_no_rendezvous_to_reach_is_unknown_never_ready(tmp_path, policy):
    """Rank 1 of 2 whose rank 0 never came (nobody listens at MASTER_ADDR:MASTER_PORT)."""
    script = tmp_path / "train.py"
    script.write_text("print('TRAINED')\n")
    proc = injob(["--budget", "5", "--on-fail", policy, "--reports-dir", str(tmp_path), "--", str(script)], 1, 2,
                 free_port())
    lines = [line for line in proc.stderr.splitlines() if line.startswith("clustercheck injob: ")]
    assert lines and "UNKNOWN" in lines[0] and not READY.search(proc.stderr), proc.stderr[-2000:]
    if policy == "stop":
        assert proc.returncode == EXIT_FAIL and "TRAINED" not in proc.stdout, proc.stderr[-2000:]
    else:                                  # --on-fail warn trains on, the verdict said as it is
        assert proc.returncode == EXIT_OK and "TRAINED" in proc.stdout, proc.stderr[-2000:]


def test_injob_of_one_rank_here_is_ready_only_with_checks_that_passed(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('TRAINED')\n")
    proc = injob(["--budget", "40", "--reports-dir", str(tmp_path), "--", str(script)], 0, 1, free_port(), 240)
    said = re.findall(r"^clustercheck injob: ((?:NOT READY|READY|UNKNOWN).*)$", proc.stderr, re.M)
    assert said, proc.stderr[-3000:]
    if READY.match(said[-1]):
        assert proc.returncode == EXIT_OK and "TRAINED" in proc.stdout and passed_count(said[-1]) > 0, said
        [doc] = [json.loads(p.read_text()) for p in tmp_path.iterdir() if p.suffix == ".json"]
        assert [f for f in doc["findings"] if f["status"] == "OK" and f.get("checked", True)], doc["findings"]
    else:
        assert proc.returncode == EXIT_FAIL and "TRAINED" not in proc.stdout, proc.stderr[-3000:]
