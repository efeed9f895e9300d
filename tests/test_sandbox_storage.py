"""`clustercheck storage` against a sandbox with a network filesystem of its own: a storage server on the
sandbox's bridge, mounted with sshfs (FUSE) on every node over the node's own link. A node whose link is
slowed (tc tbf) is named as the slow storage client; a node where the shared path is read-only is named with
the path and EROFS; a node whose disk is too small for the planned checkpoint fails before smoke starts; a
clean sandbox names nobody; and the estimated save time is held against the save smoke measures."""

import json
import os
import sys

import pytest

from clustercheck.core.errors import EXIT_FAIL
from clustercheck.sandbox import Sandbox, down, faults
from clustercheck.sandbox.storage import export_dir, mount_point, serve
from tests.conftest import clustercheck, gone

pytestmark = pytest.mark.sandbox
SLOTS = "2"     # rank slots per node: every slot writes at once, as 8 ranks per node do


@pytest.fixture(scope="module")
def shared_box():
    """Three nodes and a storage server of their own (its own name and subnet), removed at the end."""
    box = Sandbox.up(3, f"st{os.getpid() % 10000}")   # unique per test session: two runs on one host never share it
    try:
        serve(box)
        yield box
    finally:
        down(box.name)


@pytest.fixture
def sbox(shared_box):
    yield shared_box
    faults.clear_all(shared_box)


def storage(box, *args, command=("storage",), timeout=300):
    proc = clustercheck(*command, box.nodes_file, "-F", box.ssh_config, "--python", sys.executable, "--json",
                        *args, timeout=timeout)
    assert proc.stdout.strip(), proc.stderr[-3000:]
    return proc.returncode, json.loads(proc.stdout)


def shared_run(box, *args):
    return storage(box, "--checkpoint-dir", mount_point(box), "--nproc-per-node", SLOTS, "--seconds", "3",
                   "--size", str(64 << 20), *args)


def named(doc):
    return {f["check"]: f["nodes"] for f in doc["findings"] if f["nodes"]}


def test_a_clean_shared_filesystem_names_nobody(sbox):
    code, doc = shared_run(sbox)
    assert not named(doc) and code in (0, 1), [f for f in doc["findings"] if f["status"] != "OK"]
    checks = {f["check"]: f for f in doc["findings"]}
    assert "shared by every node and coherent" in checks["storage.coherence"]["summary"]
    assert all(doc["nodes"][n.name]["probe"]["filesystem"]["mount"]["fstype"] == "fuse.sshfs" for n in sbox.nodes)
    assert doc["estimate"]["save_s"] > 0 and gone("storage_probe")


def test_the_node_with_the_slowed_link_is_the_slow_storage_client(sbox):
    data = os.path.join(export_dir(sbox), "dataset")     # a data set on the shared filesystem, read as a loader does
    os.makedirs(data, exist_ok=True)
    for i in range(24):
        with open(os.path.join(data, f"shard{i:03d}.bin"), "wb") as handle:
            handle.write(os.urandom(2 << 20))
    slow = sbox.nodes[1].name
    faults.slow_link(sbox, slow, 40)
    code, doc = shared_run(sbox, "--data-dir", os.path.join(mount_point(sbox), "dataset"))
    failing = named(doc)
    assert failing.get("storage.write") == [slow] and failing.get("storage.data") == [slow], doc["findings"]
    assert all(nodes == [slow] for nodes in failing.values()), failing
    [finding] = [f for f in doc["findings"] if f["check"] == "storage.write"]
    assert finding["summary"].startswith(f"{slow} is a slow storage client: writing and syncing at ")
    # the save waits for the slow node: the estimate names it as the node that sets the time per save
    assert doc["estimate"]["save_node"] == slow
    [estimate] = [f for f in doc["findings"] if f["check"] == "storage.estimate"]
    assert f"set by {slow}, the slowest of 3 nodes" in estimate["summary"], estimate


def test_a_read_only_shared_path_is_named_with_its_errno(sbox):
    blind = sbox.nodes[2].name
    faults.read_only(sbox, blind, mount_point(sbox))
    code, doc = shared_run(sbox)
    assert code == EXIT_FAIL
    [finding] = [f for f in doc["findings"] if f["check"] == "storage.write"]
    assert finding["nodes"] == [blind] and "EROFS (Read-only file system)" in finding["summary"]
    assert mount_point(sbox) in finding["summary"]


def test_a_disk_too_small_for_the_checkpoint_fails_before_smoke_starts(sbox, tmp_path):
    small = sbox.nodes[2].name
    for node in sbox.nodes:
        faults.node_exec(sbox, node.name, ["mkdir", "-p", "/tmp/ckpt"])
    faults.small_disk(sbox, small, "/tmp/ckpt", 64 * 1024)       # 64 MiB; 125M parameters under ddp: 1 GB a node
    code, doc = storage(sbox, "--only", "storage,smoke", "--checkpoint-dir", "/tmp/ckpt", "--params", "125M",
                        "--reports-dir", str(tmp_path), command=("preflight",))
    assert code == EXIT_FAIL
    [space] = [f for f in doc["findings"] if f["check"] == "storage.space"]
    assert space["status"] == "FAIL" and space["nodes"] == [small], space
    assert "storage" in (doc["stages"]["smoke"].get("skipped") or ""), doc["stages"]["smoke"]
