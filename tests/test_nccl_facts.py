"""NCCL's lines found by what they say whatever was done to their prefix, the facts that cannot hold on a healthy job
(issue 48), and a fallback judged from the hardware the log shows. The lines are NCCL's own format strings
(NVIDIA/nccl src/transport/p2p.cc, shm.cc, net.cc, net_ib.cc, src/bootstrap.cc, src/misc/socket.cc, graph/paths.cc,
2.3.7's include/socket.h and net_socket.cu) instantiated, and real lines of the issue-48 build set's logs."""

from clustercheck.explain import nccl_view
from clustercheck.explain.reader import read_logs
from clustercheck.nccl.impossible_facts import judge_facts
from clustercheck.nccl.path_judge import judge_paths, paths_by_host
from clustercheck.onnode import nccl_log_reader


def paths(lines):
    return paths_by_host(nccl_log_reader.summarize(lines))


def checks(lines):
    return {f.check: f for f in judge_paths(paths(lines))}


def comm(host, pid, dev, rank, nranks, nnodes):
    return (f"{host}:{pid}:{pid + 1} [{dev}] NCCL INFO comm 0x55d1c0{rank} rank {rank} nRanks {nranks} nNodes "
            f"{nnodes} localRanks 2 localRank {dev} MNNVL 0")


def conn(host, pid, dev, me, peer, how, tag=""):
    # p2p.cc / shm.cc: "Channel %02d/%01d : %d[%d] -> %d[%d] via P2P/%s"; net.cc: "... [send] via NET/%s/%d%s"
    return f"{host}:{pid}:{pid + 1} [{dev}] NCCL INFO Channel 00/0 : {me}[{me}] -> {peer}[{peer}]{tag} via {how}"


# ---- NCCL's lines found with any prefix or none ----------------------------------------------------------------
IB_LIST = "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.0.0.1<0>"


def test_an_ib_list_is_read_with_its_prefix_cut_gone_or_its_tail_elided():
    for line in (f"gpu1:123:456 [0] NCCL INFO {IB_LIST}", f":123:456 [0] NCCL INFO {IB_LIST}", IB_LIST,
                 "gpu1:123:456 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ..."):
        [path] = paths([line]).values()
        assert path.network == "InfiniBand", line
        assert path.ranks[0]["net_devices"][:1] == ["mlx5_0:1/IB"], line


def test_joined_lines_are_each_read():
    """A real quote (hiyouga/LlamaFactory 6111): five of NCCL's lines pasted on one, their host part cut."""
    line = ("> > [0] NCCL INFO NCCL_IB_DISABLE set by environment to 0. [0] NCCL INFO NCCL_IB_HCA set to mlx5_0:1,"
            "mlx5_1:1 [0] NCCL INFO NET/IB : No device found. [0] NCCL INFO NET/Socket : Using [0]eth0:10.47.14.218<0> "
            "[0] NCCL INFO Using network Socket")
    [path] = paths([line]).values()
    assert path.network == "Socket"
    assert path.fallback == "NCCL INFO NET/IB : No device found."


def test_a_connection_line_wrapped_before_its_via_is_read_whole():
    lines = ["gpu1:123:456 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send]", "   via NET/IB/0/GDRDMA"]
    found = paths(lines)
    assert list(found) == ["gpu1"]
    assert found["gpu1"].inter == {"NET/IB/GDRDMA": 1}


def test_connection_lines_stripped_of_every_prefix_are_read_in_each_version_s_words():
    lines = ["Channel 00 : 0[0] -> 1[1] via P2P/IPC",            # 2.7
             "Ring 01 : 1[1] -> 2[2] via P2P/IPC",                # 2.4
             "Channel 02/0 : 2[2] -> 0[0] via SHM/direct/direct",
             "Channel 03/0 : 2[2] -> 8[0] [send] via NET/Socket/0"]
    [path] = paths(lines).values()
    assert path.intra == {"P2P/IPC": 2, "SHM": 1}
    assert path.inter == {"NET/Socket": 1}


def test_explain_reads_bare_wrapped_and_2_3_lines_among_a_training_log(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("\n".join(["step 1 loss 2.3"] * 50 + [
        "Ring 00 : 0[0] -> 1[1] via P2P/IPC",
        "gpu1:123:456 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send]",
        "via NET/IB/0/GDRDMA",
        "Net/IB: call to devices() returned 0 devices.",
    ] + ["step 2 loss 2.2"] * 50) + "\n")
    view = read_logs([str(log)])
    docs, _ = nccl_view.judge(view.nccl_ranks)
    assert docs["gpu1"]["between"] == "NET/IB/GDRDMA"
    assert "P2P/IPC" in docs["log"]["inside"]


# ---- NCCL 2.3's words ---------------------------------------------------------------------------------------
def test_2_3_socket_interfaces_on_a_bridge_are_a_fallback_quoting_their_line():
    """Real lines (horovod/horovod 685, NCCL 2.3.7): the socket net took a libvirt and a Docker bridge, IB no device."""
    lines = ["ml3:32632:32662 [0] NCCL INFO NET : Using interface enp0s31f6:10.92.42.96<0>",
             "ml3:32632:32662 [0] NCCL INFO NET : Using interface virbr0:192.168.122.1<0>",
             "ml3:32632:32662 [0] NCCL INFO NET : Using interface br-4e5f60905511:172.18.0.1<0>",
             "ml3:32632:32662 [0] NCCL INFO NET/Socket : 3 interfaces found",
             "ml3:32632:32662 [0] NCCL INFO No network plugin found.",
             "ml3:32632:32662 [0] NCCL INFO NET/IB : Using interface enp0s31f6 for sideband communication",
             "ml3:32632:32662 [0] NCCL INFO Net/IB: call to devices() returned 0 devices.",
             "ml3:32632:32662 [0] NCCL INFO Using network Socket"]
    [path] = paths(lines).values()
    assert path.network == "Socket"
    assert path.bootstrap == ["enp0s31f6"]
    kinds = dict(path.fallbacks)
    assert kinds["sockets"] == "NCCL INFO Net/IB: call to devices() returned 0 devices."
    assert kinds["bootstrap"] == "NET : Using interface virbr0:192.168.122.1<0>"


def test_2_3_socket_net_on_loopback_shows_sockets_between_nodes():
    """Real lines (horovod/horovod 584): no "Using network" line; the socket net's count and its NICs say it."""
    lines = ["paigcr-b-gpu-1011:4289:4343 [0] NCCL INFO CUDA Dev 0, IP Interfaces : lo(SOC) eth0(PXB) eth1(PXB)",
             "paigcr-b-gpu-1012:4152:4206 [0] NCCL INFO NET : Using interface lo:127.0.0.1<0>",
             "paigcr-b-gpu-1012:4152:4206 [0] NCCL INFO NET : Using interface eth0:10.151.40.240<0>",
             "paigcr-b-gpu-1012:4152:4206 [0] NCCL INFO NET/Socket : 2 interfaces found"]
    found = paths(lines)
    assert {p.network for p in found.values()} == {"Socket"}
    assert found["paigcr-b-gpu-1012"].fallback_of("bootstrap") == "NET : Using interface lo:127.0.0.1<0>"


# ---- the network told by the hardware the log shows ---------------------------------------------------------
def test_aws_ofi_nccl_on_ec2_host_names_is_efa_elsewhere_libfabric():
    """Real line (aws/aws-ofi-nccl 64): aws-ofi-nccl 1.x's net name on two p4 instances, no provider line."""
    line = "{host}:9922:9980 [1] NCCL INFO Channel 01 : 9[101d0] -> 0[101c0] [send] via NET/AWS Libfabric/0"
    assert {p.network for p in paths([line.format(host="ip-172-31-6-104")]).values()} == {"EFA"}
    assert {p.network for p in paths([line.format(host="hpc-node-3")]).values()} == {"libfabric"}


def test_sockets_between_nodes_where_the_log_names_an_rdma_device_is_a_fallback():
    lines = ["a1:10:11 [0] NCCL INFO NCCL_IB_HCA set to mlx5_0:1,mlx5_1:1",
             "a1:10:11 [0] NCCL INFO Using network Socket",
             conn("a1", 10, 0, 0, 1, "NET/Socket/0", " [send]")]
    [path] = paths(lines).values()
    assert path.fallback == "NCCL INFO NCCL_IB_HCA set to mlx5_0:1,mlx5_1:1"
    assert "nccl.transport" in checks(lines)


def test_sockets_on_machines_without_rdma_are_no_fallback():
    lines = ["vm1:10:11 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
             "vm1:10:11 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>",
             "vm1:10:11 [0] NCCL INFO Using network Socket",
             conn("vm1", 10, 0, 0, 1, "NET/Socket/0", " [send]")]
    [path] = paths(lines).values()
    assert path.network == "Socket" and path.fallback is None
    assert "nccl.transport" not in checks(lines)


# ---- facts that cannot hold -----------------------------------------------------------------------------------
def test_p2p_or_shm_between_hosts_of_different_names_is_a_warn_quoting_the_line():
    lines = [comm("hostA", 10, 0, 0, 2, 1), comm("hostB", 20, 0, 1, 2, 1),
             conn("hostA", 10, 0, 0, 1, "P2P/IPC/read"), conn("hostB", 20, 0, 1, 0, "SHM/direct/direct")]
    found = [f for f in judge_facts(paths(lines)) if f.check == "nccl.hosts"]
    assert len(found) == 1 and found[0].status.name == "WARN"
    assert found[0].nodes == ["hostA", "hostB"]
    assert any("via P2P/IPC/read" in e and "hostB" in e for e in found[0].evidence)
    assert "boot_id" in found[0].remedy


def test_healthy_single_node_p2p_and_healthy_two_node_ib_say_nothing():
    one_node = [comm("gpu1", 10, 0, 0, 2, 1), comm("gpu1", 11, 1, 1, 2, 1),
                conn("gpu1", 10, 0, 0, 1, "P2P/CUMEM/read"), conn("gpu1", 11, 1, 1, 0, "P2P/CUMEM/read")]
    two_nodes = [comm("gpu1", 10, 0, 0, 4, 2), comm("gpu1", 11, 1, 1, 4, 2), comm("gpu2", 20, 0, 2, 4, 2),
                 comm("gpu2", 21, 1, 3, 4, 2),
                 "gpu1:10:11 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.1<0>",
                 "gpu2:20:21 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.2<0>",
                 conn("gpu1", 10, 0, 0, 1, "P2P/CUMEM/read"), conn("gpu1", 11, 1, 1, 2, "NET/IB/0/GDRDMA", " [send]"),
                 conn("gpu2", 20, 0, 1, 2, "NET/IB/0/GDRDMA", " [receive]"), conn("gpu2", 20, 0, 2, 3, "P2P/CUMEM/read"),
                 conn("gpu2", 21, 1, 3, 0, "NET/IB/1/GDRDMA", " [send]"),
                 conn("gpu1", 10, 0, 3, 0, "NET/IB/1/GDRDMA", " [receive]")]
    for lines in (one_node, two_nodes):
        assert judge_facts(paths(lines)) == []
        assert [f.status.name for f in judge_paths(paths(lines))] == ["OK"]


def test_a_network_between_ranks_of_one_host_is_a_warn():
    said_one_node = [comm("gpu1", 10, 0, 0, 2, 1), conn("gpu1", 10, 0, 0, 1, "NET/Socket/0", " [send]")]
    one_address = ["gpu1:10:11 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
                   "gpu1:11:12 [1] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
                   comm("gpu1", 10, 0, 0, 2, 2), comm("gpu1", 11, 1, 1, 2, 2),
                   conn("gpu1", 10, 0, 0, 1, "NET/IB/0", " [send]")]
    for lines in (said_one_node, one_address):
        [found] = judge_facts(paths(lines))
        assert found.check == "nccl.hosts" and "over the network" in found.summary
        assert found.evidence[0].startswith("gpu1: Channel 00/0 : 0[0] -> 1[1] [send] via NET/")


def test_two_machines_under_one_host_name_are_not_one_host():
    """Masked or cloned host names with different bootstrap addresses (NVIDIA/nccl 875's masked "xxx-xxx"): NET
    between them is right."""
    lines = ["xxx:10:11 [0] NCCL INFO Bootstrap : Using bond0:10.140.28.100<0>",
             "xxx:20:21 [0] NCCL INFO Bootstrap : Using bond0:10.140.28.121<0>",
             comm("xxx", 10, 0, 0, 2, 2), comm("xxx", 20, 0, 1, 2, 2),
             conn("xxx", 10, 0, 0, 1, "NET/IB/0", " [send]"), conn("xxx", 20, 0, 0, 1, "NET/IB/0", " [receive]")]
    assert judge_facts(paths(lines)) == []


def test_a_bootstrap_interface_that_changes_between_nodes_is_a_warn_unless_ifname_is_set():
    lines = ["n1:10:11 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
             "n2:10:11 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>",
             "n3:10:11 [0] NCCL INFO Bootstrap : Using ib0:192.168.0.3<0>"]
    [found] = judge_facts(paths(lines))
    assert found.check == "nccl.interface" and found.nodes == ["n3"]
    assert "n3: Bootstrap : Using ib0:192.168.0.3" in found.evidence and "NCCL_SOCKET_IFNAME" in found.remedy
    assert judge_facts(paths(lines + ["n1:10:11 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to ^lo"])) == []
    same = [line.replace("ib0:192.168.0.3", "eth0:10.0.0.3") for line in lines]
    assert judge_facts(paths(same)) == []


def test_gpudirect_on_some_ranks_of_a_node_only_is_a_warn():
    lines = [conn("gpu1", 10, 0, 0, 8, "NET/IB/0/GDRDMA", " [send]"), conn("gpu1", 11, 1, 1, 9, "NET/IB/1", " [send]")]
    [found] = judge_facts(paths(lines))
    assert found.check == "nccl.gdr" and found.nodes == ["gpu1"]
    assert found.evidence == ["gpu1: Channel 00/0 : 1[1] -> 9[9] [send] via NET/IB/1"]


def test_p2p_disabled_between_gpus_is_said_with_nccl_s_line():
    info = "gpu1:10:11 [0] NCCL INFO P2P is disabled between connected GPUs 0 and 1. You can repress this message with " \
           "NCCL_IGNORE_DISABLED_P2P=1."
    warn = "gpu1:10:11 [0] graph/paths.cc:323 NCCL WARN P2P is disabled between NVLINK connected GPUs 1 and 2. " \
           "This should not be the case given their connectivity"
    for line, said in ((info, "connected GPUs"), (warn, "NVLink-connected")):
        found = checks([line])["nccl.p2p"]
        assert said in found.summary and any("P2P is disabled between" in e for e in found.evidence)
