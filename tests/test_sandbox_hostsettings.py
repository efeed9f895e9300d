"""The sandbox's one host setting (issue 42): all its namespaces share the host's neighbour table, and a full mesh of
n nodes puts 2n² entries in it (a 128-node mesh gave 115 false FAILs on the 64-per-node table it had). It is raised
to that on the real /proc before the nodes come up and put back when the last sandbox goes down. Needs root; run
under the sandbox lock (it writes the host's sysctls)."""

import os

import pytest

from clustercheck.sandbox import hostsettings

TABLE = "/proc/sys/net/ipv4/neigh/default/"
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="writes the host's sysctls: needs root")


def sysctls():
    return {key: int(open(TABLE + key).read()) for key in ("gc_thresh1", "gc_thresh2", "gc_thresh3")}


def test_a_128_node_mesh_fits_the_table_the_sandbox_asks_for():
    asked = hostsettings.neighbour_table_settings(128)
    assert asked["gc_thresh3"] >= 128 * 127 * 2 and asked["gc_thresh2"] >= 128 * 127 * 2
    assert hostsettings.neighbour_table_settings(4) == {"gc_thresh1": 128, "gc_thresh2": 512, "gc_thresh3": 1024}


def test_the_table_is_raised_for_the_mesh_and_put_back_at_teardown(tmp_path, monkeypatch):
    monkeypatch.setattr(hostsettings, "HOST_SETTINGS", str(tmp_path / "host-settings.json"))
    before = sysctls()
    num_nodes = 1 + int((max(before.values()) / 2) ** 0.5)      # just past what the host's table holds now
    try:
        hostsettings.raise_neighbour_table(num_nodes)
        raised = sysctls()
        assert raised["gc_thresh3"] >= 2 * num_nodes ** 2 > before["gc_thresh3"]
        assert all(raised[k] >= before[k] for k in before)          # raised, never lowered
    finally:
        restored = hostsettings.restore_host_settings()
    assert sysctls() == before and len(restored) >= 1
    assert not os.path.exists(hostsettings.HOST_SETTINGS)
