"""Hostile and odd input, each with its clear answer: bad input is exit 64 naming the file, line or option
and the value, before any node is contacted; what could not be checked is UNKNOWN (exit 3), never a pass;
a failure of clustercheck itself is exit 3 with one line and the traceback in a file. This file grows with
every edge found (issue 26's cases first), and fuzzes the readers of every file a user hands us."""

import json
import os
import re
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clustercheck.core.errors import EXIT_BAD_INPUT, EXIT_UNKNOWN, InputError
from clustercheck.core.inventory import host_name_problem, parse_inventory
from clustercheck.core.thresholds import parse_config
from clustercheck.onnode import dsconfig
from tests.conftest import clustercheck

# ssh_config blocks whose nodes refuse at once on loopback (port 9 is closed): nothing leaves this host.
DEAD = "Host dead*\n  HostName 127.0.0.1\n  Port 9\n"


@pytest.fixture
def files(tmp_path):
    def write(name, content):
        path = tmp_path / name
        (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
        return str(path)
    return write


def refused(proc, *words):
    """Exit 64, one `Error:` line naming every word, no traceback."""
    assert proc.returncode == EXIT_BAD_INPUT, (proc.returncode, proc.stdout[-500:], proc.stderr[-1500:])
    assert "Traceback" not in proc.stderr and "Error" in proc.stderr, proc.stderr
    for word in words:
        assert word in proc.stderr, (word, proc.stderr)


# ---- files a user hands us --------------------------------------------------------------------------
def test_a_binary_thresholds_file_is_bad_input_naming_it(files):
    path = files("bin.toml", b"garbage\x00\xff\xfe")
    refused(clustercheck("env", "--config", path), path, "not a text file")


@pytest.mark.parametrize("body, words", [
    ('[env]\nshm_min_gib = nan\n', [":2:", "finite"]),
    ('[bench]\nexpected_busbw = inf\n', [":2:", "finite"]),
    ('[env]\nrequired = ["torch", "flash_attn>="]\n', [":2:", "flash_attn>=", "not a package requirement"]),
    ('[env]\nwarn_packages = ["torch<3"]\n', [":2:", "torch<3", "package names, not version ranges"]),
    ('[env]\ngpu_held_fail_share = 1.5\n', [":2:", "gpu_held_fail_share", "at most 1"]),
])
def test_thresholds_that_cannot_mean_anything_are_refused_with_their_line(files, body, words):
    refused(clustercheck("env", "--config", files("t.toml", body)), *words)


@pytest.mark.parametrize("config, words", [
    ({"bf16": "auto"}, ["bf16 must be a JSON object"]),
    ({"zero_optimization": [1]}, ["zero_optimization must be a JSON object"]),
    ({"zero_optimization": {"stage": True}}, ["zero_optimization.stage", "not true"]),
    ({"zero_optimization": {"offload_param": "cpu"}}, ["offload_param must be a JSON object"]),
])
def test_deepspeed_configs_of_the_wrong_shape_are_bad_input(files, config, words):
    path = files("ds.json", json.dumps(config))
    for command in ("smoke", "preflight"):
        refused(clustercheck(command, "--deepspeed", path), path, *words)


def test_a_deepspeed_config_with_nan_or_binary_bytes_is_bad_input(files):
    refused(clustercheck("smoke", "--deepspeed", files("nan.json", '{"optimizer": {"params": {"lr": NaN}}}')),
            "NaN")
    refused(clustercheck("smoke", "--deepspeed", files("bin.json", b"\x89PNG\r\n\x1a\n\x00\xff")), "not JSON")


def test_an_ssh_config_port_that_is_no_number_is_bad_input(files):
    nodes, config = files("nodes.txt", "deadA\n"), files("cfg", "Host *\n  Port abc\n")
    refused(clustercheck("run", nodes, "-F", config, "--", "true"), config, "Port", "'abc'")


def test_a_binary_known_hosts_file_is_bad_input_naming_it(files):
    nodes, config = files("nodes.txt", "deadA\n"), files("cfg", DEAD)
    known = files("known_hosts", os.urandom(64) + b"\xff\xfe")
    refused(clustercheck("run", nodes, "-F", config, "--known-hosts", known, "--", "true"), known,
            "not a known_hosts file")


@pytest.mark.parametrize("config, loop", [
    ("Host *\n  ProxyJump bastion\n  HostName 127.0.0.1\n  Port 9\n", "deadA -> bastion -> bastion"),
    ("Host b1\n  ProxyJump b2\nHost b2\n  ProxyJump b1\nHost dead*\n  ProxyJump b1\n", "deadA -> b1 -> b2 -> b1"),
    ("Host dead*\n  HostName 127.0.0.1\n  ProxyCommand ssh -W %h:%p deadA\n", "deadA -> deadA"),
])
def test_a_jump_host_loop_is_refused_by_name_at_once(files, config, loop):
    """`Host *` with `ProxyJump bastion` made the bastion its own jump host: it hung for ever."""
    started = time.monotonic()
    proc = clustercheck("run", files("nodes.txt", "deadA\n"), "-F", files("cfg", config), "--timeout", "5",
                        "--", "true", timeout=60)
    refused(proc, "loops back", loop)
    assert time.monotonic() - started < 30


def test_a_match_pattern_too_large_to_compile_is_bad_input():
    refused(clustercheck("stacks", "--match", "(" * 990), "--match", "too large")
    refused(clustercheck("stacks", "--match", "x" * 2000), "--match", "longer than")


# ---- numbers ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, flag", [
    (("env", "--timeout", "nan"), "--timeout"),
    (("env", "--timeout", "inf"), "--timeout"),
    (("bench", "--timeout", "1e300"), "--timeout"),
    (("smoke", "--steps", "99999999999"), "--steps"),
    (("plan", "--params", "7B", "--gpus-per-node", "8", "--gpu-mem", "inf"), "--gpu-mem"),
    (("preflight", "--attempt-timeout", "nan"), "--attempt-timeout"),
])
def test_numbers_that_are_not_finite_or_in_range_are_refused(args, flag):
    refused(clustercheck(*args), flag)


@pytest.mark.parametrize("params", ["1e400", "1e30", "0", "1.2.3", "-5B", "nan"])
def test_plan_refuses_parameter_counts_it_cannot_plan(params):
    refused(clustercheck("plan", "--params", params, "--gpus-per-node", "8", "--gpu-mem", "80", timeout=30),
            "--params", params)


def test_a_plan_that_could_not_judge_a_row_exits_3_as_its_verdict_says():
    proc = clustercheck("plan", "--params", "7B", "--gpus-per-node", "8", "--gpu-mem", "80")
    assert "Verdict: UNKNOWN" in proc.stdout and proc.returncode == EXIT_UNKNOWN, proc.stdout[-600:]
    proc = clustercheck("plan", "--params", "7B", "--gpus-per-node", "8", "--gpu-mem", "80", "--cpu-mem", "1024")
    assert "Verdict: UNKNOWN" not in proc.stdout and proc.returncode == 0, proc.stdout[-600:]


# ---- nothing checked is never a pass -----------------------------------------------------------------
@pytest.mark.parametrize("command", ["env", "net"])
def test_with_no_node_reachable_no_rule_is_claimed_to_hold(files, command):
    proc = clustercheck(command, files("nodes.txt", "deadA\ndeadB\n"), "-F", files("cfg", DEAD), "-v", "--json")
    doc = json.loads(proc.stdout)
    statuses = {f["check"]: f["status"] for f in doc["findings"]}
    assert "OK" not in statuses.values(), doc["findings"]
    assert statuses["run.no_node"] == "UNKNOWN" and proc.returncode >= 2


def test_preflight_with_every_stage_skipped_is_unknown_not_ready(tmp_path):
    from clustercheck.preflight.sequence import STAGE_NAMES     # every stage, however many there are
    proc = clustercheck("preflight", "--skip", ",".join(STAGE_NAMES), "--reports-dir", str(tmp_path))
    assert proc.returncode == EXIT_UNKNOWN and "nothing was checked" in proc.stdout, proc.stdout
    assert "READY (" not in proc.stdout


def test_plan_of_nodes_that_do_not_answer_is_unknown(files):
    proc = clustercheck("plan", files("nodes.txt", "deadA\n"), "-F", files("cfg", DEAD), "--params", "7B")
    assert proc.returncode == EXIT_UNKNOWN and "no node answered" in proc.stderr, proc.stderr


# ---- the inventory ---------------------------------------------------------------------------------
def test_two_nodes_on_one_host_with_different_ports_stay_two_nodes():
    nodes = parse_inventory("h:2222\nh:2223 slots=2\n", "nodes.txt")
    assert [(n.name, n.address, n.port) for n in nodes] == [("h:2222", "h", 2222), ("h:2223", "h", 2223)]


# ---- a failure of clustercheck itself ------------------------------------------------------------------
def test_a_crash_is_exit_3_with_one_line_and_the_traceback_in_a_file(monkeypatch, capfd, tmp_path):
    import signal

    from clustercheck import cli
    from clustercheck.planner import plan

    def broken(options):
        raise RuntimeError("a bug")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.setattr(plan, "plan_text", broken)
    monkeypatch.setattr("clustercheck.commands.plan.plan_text", broken)
    sigint = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(SystemExit) as ended:
            cli.main(["plan", "--params", "7B", "--gpus-per-node", "8", "--gpu-mem", "80"])
    finally:
        signal.signal(signal.SIGINT, sigint)
    assert ended.value.code == EXIT_UNKNOWN
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "RuntimeError: a bug" in err[0] and "Traceback" not in err[0], err
    [path] = re.findall(r"the traceback is in (\S+)\.", err[0])
    assert path.startswith(str(tmp_path)) and "raise RuntimeError" in open(path).read()
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"


@pytest.mark.parametrize("line, words", [
    ("gpu01:", ["nodes.txt:2", "empty port", "'gpu01:'"]),
    ("a" * 100_000, ["nodes.txt:2", "100,000 characters"]),
    ("node..1", ["nodes.txt:2", "empty label", "'node..1'"]),
    ("n" * 64 + ".cluster", ["nodes.txt:2", "at most 63 characters"]),
    ("-gpu01", ["nodes.txt:2", "cannot start or end with '-'"]),
])
def test_a_nodes_file_line_that_is_no_host_is_refused_before_any_node(files, line, words):
    """Issue 35: "host:" and a 100,000-character line were taken as host names and tried over SSH."""
    path = files("nodes.txt", "gpu02\n" + line + "\n")
    started = time.monotonic()
    refused(clustercheck("env", path), *words)
    assert time.monotonic() - started < 20


def test_a_model_config_that_is_binary_is_bad_input_naming_the_file(files, tmp_path):
    """Issue 35: a --model directory whose config.json is binary was an internal error (exit 3, traceback file)."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_bytes(b'{"hidden_size": \x00\x9f\x92\x96}')
    for command in (["plan", "--model", str(model)], ["storage", "--model", str(model)]):
        refused(clustercheck(*command), str(model / "config.json"), "not a text file")
    (model / "config.json").write_bytes(b'{"hidden_size": "\xff\xfe"}')
    refused(clustercheck("plan", "--model", str(model)), "not UTF-8")


@pytest.mark.parametrize("args, words", [
    (["bench", "--stall-window", "90"], ["--stall-window", "--op-timeout (60 s)", "'90'"]),
    (["bench", "--stall-window", "50", "--op-timeout", "120", "--timeout", "40"], ["--timeout (40 s)"]),
    (["smoke", "--stall-window", "700"], ["--stall-window", "--timeout (600 s)", "'700'"]),
])
def test_a_stall_window_that_could_never_be_seen_is_refused(args, words):
    """Issue 35: --stall-window longer than --op-timeout was accepted: the stall could never be seen."""
    refused(clustercheck(*args), *words)


def test_a_stall_window_left_to_its_default_fits_under_a_short_deadline():
    from clustercheck.stages.bench.options import BenchOptions
    from clustercheck.stages.smoke.options import SmokeOptions
    assert (BenchOptions().stall_s, BenchOptions(op_timeout_s=30).stall_s) == (45.0, 22.5)
    assert (SmokeOptions().stall_s, SmokeOptions(timeout_s=100).stall_s) == (120.0, 75.0)


# ---- fuzzing the readers: an answer or InputError / ConfigError, never anything else ------------------
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LINE = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=60)
INVENTORY_WORDS = st.sampled_from(["node[01-03]", "a@b:2222", "h:8", "slots=4", "slots=0", "port=70000", "x=1",
                                   "python=/p", "ifname=eth0", "gpu[9-1]", "user@", ":22", "max_slots=2", "#c",
                                   "\ufeffnode1", "n[1-100000000]", "127.0.0.1", "localhost", "\t", "="])


@FUZZ
@given(st.lists(st.one_of(LINE, st.lists(INVENTORY_WORDS, max_size=4).map(" ".join)), max_size=8))
def test_the_inventory_reader_answers_or_says_what_is_wrong(lines):
    try:
        nodes = parse_inventory("\n".join(lines), "fuzz.txt")
    except InputError as exc:
        assert str(exc).startswith("fuzz.txt")
        return
    assert nodes and len({n.name for n in nodes}) == len(nodes)
    assert all(host_name_problem(n.address) == "" for n in nodes), [n.address for n in nodes]


TOML = st.recursive(st.one_of(st.integers(-2**70, 2**70), st.floats(), st.text(max_size=8), st.booleans()),
                    lambda inner: st.lists(inner, max_size=3), max_leaves=6)


@FUZZ
@given(st.dictionaries(st.sampled_from(["env", "bench", "other"]),
                       st.dictionaries(st.sampled_from(["shm_min_gib", "required", "clock_warn_s", "clock_fail_s",
                                                        "expected_busbw", "expected_fraction", "nofile_min", "x"]),
                                       TOML, max_size=4), max_size=3), st.text(max_size=30))
def test_the_thresholds_reader_answers_or_says_what_is_wrong(tables, junk):
    def toml_value(value):
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, float):
            return "nan" if value != value else ("inf" if value == float("inf") else
                                                 "-inf" if value == float("-inf") else repr(value))
        if isinstance(value, list):
            return "[" + ", ".join(toml_value(v) for v in value) + "]"
        return json.dumps(value)
    text = "".join(f"[{name}]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in table.items())
                   for name, table in tables.items()) + junk
    try:
        config = parse_config(text, "fuzz.toml")
    except InputError as exc:
        assert str(exc).startswith("fuzz.toml")
        return
    assert config.env.clock_fail_s >= config.env.clock_warn_s


JSON = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=6),
                              st.just("auto")),
                    lambda inner: st.one_of(st.lists(inner, max_size=3),
                                            st.dictionaries(st.sampled_from(
                                                ["stage", "enabled", "params", "lr", "device", "offload_param",
                                                 "offload_optimizer", "zero_optimization", "bf16", "fp16",
                                                 "optimizer", "scheduler", "train_micro_batch_size_per_gpu"]),
                                                inner, max_size=4)), max_leaves=10)


@FUZZ
@given(JSON)
def test_the_deepspeed_config_reader_answers_or_names_the_key(tmp_path_factory, value):
    path = tmp_path_factory.mktemp("ds") / "ds.json"
    path.write_text(json.dumps(value))
    try:
        config = dsconfig.read(str(path))
        dsconfig.mode_of(config)
        dsconfig.resolve(config, world=None, micro_batch=8, grad_accum=1, clip=1.0, lr=3e-3, steps=10, hidden=64,
                         cuda=False, bf16_supported=False)
    except dsconfig.ConfigError:
        return


# ---- diff: comparing nothing is no "not worse" ---------------------------------------------------------
def test_diff_that_compared_nothing_is_unknown(files):
    log = os.path.join(os.path.dirname(__file__), "data", "nccl-tests", "all_reduce_perf_multinode.txt")
    report = files("r.json", json.dumps({"schema": 1, "command": "preflight", "nodes": ["a"], "findings": []}))
    proc = clustercheck("diff", log, report)
    assert proc.returncode == EXIT_UNKNOWN and "nothing was compared" in proc.stdout, proc.stdout
    assert "not compared: bandwidth: the new report measured none" in proc.stdout, proc.stdout
    proc = clustercheck("diff", report, report)     # reports that checked nothing: nothing to call "not worse"
    assert proc.returncode == EXIT_UNKNOWN and "nothing was compared" in proc.stdout, proc.stdout
    passed = {"check": "shm", "status": "OK", "summary": "/dev/shm is at least 1 GiB", "stage": "env"}
    report = files("p.json", json.dumps({"schema": 1, "command": "preflight", "nodes": ["a"], "findings": [passed]}))
    proc = clustercheck("diff", report, report)
    assert proc.returncode == 0 and "compared: nodes, versions and findings" in proc.stdout, proc.stdout
    refused(clustercheck("diff", report, report, "--threshold", "nan"), "--threshold")


# ---- what a run needs at its end is checked at its start ---------------------------------------------
def test_an_unusable_report_name_or_directory_is_refused_before_any_node(files, tmp_path):
    nodes, config = files("nodes.txt", "deadA\n"), files("cfg", DEAD)
    refused(clustercheck("preflight", nodes, "-F", config, "--name", "a/b"), "--name", "a/b")
    refused(clustercheck("preflight", nodes, "-F", config, "--reports-dir", "/proc/none/x"), "--reports-dir")
    refused(clustercheck("env", nodes, "-F", config, "--report", "--reports-dir", "/proc/none/x"), "--reports-dir")
    baseline = files("base.json", json.dumps({"command": "preflight", "nodes": "abc", "findings": []}))
    refused(clustercheck("preflight", nodes, "-F", config, "--baseline", baseline), baseline, "nodes")


@pytest.mark.parametrize("args, flag", [
    (("--time", "abc"), "--time"),
    (("--account", "ops\n#SBATCH --uid=0"), "--account"),
    (("--partition", "gpu debug"), "--partition"),
    (("--reports-dir", "my reports"), "--reports-dir"),
])
def test_sbatch_refuses_what_slurm_would_misread(tmp_path, args, flag):
    refused(clustercheck("sbatch", "--nodes", "2", *args, cwd=tmp_path), flag)


def test_sbatch_takes_slurm_time_formats(tmp_path):
    for limit in ("30", "1:00:00", "2-00:00:00", "UNLIMITED"):
        proc = clustercheck("sbatch", "--nodes", "2", "--time", limit, "--partition", "gpu,debug", cwd=tmp_path)
        assert proc.returncode == 0 and f"#SBATCH --time={limit}\n" in proc.stdout, proc.stderr


def test_run_says_when_it_cut_a_nodes_output():
    proc = clustercheck("run", "--", "head -c 5000000 /dev/zero | tr '\\0' x; echo")
    assert "[clustercheck: output cut: the first 4,194,304 bytes kept, 805,697 more not kept]" in proc.stdout
    assert "output cut (only its first 4 MiB kept) on localhost" in proc.stdout
