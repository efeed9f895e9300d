"""`launch`'s recipes from verified facts (recorded probe documents, net attempts as net records them)."""

import shlex

import pytest

from clustercheck.core.result import Finding, Status
from clustercheck.tools import launch_recipes as recipe
from tests.test_env_rules import cluster, gpu_section


def attempts(names, address="10.0.0.1", state="open", ports=(29500, 29400)):
    return [(source, names[0], port, state, {"to": names[0], "port": port, "address": address, "state": state})
            for source in names for port in ports]


def eight_gpus(i, doc):
    doc["gpu"] = gpu_section("h100-x8-driver-580.xml")
    doc["net"]["peers"] = {"x": {"ifname": "ib0"}}


def test_every_value_comes_from_the_facts_and_each_node_gets_its_rank():
    probed = cluster(3, eight_gpus)
    names = [p.name for p in probed]
    spec = recipe.derive(probed, attempts(names), 29500, 29400, [Finding("x", Status.WARN, "a warning")])
    assert spec.master_addr == "10.0.0.1" and spec.nproc == {n: 8 for n in names} and spec.world_size == 24
    lines = recipe.torchrun_lines(spec, "/shared/train.py", ["--lr", "1e-4"])
    for rank, node in enumerate(names):
        words = shlex.split(lines[node])
        assert words[:3] == ["NCCL_SOCKET_IFNAME=ib0", "GLOO_SOCKET_IFNAME=ib0", "NCCL_IB_DISABLE=1"]
        assert words[words.index("--node-rank") + 1] == str(rank) and words[-3:] == ["/shared/train.py", "--lr", "1e-4"]
    assert recipe.hostfile(spec) == "".join(f"{n} slots=8\n" for n in names)
    assert "NODE_RANK=2 " in recipe.llamafactory_lines(spec, "sft.yaml")[names[2]]
    assert "machine_rank: 1" in recipe.accelerate_config(spec, names[1]) and "num_processes: 24" in \
        recipe.accelerate_config(spec, names[1])
    assert "--rdzv-endpoint 10.0.0.1:29400" in recipe.srun_line(spec, "t.py", [])
    assert "^" not in "".join(recipe.render(spec, "t.py", []))      # never NCCL's exclusion syntax


def test_an_active_infiniband_port_leaves_nccl_on_it():
    def ib(i, doc):
        eight_gpus(i, doc)
        doc["infiniband"] = [{"device": "mlx5_0", "port": 1, "state": "ACTIVE", "link_layer": "InfiniBand"}]
    spec = recipe.derive(cluster(2, ib), attempts(["node01", "node02"]), 29500, 29400, [])
    assert all("NCCL_IB_DISABLE" not in env for env in spec.env.values())


@pytest.mark.parametrize("findings, trials, reason", [
    ([Finding("net.inbound", Status.FAIL, "node02 drops 29500")], None, "FAIL node02 drops 29500"),
    ([Finding("env.gpu", Status.UNKNOWN, "could not check GPUs")], None, "could not check GPUs"),
    ([], attempts(["node01", "node02", "node03"], state="filtered"), "cannot reach node01 on port 29500"),
])
def test_it_refuses_with_the_reason(findings, trials, reason):
    probed = cluster(3, eight_gpus)
    with pytest.raises(recipe.NotReady, match=reason):
        recipe.derive(probed, trials if trials is not None else attempts([p.name for p in probed]), 29500, 29400,
                      findings)


def test_nodes_on_different_interfaces_get_no_single_srun_line():
    def mixed(i, doc):
        eight_gpus(i, doc)
        if i == 1:
            doc["net"]["peers"] = {"x": {"ifname": "eth2"}}
    spec = recipe.derive(cluster(2, mixed), attempts(["node01", "node02"]), 29500, 29400, [])
    text = "\n".join(recipe.render(spec, "t.py", []))
    assert "different interfaces (node01 ib0, node02 eth2)" in text and "srun --nodes" not in text
    assert "GLOO_SOCKET_IFNAME=eth2" in recipe.torchrun_lines(spec, "t.py", [])["node02"]
