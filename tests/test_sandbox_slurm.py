"""clustercheck under a real Slurm on the sandbox: munge, a slurmctld and a slurmd in each of three
nodes (Debian's slurm-wlm), sshd stopped on every node, so nothing can go over SSH. This host is
the login node: salloc / sbatch / srun run here, and clustercheck reaches the nodes through job
steps (srun --overlap). Each node has its own process table, /tmp and mounts."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from clustercheck.core.errors import EXIT_FAIL, EXIT_INTERRUPTED, EXIT_OK
from clustercheck.preflight.sequence import STAGE_NAMES
from clustercheck.sandbox import Sandbox, down, faults
from clustercheck.sandbox.slurm import environment, missing_slurm, start_slurm

pytestmark = [pytest.mark.sandbox,
              pytest.mark.skipif(bool(missing_slurm()), reason="Slurm is not installed here (scripts/test.sh "
                                                               "installs slurm-wlm and munge)")]
PY = sys.executable
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


@pytest.fixture(scope="module")
def cluster():
    name = f"s{os.getpid() % 10000}"
    box = Sandbox.up(3, name)
    try:
        start_slurm(box)
        box.code = os.path.join(box.dir, "src")
        for package in ("clustercheck", "reference_train"):
            shutil.copytree(os.path.join(ROOT, package), os.path.join(box.code, package),
                            ignore=shutil.ignore_patterns("__pycache__"))
        for node in box.nodes:
            faults.stop_sshd(box, node.name)
        yield box
    finally:
        down(name)


def slurm_env(box):
    """salloc / sbatch / srun here, and clustercheck importable on the nodes: their /tmp is their own, so a
    checkout under this host's /tmp (a CI clone) is not there; a copy in the sandbox's directory is."""
    return dict(os.environ, **environment(box), PYTHONPATH=box.code)


def left_on_nodes(box, pattern):
    """Processes in this sandbox's nodes whose command line holds pattern (other sandboxes' are not ours)."""
    found = []
    for node in box.nodes:
        for pid in subprocess.run(["ip", "netns", "pids", node.netns], capture_output=True, text=True).stdout.split():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as handle:
                    if pattern.encode() in handle.read():
                        found.append(pid)
            except OSError:
                pass
    return found


def nothing_left(box, within_s=10.0):
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not left_on_nodes(box, "clustercheck-agent") and not left_on_nodes(box, "entry.py --mode") \
                and not steps_left(box):
            return True
        time.sleep(0.2)
    return False


def salloc(box, *argv, timeout=600, **kwargs):
    return subprocess.run(["salloc", "-N", "3", "--quiet", *argv], capture_output=True, text=True, timeout=timeout,
                          env=slurm_env(box), **kwargs)


def steps_left(box):
    return subprocess.run(["squeue", "-s", "-h"], capture_output=True, text=True, env=slurm_env(box)).stdout.strip()


def undo_mounts(box, name):
    """Take the node's fault mounts away without faults.clear, which would start the sshd we stopped."""
    node = box.node(name)
    for target in reversed(node.mounts):
        faults.node_exec(box, name, ["umount", "-l", target], check=False)
    node.mounts = []
    box.faults.pop(node.name, None)
    box.save()


def by_check(doc):
    found = {}
    for finding in doc["findings"]:
        found.setdefault(finding["check"], []).append(finding)
    return found


def test_preflight_in_an_allocation_is_ready_with_every_stage_over_srun(cluster, tmp_path):
    proc = salloc(cluster, PY, "-m", "clustercheck", "preflight", "--slurm", "--python", PY, "--json",
                  "--reports-dir", str(tmp_path), cwd=str(tmp_path))
    assert proc.returncode == EXIT_OK, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["verdict"].startswith("READY") and doc["exit_code"] == EXIT_OK
    assert {name: stage["status"] for name, stage in doc["stages"].items()} == {name: "OK" for name in STAGE_NAMES}
    found = by_check(doc)
    assert found["slurm.state"][0]["summary"].startswith("Slurm lists all 3 nodes as usable")
    assert doc["smoke"]["launcher"] == "srun"
    assert nothing_left(cluster)


def test_a_drained_node_is_named_with_slurms_reason(cluster, tmp_path):
    victim = cluster.nodes[2].name
    script = (f"scontrol update nodename={victim} state=drain reason='GPU 3 fell off the bus' && "
              f"{PY} -m clustercheck env --slurm --python {PY} --json; code=$?; "
              f"scontrol update nodename={victim} state=resume; exit $code")
    proc = salloc(cluster, "/bin/sh", "-c", script, cwd=str(tmp_path))
    assert proc.returncode == EXIT_FAIL, proc.stdout[-3000:] + proc.stderr[-2000:]
    [finding] = [f for f in json.loads(proc.stdout)["findings"] if f["check"] == "slurm.state"]
    assert finding["status"] == "FAIL" and finding["nodes"] == [victim], finding
    assert "drain" in finding["summary"] and "GPU 3 fell off the bus" in finding["summary"], finding


def test_sbatch_leaves_a_report_and_exits_with_the_verdict(cluster):
    submit = os.path.join(cluster.dir, "submit")   # the nodes share it (their /tmp is their own)
    os.makedirs(submit, exist_ok=True)
    # env and net only: the whole of preflight under Slurm is the first test's
    script = subprocess.run([PY, "-m", "clustercheck", "sbatch", "--nodes", "3", "--", "--python", PY, "--only",
                             "env,net"], capture_output=True, text=True, cwd=submit, check=True).stdout
    proc = subprocess.run(["sbatch", "--wait", "--parsable"], input=script, capture_output=True, text=True,
                          timeout=600, cwd=submit, env=slurm_env(cluster))
    assert proc.returncode == EXIT_OK, proc.stderr + open(os.path.join(submit, "reports", os.listdir(
        os.path.join(submit, "reports"))[0])).read()[-3000:]
    job = proc.stdout.strip().split(";")[0]
    reports = os.listdir(os.path.join(submit, "reports"))
    assert f"preflight-{job}.out" in reports
    [report] = [r for r in reports if r.endswith(f"slurm-{job}.json")]
    doc = json.load(open(os.path.join(submit, "reports", report)))
    assert doc["verdict"].startswith("READY") and doc["exit_code"] == proc.returncode


def test_a_node_without_deepspeed_is_not_ready_and_named(cluster, tmp_path):
    import importlib.util
    victim = cluster.nodes[1].name
    site = os.path.dirname(os.path.dirname(importlib.util.find_spec("deepspeed").origin))
    faults.hide_python_packages(cluster, victim, site, ["deepspeed"])
    try:
        proc = salloc(cluster, PY, "-m", "clustercheck", "preflight", "--python", PY, "--json", "--reports-dir",
                      str(tmp_path), "--skip", "device,storage", cwd=str(tmp_path))
    finally:
        undo_mounts(cluster, victim)
    assert proc.returncode == EXIT_FAIL, proc.stdout[-2000:] + proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    [finding] = by_check(doc)["packages.same"]
    assert finding["status"] == "FAIL" and finding["nodes"] == [victim], finding


def test_ctrl_c_during_preflight_leaves_no_process_and_no_job_step(cluster, tmp_path):
    proc = subprocess.Popen(["salloc", "-N", "3", "--quiet", PY, "-m", "clustercheck", "preflight", "--python", PY,
                             "--reports-dir", str(tmp_path), "--skip", "device,storage"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE,
                            text=True, cwd=str(tmp_path), env=slurm_env(cluster))
    seen = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:   # interrupt it once ranks train on every node
        line = proc.stderr.readline()
        seen.append(line)
        if "[smoke]" in line and "ranks up" in line:
            break
    tool = subprocess.run(["pgrep", "-f", "-P", str(proc.pid), "clustercheck preflight"], capture_output=True,
                          text=True).stdout.split()
    assert tool, "".join(seen)
    os.kill(int(tool[0]), signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_INTERRUPTED, err[-2000:]
    assert nothing_left(cluster)


def test_node_check_names_a_fallen_gpu_in_one_line_for_slurm(cluster):
    """node-check as a prolog or HealthCheckProgram would run it, on the node, through Slurm."""
    victim = cluster.nodes[0].name
    faults.stand_in(cluster, victim, "nvidia-smi", {"-q -x": os.path.join(DATA, "nvidia-smi",
                                                                         "h100-x8-driver-580.xml")})
    lines = open(os.path.join(DATA, "kmsg", "dmesg-xid79-nvsentinel-155.txt")).read().splitlines()
    faults.kernel_log(cluster, victim, [line.split("] ", 1)[-1] for line in lines])
    try:
        proc = subprocess.run(["srun", "-N", "1", "-w", victim, "--quiet", f"--chdir={cluster.dir}", "env",
                               "PATH=/usr/local/sbin:/usr/bin:/bin", PY, "-m", "clustercheck", "node-check"],
                              capture_output=True, text=True, timeout=120, env=slurm_env(cluster))
    finally:
        undo_mounts(cluster, victim)
    assert proc.returncode == EXIT_FAIL, proc.stdout + proc.stderr
    [line] = proc.stdout.strip().splitlines()
    assert line.startswith("CLUSTERCHECK CRITICAL - ") and "Xid 79" in line and len(line) < 260, line


def test_the_check_inside_the_job_under_srun_then_the_same_processes_train(cluster):
    """Issue 45: one srun step, torchrun on each node with the check's module before the trainer (as the guide
    writes it): the check over the job's own ranks, READY, then the trainer in the same processes."""
    reports = os.path.join(cluster.dir, "injob-srun")
    trainer = os.path.join(cluster.code, "reference_train", "train.py")
    head = cluster.nodes[0].name
    # a static rendezvous (each node's rank from srun): with c10d, the agent that hosts the store may leave first
    # at the end and the others fail their last sync (RendezvousConnectionError) after a job that trained well
    inner = (f"GLOO_SOCKET_IFNAME=eth0 {PY} -m torch.distributed.run --nnodes 3 --nproc-per-node 1 "
             f"--node-rank $SLURM_NODEID --master-addr {head} --master-port 29520 -m clustercheck.injob --budget 40 "
             f"--reports-dir {reports} -- {trainer} --mode ddp --steps 2")
    proc = salloc(cluster, "srun", "--ntasks-per-node=1", "bash", "-c", inner, cwd=cluster.dir)
    assert proc.returncode == EXIT_OK, proc.stdout[-3000:] + proc.stderr[-3000:]
    [done] = [json.loads(line) for line in proc.stdout.splitlines() if '"summary"' in line]
    assert done["world"] == 3 and done["steps"] == 2
    [path] = [p for p in os.listdir(reports) if p.endswith(".json")]
    doc = json.load(open(os.path.join(reports, path)))
    assert doc["exit_code"] in (EXIT_OK, 1) and doc["nodes"] == [n.name for n in cluster.nodes]
    checks = {f["check"] for f in doc["findings"]}
    assert {"injob.answered", "packages.same", "device.gemm.float32", "bench.job", "bench.pairwise"} <= checks, checks
