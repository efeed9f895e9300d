"""The check inside the job (issue 45), on this host: the launcher's variables (torchrun, a PyTorchJob's, srun's),
the wrapper's command line, the arrival judge; then real torchrun jobs on Gloo: the check passes and the same
processes run the user's script with its arguments untouched, the library call before and after the script's
own init_process_group, a rank killed during the check named by the others within the budget, bad input exit 64
on every rank. The 3-node sandbox runs are tests/test_sandbox_injob.py."""

import json
import os
import re
import socket
import subprocess
import sys

import pytest

from clustercheck.core.errors import EXIT_BAD_INPUT, EXIT_OK, InputError
from clustercheck.core.result import Status
from clustercheck.injob.launcher import read_job_env
from clustercheck.injob.options import parse_wrapper
from clustercheck.injob.rules import arrival

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data", "injob")


# ---- the launcher's variables ----------------------------------------------------------------------------
def test_torchrun_variables_are_read():
    job = read_job_env({"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "MASTER_ADDR": "n1",
                        "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "x"}, host="n3")
    assert (job.rank, job.world_size, job.local_rank, job.master_addr, job.master_port) == (5, 8, 1, "n1", 29500)
    assert job.launcher == "torchrun" and job.host == "n3" and not job.node_leader


def test_a_pytorchjob_pod_under_torchrun_reads_torchruns_ranks_not_the_pods():
    """The training operator sets MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK (the pod's index) and the PET_* that
    torchrun takes as arguments; torchrun then overwrites RANK / WORLD_SIZE / LOCAL_RANK for each worker."""
    pod = {"MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456", "PET_NNODES": "2", "PET_NPROC_PER_NODE": "4",
           "PET_NODE_RANK": "1", "PET_MASTER_ADDR": "job-master-0", "PET_MASTER_PORT": "23456"}
    worker = dict(pod, RANK="6", WORLD_SIZE="8", LOCAL_RANK="2", TORCHELASTIC_RUN_ID="none")
    job = read_job_env(worker, host="job-worker-0")
    assert (job.rank, job.world_size, job.local_rank, job.master_addr, job.master_port) == \
           (6, 8, 2, "job-master-0", 23456)
    assert job.launcher == "pytorchjob"


def test_a_pytorchjob_pod_with_one_process_uses_the_pods_rank_and_pet_master_fills_in():
    pod = {"WORLD_SIZE": "3", "RANK": "2", "PET_NPROC_PER_NODE": "1", "PET_MASTER_ADDR": "job-master-0",
           "PET_MASTER_PORT": "23456"}
    job = read_job_env(pod, host="job-worker-1")
    assert (job.rank, job.world_size, job.local_rank, job.master_addr, job.master_port) == \
           (2, 3, 0, "job-master-0", 23456)


def test_a_pod_asking_for_several_processes_but_not_started_by_torchrun_is_bad_input():
    pod = {"WORLD_SIZE": "8", "RANK": "1", "PET_NPROC_PER_NODE": "4", "MASTER_ADDR": "m", "MASTER_PORT": "1"}
    with pytest.raises(InputError, match="PET_NPROC_PER_NODE.*torchrun"):
        read_job_env(pod)


def test_srun_starting_the_ranks_itself():
    job = read_job_env({"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "MASTER_ADDR": "node01",
                        "MASTER_PORT": "29500"}, host="node02")
    assert (job.rank, job.world_size, job.local_rank, job.launcher) == (3, 4, 1, "srun")


@pytest.mark.parametrize("env, message", [
    ({}, "not started by a launcher: RANK and WORLD_SIZE not set"),
    ({"RANK": "0"}, "WORLD_SIZE not set"),
    ({"RANK": "x", "WORLD_SIZE": "2", "MASTER_ADDR": "a", "MASTER_PORT": "1"}, "RANK is not a whole number"),
    ({"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "a", "MASTER_PORT": "1"}, "rank 2 is not below the world size 2"),
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "1"}, "MASTER_ADDR is not set"),
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "a", "MASTER_PORT": "99999"}, "MASTER_PORT is not a port"),
])
def test_bad_launcher_variables_are_named(env, message):
    with pytest.raises(InputError, match=message):
        read_job_env(env, host="h")


# ---- the wrapper's command line ----------------------------------------------------------------------------
def test_the_scripts_arguments_pass_through_untouched():
    options, script, args = parse_wrapper(["--budget", "30", "--on-fail=warn", "--", "train.py", "--budget", "7",
                                           "--", "a b"])
    assert (options.budget_s, options.on_fail) == (30.0, "warn")
    assert script == "train.py" and args == ["--budget", "7", "--", "a b"]
    # DeepSpeed's launcher puts --local_rank=N first (torch.distributed.launch --local-rank): the script's
    assert parse_wrapper(["--local_rank=1", "--budget", "9", "--", "t.py", "--x"])[1:] == ("t.py", ["--local_rank=1",
                                                                                                    "--x"])
    assert parse_wrapper(["--local-rank", "0", "t.py"])[1:] == ("t.py", ["--local-rank", "0"])
    options, script, args = parse_wrapper(["train.py", "--lr", "3e-4"])
    assert options.budget_s == 60.0 and options.on_fail == "stop" and args == ["--lr", "3e-4"]


@pytest.mark.parametrize("argv, message", [
    (["--budget", "0", "--", "t.py"], "--budget must be a number of seconds above 0: '0'"),
    (["--budget", "-5", "--", "t.py"], "--budget must be a number of seconds above 0"),
    (["--budget", "nan", "--", "t.py"], "--budget must be a number of seconds above 0"),
    (["--budget", "soon", "--", "t.py"], "--budget must be a number of seconds above 0: 'soon'"),
    (["--on-fail", "retry", "--", "t.py"], "--on-fail takes stop or warn: 'retry'"),
    (["--bugdet", "3", "--", "t.py"], "unknown option --bugdet"),
    (["--pushgateway", "gateway:9091", "--", "t.py"], "not a Pushgateway URL: write http://HOST:PORT"),
    (["--budget"], "--budget needs a value"),
    (["--budget", "5"], "no training script given"),
])
def test_bad_wrapper_options_are_named(argv, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(")):
        parse_wrapper(argv)


# ---- who arrived ---------------------------------------------------------------------------------------------
def who(rank, host):
    return {"rank": rank, "host": host, "local_rank": 0, "pid": 100 + rank}


def test_a_rank_that_stopped_answering_is_named_with_its_host_and_phase():
    found = arrival(3, {0: who(0, "n1"), 1: who(1, "n2"), 2: who(2, "n3")}, {0: {}, 1: {}},
                    {2: "bench"}, 30)
    [lost] = found
    assert lost.status is Status.FAIL and lost.nodes == ["n3"]
    assert "rank 2 on n3 stopped answering" in lost.summary and "last seen entering bench" in lost.evidence[0]


def test_a_rank_that_never_arrived_is_named_and_everyone_answering_is_ok():
    [never] = arrival(3, {0: who(0, "n1"), 1: who(1, "n2")}, {0: {}, 1: {}}, {}, 30)
    assert never.status is Status.FAIL and "rank 2 of 3 never arrived" in never.summary
    [ok] = arrival(2, {0: who(0, "n1"), 1: who(1, "n2")}, {0: {}, 1: {}}, {}, 30)
    assert ok.status is Status.OK and "all 2 ranks on 2 nodes" in ok.summary


# ---- real jobs on this host (Gloo over loopback) -------------------------------------------------------------
def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def job_env(extra=None):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    env.pop("CLUSTERCHECK_TEST_KILL_AT", None)
    env.update(extra or {})
    return env


def torchrun(nproc, args, env=None, nnodes=1, node_rank=0, port=None):
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nnodes), "--node-rank", str(node_rank),
            "--nproc-per-node", str(nproc), "--master-addr", "127.0.0.1", "--master-port", str(port or free_port()),
            *args]


def run(argv, env=None, timeout=240):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=job_env(env), cwd=ROOT)


def trained(out):
    """Each rank's line (two ranks' lines can come interleaved on one launcher's stdout)."""
    return sorted(re.findall(r"TRAINED rank=.*?(?=TRAINED|\n|$)", out))


def test_the_wrapper_checks_then_the_same_processes_run_the_script_with_its_arguments(tmp_path):
    reports = tmp_path / "reports"
    proc = run(torchrun(3, ["-m", "clustercheck.injob", "--budget", "40", "--reports-dir", str(reports), "--",
                            os.path.join(DATA, "train_stub.py"), "--lr", "3e-4", "--", "a b"]))
    assert proc.returncode == EXIT_OK, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert trained(proc.stdout) == [f"TRAINED rank={r} sum=3 args=['--lr', '3e-4', '--', 'a b'] name=__main__"
                                    for r in range(3)]
    assert proc.stderr.count("clustercheck injob: READY") == 1       # rank 0's line; nobody stops
    [report] = [p for p in reports.iterdir() if p.suffix == ".json"]
    doc = json.loads(report.read_text())
    assert doc["exit_code"] == EXIT_OK
    checks = {f["check"] for f in doc["findings"]}
    # env's, device's and bench's own judges, fed by the ranks' documents
    assert {"injob.answered", "required.torch", "same.torch CUDA build", "hostname.unique", "device.measured",
            "bench.job", "bench.data", "bench.bandwidth.all_reduce"} <= checks, checks


@pytest.mark.parametrize("launcher", ["deepspeed", "accelerate"])
def test_deepspeeds_and_accelerates_launchers_as_the_guide_writes_them(tmp_path, launcher):
    """docs/guides/injob.md's lines on one node: DeepSpeed's launcher (--module; its --local_rank=N goes on to the
    script) and accelerate launch (-m), two ranks each on this CPU host."""
    port, script = str(free_port()), os.path.join(DATA, "train_stub.py")
    wrapper = ["clustercheck.injob", "--budget", "30", "--reports-dir", str(tmp_path), "--", script, "--x"]
    argv = ({"deepspeed": ["deepspeed", "--num_gpus", "2", "--master_port", port, "--module"],
             "accelerate": ["accelerate", "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
                            "--main_process_port", port, "-m"]}[launcher]) + wrapper
    proc = run(argv)
    assert proc.returncode == EXIT_OK, proc.stdout[-2000:] + proc.stderr[-3000:]
    passed_on = {"deepspeed": "'--local_rank={r}', ", "accelerate": ""}[launcher]
    assert trained(proc.stdout) == [f"TRAINED rank={r} sum=2 args=[{passed_on.format(r=r)}'--x'] name=__main__"
                                    for r in range(2)]
    assert [p.suffix for p in tmp_path.iterdir()].count(".json") == 1


def test_the_verdict_and_figures_reach_a_real_pushgateway(tmp_path):
    from tests.prometheus_servers import servers_or_skip
    servers = servers_or_skip(tmp_path / "prometheus")
    try:
        proc = run(torchrun(2, ["-m", "clustercheck.injob", "--budget", "30", "--reports-dir", str(tmp_path),
                                "--report-name", "pushed", "--pushgateway", servers.gateway, "--",
                                os.path.join(DATA, "train_stub.py")]))
        assert proc.returncode == EXIT_OK, proc.stderr[-3000:]
        node = socket.gethostname()
        answered = servers.query('clustercheck_check_status{job="clustercheck",cluster="pushed",check="injob.answered"}')
        assert [r["value"][1] for r in answered] == ["0"], answered
        flops = servers.query(f'clustercheck_device_flops{{cluster="pushed",node="{node}"}}')
        assert flops and all(float(r["value"][1]) > 0 for r in flops), flops
        busbw = servers.query('clustercheck_bench_busbw_bytes_per_second{cluster="pushed"}')
        assert busbw and all(float(r["value"][1]) > 0 for r in busbw)
    finally:
        servers.stop()


def test_a_checkpoint_directory_that_does_not_exist_stops_the_job_naming_the_node(tmp_path):
    """--checkpoint-dir: storage's probe and judges inside the job; a directory missing on the node is storage's own
    finding (errno and fix), and every rank stops before the script with exit 2."""
    missing = tmp_path / "no-such-dir"
    proc = run(torchrun(2, ["-m", "clustercheck.injob", "--budget", "30", "--reports-dir", str(tmp_path),
                            "--checkpoint-dir", str(missing), "--", os.path.join(DATA, "train_stub.py")]))
    assert proc.returncode != 0 and proc.stderr.count("exitcode  : 2") >= 1, proc.stderr[-3000:]
    assert f"cannot write {missing}: ENOENT" in proc.stderr and "TRAINED" not in proc.stdout
    [report] = [p for p in tmp_path.iterdir() if p.suffix == ".json"]
    [write] = [f for f in json.loads(report.read_text())["findings"] if f["check"] == "storage.write"]
    assert write["status"] == "FAIL" and write["nodes"] == [socket.gethostname()]


@pytest.mark.parametrize("when", ["before", "after"])
def test_the_library_call_before_and_after_the_scripts_own_init(tmp_path, when):
    proc = run(torchrun(2, [os.path.join(DATA, "lib_train.py"), "--steps", "1"]),
               {"CHECK_WHEN": when, "CHECK_REPORTS": str(tmp_path)})
    assert proc.returncode == EXIT_OK, proc.stdout[-2000:] + proc.stderr[-3000:]
    # READY, or READY with a warning this shared host's load can cause (a sweep cut short by its budget)
    assert trained(proc.stdout) in ([f"TRAINED rank={r} sum=2 verdict={v} args=['--steps', '1']" for r in range(2)]
                                    for v in ("OK", "WARN")), proc.stdout[-2000:] + proc.stderr[-3000:]


@pytest.mark.parametrize("victim, said", [
    (2, "NOT READY (4 failed, {passed} passed): rank 2 on n2 stopped answering during the check"),  # 3 "nodes" of 1 host
    (0, "UNKNOWN: NOT EVERYTHING COULD BE CHECKED: rank {me} on n{me} lost the rendezvous"),
])
def test_a_rank_killed_during_the_check_is_named_by_the_others_who_end_within_the_budget(tmp_path, victim, said):
    """Three torchruns (three agents, as on three nodes): one rank kills itself as the bandwidth measurement
    starts; the others end within the budget, exit 2 before the script's first step, and say why: rank 0 names
    the lost rank with its host; when rank 0 itself is lost, with the rendezvous its node hosted, the others say
    they could not check (never a pass, never a hang)."""
    port, budget = free_port(), 20
    args = ["-m", "clustercheck.injob", "--budget", str(budget), "--reports-dir", str(tmp_path), "--",
            os.path.join(DATA, "train_stub.py")]
    procs = [subprocess.Popen(torchrun(1, args, nnodes=3, node_rank=i, port=port), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=ROOT,
                              env=job_env({"CLUSTERCHECK_NODE": f"n{i}",
                                           "CLUSTERCHECK_TEST_KILL_AT": f"bench:{victim}"}))
             for i in range(3)]
    outs = [p.communicate(timeout=budget + 120) for p in procs]
    for i in {0, 1, 2} - {victim}:
        out, err = outs[i]
        assert procs[i].returncode != 0 and "exitcode  : 2" in err, err[-3000:]
        # how many checks passed is the judges' business (a new judge adds one): the verdict and who is named
        assert re.search(re.escape(said.format(me=i, passed="PASSED")).replace("PASSED", r"\d+"), err), err[-3000:]
        assert "TRAINED" not in out
    assert "SIGKILL" in outs[victim][1]
    if victim:
        [report] = [p for p in tmp_path.iterdir() if p.suffix == ".json"]
        lost = [f for f in json.loads(report.read_text())["findings"] if f["check"] == "injob.answered"]
        assert lost[0]["status"] == "FAIL" and lost[0]["nodes"] == [f"n{victim}"]
        assert f"rank {victim} on n{victim} stopped answering during the check" in lost[0]["summary"]


@pytest.mark.parametrize("args, message", [
    (["--budget", "0", "--", "x.py"], "--budget must be a number of seconds above 0: '0'"),
    (["--bogus", "--", "x.py"], "unknown option --bogus"),
    (["--", "no-such-script.py"], "the training script does not exist: 'no-such-script.py'"),
])
def test_bad_input_is_one_line_and_exit_64_on_every_rank_before_any_collective(args, message):
    """Each rank a process of its own (as a launcher starts them); the rendezvous address has nobody listening:
    a rank that tried to join would wait there, these end at once."""
    ranks = [subprocess.Popen([sys.executable, "-m", "clustercheck.injob", *args], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=ROOT,
                              env=job_env({"RANK": str(r), "WORLD_SIZE": "2", "LOCAL_RANK": str(r),
                                           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}))
             for r in range(2)]
    for proc in ranks:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == EXIT_BAD_INPUT, err
        [line] = err.strip().splitlines()
        assert line.startswith("clustercheck injob: Error: command line: ") and message in line, err


def test_help_says_how_to_use_it():
    proc = subprocess.run([sys.executable, "-m", "clustercheck.injob", "--help"], capture_output=True, text=True,
                          timeout=60, env=job_env(), cwd=ROOT)
    assert proc.returncode == EXIT_OK and proc.stdout.startswith("usage: torchrun ... -m clustercheck.injob")


def test_not_under_a_launcher_is_exit_64():
    env = {k: v for k, v in job_env().items() if k not in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS")}
    proc = subprocess.run([sys.executable, "-m", "clustercheck.injob", "--", "x.py"], capture_output=True,
                          text=True, timeout=60, env=env, cwd=ROOT)
    assert proc.returncode == EXIT_BAD_INPUT
    assert "not started by a launcher: RANK and WORLD_SIZE not set" in proc.stderr


# ---- one judge, two ways of gathering: the ranks' documents through env's and bench's judges ---------------
def test_the_ranks_documents_go_through_envs_own_judges_and_the_verdict_names_node_and_rank():
    """This host's real env probe document as three nodes', the second with another deepspeed: env's own package
    judge names that node, and the verdict line its rank and fix; rank 3 (n3's second rank) lost during the
    bandwidth measurement is bench's failed run on n3 and the arrival judge's lost rank."""
    import copy
    from clustercheck.injob.judge import Gathered, judged
    from clustercheck.injob.verdict import one_line
    from clustercheck.onnode import env_probe
    doc = env_probe.probe(["--salt", "s"])
    other = copy.deepcopy(doc)
    other["packages"]["distributions"]["deepspeed"]["version"] = "0.18.0"
    gathered = Gathered(4, "gloo", 30, who={0: who(0, "n1"), 1: who(1, "n2"), 2: who(2, "n3"), 3: who(3, "n3")})
    gathered.who[3]["local_rank"] = 1
    bench = {"events": [], "config": {"nodes": ["n1", "n2", "n3"]}, "error": "RuntimeError: Connection closed"}
    gathered.answered = {0: {"env": doc, "bench": bench}, 1: {"env": other, "bench": bench},
                         2: {"env": doc, "bench": bench}}
    gathered.phase_of = {3: "bench"}
    _, run = judged(gathered)
    failed = {f.check: f for f in run.findings if f.status is Status.FAIL}
    assert failed["packages.same"].nodes == ["n2"] and "deepspeed 0.18.0" in failed["packages.same"].evidence[0]
    assert failed["injob.answered"].nodes == ["n3"] and "rank 3 on n3" in failed["injob.answered"].summary
    assert failed["bench.job"].nodes == ["n3"] and "n3 went down mid-run" in failed["bench.job"].summary
    line = one_line(run.findings, gathered)
    assert line.startswith("clustercheck injob: NOT READY (") and "fix: " in line
    assert "n2 (rank 1)" in one_line([failed["packages.same"]], gathered)
