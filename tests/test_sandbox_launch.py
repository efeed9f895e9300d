"""`clustercheck launch` on a 3-node sandbox: the commands it prints, run on the nodes exactly as
printed (over OpenSSH, at once), train the reference trainer to completion; they carry the
interface and the master address that were verified. LLaMA-Factory's launcher is a stand-in
(tests/data/llamafactory-cli: what its `FORCE_TORCHRUN` branch runs, from the same variables)."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from clustercheck.core.errors import EXIT_FAIL, EXIT_OK
from clustercheck.sandbox import faults
from tests.conftest import gone, needs_pdsh

pytestmark = pytest.mark.sandbox
HERE = os.path.dirname(os.path.abspath(__file__))


def launch(box, tmp_path, *args, slots=None):
    """`clustercheck launch` on the first three nodes (nodes.txt in tmp_path; `slots=N`: N ranks on each)."""
    nodes = tmp_path / "nodes.txt"
    nodes.write_text("".join(f"{node.name}{f' slots={slots}' if slots else ''}\n" for node in box.nodes[:3]))
    proc = subprocess.run([sys.executable, "-m", "clustercheck", "launch", str(nodes), "-F", box.ssh_config,
                           "--python", sys.executable, "--attempt-timeout", "2", *args],
                          capture_output=True, text=True, timeout=300)
    return proc


def trainer_on_nodes(box):
    """reference_train at one path every node sees (a test's tmp_path is private to this host's /tmp)."""
    where = os.path.join(box.dir, "reference_train")
    shutil.rmtree(where, ignore_errors=True)
    shutil.copytree(os.path.join(HERE, "..", "reference_train"), where)
    return os.path.join(where, "train.py")


def run_as_printed(box, lines, workdir):
    """Every node's line at once over OpenSSH, from a directory of its own; (node, exit code, stdout)."""
    procs = {node: subprocess.Popen(["ssh", "-F", box.ssh_config, node, f"mkdir -p {workdir} && cd {workdir} && "
                                     f"{line}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for node, line in lines.items()}
    results = {}
    for node, proc in procs.items():
        out, err = proc.communicate(timeout=400)
        results[node] = (proc.returncode, out, err[-1500:])
    return results


def summary(results):
    return [json.loads(line) for _, out, _ in results.values() for line in out.splitlines() if '"summary"' in line]


def test_the_printed_torchrun_and_llamafactory_commands_train_on_every_node(box, tmp_path):
    script = trainer_on_nodes(box)
    proc = launch(box, tmp_path, "--script", script, "--args", "--mode ddp --steps 6", "--json")
    assert proc.returncode == EXIT_OK, proc.stdout[-2000:] + proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    spec, commands = doc["spec"], doc["commands"]
    first = box.nodes[0]
    assert spec["master_addr"] == first.addr and set(spec["nodes"]) == {n.name for n in box.nodes[:3]}
    for node, line in commands["torchrun"].items():
        assert f"--master-addr {first.addr} --master-port 29500" in line
        assert "NCCL_SOCKET_IFNAME=eth0 GLOO_SOCKET_IFNAME=eth0 " in line and "NCCL_IB_DISABLE=1" in line
    results = run_as_printed(box, commands["torchrun"], "/tmp/launch-torchrun")
    assert all(code == 0 for code, _, _ in results.values()), results
    [done] = summary(results)
    assert done["world"] == 3 and done["steps"] == 6 and done["weights_agree"] is True

    shim = os.path.join(box.dir, "bin")
    os.makedirs(shim, exist_ok=True)
    shutil.copy(os.path.join(HERE, "data", "llamafactory-cli"), shim)
    os.chmod(os.path.join(shim, "llamafactory-cli"), 0o755)
    lines = {node: f"PATH={shim}:$PATH LLAMAFACTORY_STANDIN_PYTHON={sys.executable} "
                   f"LLAMAFACTORY_STANDIN_SCRIPT={script} {line}"
             for node, line in commands["llamafactory"].items()}
    results = run_as_printed(box, lines, "/tmp/launch-llamafactory")
    assert all(code == 0 for code, _, _ in results.values()), results
    [done] = summary(results)
    assert done["world"] == 3
    assert gone("launch-torchrun") and gone("launch-llamafactory")


@needs_pdsh
def test_the_printed_deepspeed_hostfile_and_command_train_across_the_nodes(box, tmp_path):
    """On the first node, as a user would: hostfile and .deepspeed_env in the launch directory (one every
    node sees, as DeepSpeed's pdsh runner cds into it everywhere), then the command as printed. The
    first node's SSH client knows the others (its /etc/ssh/ssh_config is the sandbox's, as a head
    node's would be)."""
    script = trainer_on_nodes(box)
    proc = launch(box, tmp_path, "--script", script, "--args", "--mode ddp --steps 6", "--json")
    assert proc.returncode == EXIT_OK, proc.stdout[-2000:] + proc.stderr[-2000:]
    commands = json.loads(proc.stdout)["commands"]
    first = box.nodes[0].name
    workdir = os.path.join(box.dir, "launch-deepspeed")
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "hostfile"), "w") as handle:
        handle.write(commands["hostfile"])
    with open(os.path.join(workdir, ".deepspeed_env"), "w") as handle:
        handle.write(commands["deepspeed_env"])
    faults.bind(box, first, box.ssh_config, "/etc/ssh/ssh_config")
    results = run_as_printed(box, {first: commands["deepspeed"]}, workdir)
    code, out, err = results[first]
    assert code == 0, (out[-1500:], err)
    [done] = [json.loads(line.split(": ", 1)[-1]) for line in out.splitlines() if '"summary"' in line]
    assert done["world"] == 3 and done["steps"] == 6
    assert gone("deepspeed.launcher.launch")


def test_launch_refuses_with_the_reason_when_a_node_blocks_the_master_port(box, tmp_path):
    faults.drop_port(box, box.nodes[0].name, 29500)
    proc = launch(box, tmp_path)
    assert proc.returncode == EXIT_FAIL
    assert "Not launching:" in proc.stdout and "29500" in proc.stdout


def test_a_node_down_leaves_the_healthy_ones_ready_to_launch_on_and_prometheus_names_it_alone(box, tmp_path):
    """Issue 39: preflight with one node down pushes its results (a PromQL query for failed checks returns that
    node and no other), writes the healthy nodes' files beside its report, and the commands `launch --from`
    prints for them train on those nodes alone (world = their slots)."""
    from tests.prometheus_servers import servers_or_skip
    servers = servers_or_skip(tmp_path / "prometheus")
    try:
        dead = box.nodes[3].name
        faults.blackhole(box, dead)
        nodes = tmp_path / "four.txt"
        nodes.write_text("\n".join(node.name for node in box.nodes[:4]) + "\n")
        reports = tmp_path / "reports"
        proc = subprocess.run([sys.executable, "-m", "clustercheck", "preflight", str(nodes), "-F", box.ssh_config,
                               "--python", sys.executable, "--only", "env,net", "--attempt-timeout", "2",
                               "--connect-timeout", "2", "--reports-dir", str(reports), "--pushgateway",
                               servers.gateway], capture_output=True, text=True, timeout=300)
        assert proc.returncode == EXIT_FAIL, proc.stdout[-2000:] + proc.stderr[-2000:]
        failed = servers.query('clustercheck_check_status{job="clustercheck",cluster="four"} >= 2')
        assert {r["metric"]["node"] for r in failed} == {dead}, failed
        [report] = [p for p in reports.iterdir() if p.suffix == ".json"]
        healthy = (reports / (report.stem + ".healthy-nodes.txt")).read_text().splitlines()
        assert [line.split()[0] for line in healthy] == [n.name for n in box.nodes[:3]]
        assert all("slots=1" in line for line in healthy)
        assert (reports / (report.stem + ".exclude.txt")).read_text().strip() == f"--exclude={dead}"
        assert f"{box.nodes[0].name} slots=1" in (reports / (report.stem + ".healthy-hostfile")).read_text()
        script = trainer_on_nodes(box)
        printed = subprocess.run([sys.executable, "-m", "clustercheck", "launch", "--from", str(report), "--script",
                                  script, "--args", "--mode ddp --steps 4", "--json"],
                                 capture_output=True, text=True, timeout=60)
        assert printed.returncode == EXIT_OK, printed.stderr
        doc = json.loads(printed.stdout)
        assert doc["spec"]["nodes"] == [n.name for n in box.nodes[:3]] and doc["spec"]["master_addr"] != dead
        results = run_as_printed(box, doc["commands"]["torchrun"], "/tmp/launch-healthy")
        assert all(code == 0 for code, _, _ in results.values()), results
        [done] = summary(results)
        assert done["world"] == 3 and done["steps"] == 4
    finally:
        servers.stop()
