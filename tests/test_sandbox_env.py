"""`clustercheck env` against the sandbox: real sshd, the real probe with this interpreter,
faults made for real (a bind-mounted site-packages without deepspeed, /etc/hosts, ip link)."""

import importlib.util
import json
import os
import sys
import time

import pytest

from clustercheck.core.errors import EXIT_BAD_INPUT, EXIT_FAIL, EXIT_OK
from clustercheck.sandbox import faults
from tests.conftest import clustercheck, gone, needs_pdsh

pytestmark = pytest.mark.sandbox


def env(box, *args, **kwargs):
    return clustercheck("env", box.nodes_file, "-F", box.ssh_config, "--python", sys.executable, *args, **kwargs)


def site_packages_of(module: str) -> str:
    spec = importlib.util.find_spec(module)  # finds it without importing it
    return os.path.dirname(os.path.dirname(spec.origin))


@needs_pdsh
def test_a_uniform_sandbox_is_ready(box):
    proc = env(box)
    assert proc.returncode == EXIT_OK, proc.stdout + proc.stderr
    assert f"Same on all {len(box.nodes)} nodes: python {sys.version.split()[0]}" in proc.stdout
    assert "Verdict: READY" in proc.stdout
    assert gone("env_probe.py")


@needs_pdsh
def test_pdsh_missing_on_the_launch_node_warns_naming_it(box):
    first = box.nodes[0].name
    faults.hide_program(box, first, "pdsh")
    proc = env(box)
    assert proc.returncode == 1, proc.stdout + proc.stderr   # usable, with a warning: torchrun needs no pdsh
    assert f"WARN  pdsh is not on PATH on {first}, where `deepspeed` would launch" in proc.stdout


def test_drifted_deepspeed_loopback_hostname_mtu_and_a_stale_build_lock_are_each_named(box):
    n1, n2, n3, n4 = (box.nodes[i].name for i in (0, 1, 2, 3))
    faults.hide_python_packages(box, n4, site_packages_of("deepspeed"), ["deepspeed"])
    faults.hostname_to_loopback(box, n2)
    faults.set_mtu(box, n3, 9000)
    # a DeepSpeed op build stopped half way two hours ago, under n1's own extensions root (its private /tmp)
    faults.set_env(box, n1, "TORCH_EXTENSIONS_DIR=/tmp/cc-extensions")
    lock = "/tmp/cc-extensions/py311_cpu/fused_adam/lock"
    faults.node_exec(box, n1, ["sh", "-c", f"mkdir -p {os.path.dirname(lock)} && touch -d '2 hours ago' {lock}"])
    try:
        proc = env(box, "--json")
    finally:
        faults.node_exec(box, n1, ["rm", "-rf", "/tmp/cc-extensions"])
    assert proc.returncode == EXIT_FAIL, proc.stderr
    doc = json.loads(proc.stdout)
    failed = {f["check"]: f for f in doc["findings"] if f["status"] == "FAIL"}
    assert failed["packages.same"]["nodes"] == [n4]
    assert failed["packages.same"]["summary"] == f"1 training-stack package differs on {n4}: deepspeed"
    assert failed["hostname.resolves"]["nodes"] == [n2]
    assert "127.0.1.1" in failed["hostname.resolves"]["evidence"][0]
    assert failed["interface.mtu"]["nodes"] == [n3]
    assert f"{n3}: MTU 9000 on eth0" in failed["interface.mtu"]["evidence"]
    assert failed["builds.lock"]["nodes"] == [n1] and f"rm {lock}" in failed["builds.lock"]["remedy"]
    assert set(failed) == {"packages.same", "hostname.resolves", "interface.mtu", "builds.lock"}


def test_every_package_on_every_node_is_compared_and_required_packages_take_ranges(box):
    """Issue 36: another deepspeed on one node (FAIL), tokenizers missing on one and an extra package on another
    (WARN), OMP_NUM_THREADS set differently on one; --require of a package nobody has names every node, and of a
    range one node misses names that node."""
    n1, n2, n3, n4 = (box.nodes[i].name for i in (0, 1, 2, 3))
    site = site_packages_of("deepspeed")
    faults.python_package(box, n2, site, "deepspeed", "0.18.0")
    faults.python_package(box, n3, site, "tokenizers", None)
    faults.python_package(box, n4, site, "liger-kernel", "0.3.1")
    faults.set_env(box, n1, "OMP_NUM_THREADS=3")
    proc = env(box, "--json", "--require", "bitsandbytes", "--require", "deepspeed>=0.19")
    assert proc.returncode == EXIT_FAIL, proc.stderr
    found = [f for f in json.loads(proc.stdout)["findings"] if f["status"] != "OK"]
    by_nodes = {(f["check"], f["status"], tuple(f["nodes"])): f for f in found}
    stack = by_nodes[("packages.same", "FAIL", (n2,))]
    assert stack["evidence"] == [f"deepspeed 0.18.0 (the others {deepspeed_version()})"]
    assert "tokenizers not installed (the others" in by_nodes[("packages.same", "WARN", (n3,))]["evidence"][0]
    assert by_nodes[("packages.same", "WARN", (n4,))]["evidence"] == ["liger-kernel 0.3.1 (the others not installed)"]
    assert by_nodes[("same.$OMP_NUM_THREADS", "WARN", (n1,))]
    everyone = tuple(n.name for n in box.nodes)
    assert by_nodes[("required.bitsandbytes", "FAIL", everyone)]["summary"] == "bitsandbytes is not met on any node"
    assert by_nodes[("required.deepspeed", "FAIL", (n2,))]["evidence"] == [f"{n2}: 0.18.0 (needs >=0.19)"]
    assert len(found) == 6, [f["summary"] for f in found]


@needs_pdsh
def test_a_baseline_saved_on_a_clean_cluster_names_a_change_made_on_every_node_alike(box, tmp_path):
    saved = tmp_path / "good-env.json"
    clean = env(box, "--save-baseline", str(saved), "-v")
    assert clean.returncode == EXIT_OK and f"nodes written to {saved}" in clean.stdout, clean.stdout
    assert json.loads(saved.read_text())["packages"]["deepspeed"] == deepspeed_version()
    for node in box.nodes:        # an image upgrade on every node: a majority vote sees nothing
        faults.python_package(box, node.name, site_packages_of("deepspeed"), "deepspeed", "0.20.0")
    drifted = env(box, "--json", "--baseline", str(saved))
    assert drifted.returncode == EXIT_FAIL, drifted.stderr
    [change] = [f for f in json.loads(drifted.stdout)["findings"] if f["status"] != "OK"]
    assert change["check"] == "baseline" and "on every node (the whole cluster changed together" in change["summary"]
    assert change["evidence"] == [f"deepspeed {deepspeed_version()} -> 0.20.0 on every node"]


def deepspeed_version() -> str:
    from importlib.metadata import version
    return version("deepspeed")


def test_unreachable_node_is_reported_without_holding_up_the_others(box):
    dead = box.nodes[-1].name
    faults.blackhole(box, dead)
    start = time.monotonic()
    proc = env(box, "--json", "--connect-timeout", "2")
    elapsed = time.monotonic() - start
    assert proc.returncode == EXIT_FAIL, proc.stderr
    doc = json.loads(proc.stdout)
    reach = [f for f in doc["findings"] if f["check"] == "reach"]
    assert [f["nodes"] for f in reach] == [[dead]]
    assert "connect timed out" in reach[0]["summary"]
    for node in box.nodes[:-1]:
        assert doc["nodes"][node.name]["facts"]["schema"] == 1
    # bounded by the connect timeout, not by a TCP timeout of minutes
    assert elapsed < 2 + 30, elapsed


def test_report_is_written_as_markdown(box, tmp_path):
    faults.set_mtu(box, box.nodes[0].name, 1280)
    proc = env(box, "--report", "--reports-dir", str(tmp_path))
    assert proc.returncode == EXIT_FAIL
    [report] = list(tmp_path.iterdir())
    text = report.read_text()
    assert text.startswith("# clustercheck env: NOT READY")
    assert f"| FAIL     | MTU differs on the training interface: {box.nodes[0].name} has 1280" in text
    assert f"report: {report}" in proc.stdout


def test_bad_config_is_bad_input_and_contacts_nobody(box, tmp_path):
    config = tmp_path / "clustercheck.toml"
    config.write_text("[env]\nshm_min_gib = 'lots'\n")
    proc = env(box, "--config", str(config))
    assert proc.returncode == EXIT_BAD_INPUT
    assert f"{config}:2: shm_min_gib must be a number: \"'lots'\"" in proc.stderr


def test_shared_dir_is_shared_node_local_or_shared_by_some_nodes_only(box, tmp_path):
    """/tmp is a disk per node; a host directory is one filesystem for all; one node mounting
    something else at that path is named."""
    common = os.path.join(box.dir, f"common-{os.getpid()}")   # not under /tmp: each node has its own
    os.makedirs(common, exist_ok=True)
    local = env(box, "--shared-dir", "/tmp", "-v")
    assert "OK    /tmp: a disk per node" in local.stdout, local.stdout
    shared = env(box, "--shared-dir", str(common), "-v")
    assert f"OK    {common}: shared by every node" in shared.stdout, shared.stdout
    odd = box.nodes[2].name
    other = os.path.join(box.dir, f"other-{os.getpid()}")
    os.makedirs(other, exist_ok=True)
    faults.bind(box, odd, other, common)
    mixed = env(box, "--shared-dir", str(common))
    assert mixed.returncode == EXIT_FAIL
    assert f"FAIL  {common} is shared by some nodes only" in mixed.stdout and f"{odd}: do not" in mixed.stdout


def test_a_neighbour_table_overflow_in_one_nodes_kernel_log_is_named(box):
    victim = box.nodes[2].name
    faults.kernel_log(box, victim, ["eth0: renamed from veth1fc0901"] + ["neighbour: arp_cache: neighbor table "
                                                                          "overflow!"] * 3)
    proc = env(box, "--json")
    assert proc.returncode == EXIT_FAIL, proc.stderr
    [overflow] = [f for f in json.loads(proc.stdout)["findings"] if f["check"] == "neigh.overflow"]
    assert overflow["nodes"] == [victim] and overflow["status"] == "FAIL"
    assert overflow["summary"].startswith(f"{victim}'s kernel logged \"arp_cache: neighbor table overflow!\" 3 time(s)")


def test_a_pip_compile_file_with_hashes_is_a_baseline_read_to_its_last_package(box):
    locked = os.path.join(os.path.dirname(__file__), "data", "requirements", "proxpi-app.requirements.txt")
    proc = env(box, "--json", "--baseline", locked)
    changes = [e for f in json.loads(proc.stdout)["findings"] if f["check"] == "baseline" for e in f["evidence"]]
    # werkzeug is the file's last package, after 17 continued blocks of hashes: every one was read
    assert any(e.startswith("werkzeug 3.0.3 -> ") for e in changes), changes
    assert any(e.startswith("coloredlogs 15.0.1 -> not installed on every node") for e in changes), changes
