import pytest

from clustercheck.core.errors import EXIT_BAD_INPUT, InputError
from clustercheck.core.inventory import Defaults, fold, parse_inventory, read_inventory, slurm_inventory
from tests.conftest import clustercheck


def names(nodes):
    return [n.name for n in nodes]


def test_plain_lines_user_port_and_attributes():
    nodes = parse_inventory(
        "# training nodes\n"
        "\n"
        "alice@gpu01:2222 slots=8 python=/opt/venv/bin/python ifname=ib0\n"
        "gpu02   # the second one\n", "nodes.txt")
    assert names(nodes) == ["gpu01", "gpu02"]
    first = nodes[0]
    assert (first.user, first.port, first.slots, first.python, first.ifname) == (
        "alice", 2222, 8, "/opt/venv/bin/python", "ib0")
    assert first.source == "nodes.txt:3"
    assert nodes[1].user is None and nodes[1].port is None


def test_deepspeed_hostfile_reads_as_is():
    nodes = parse_inventory("worker-1 slots=4\nworker-2 slots=4\n", "hostfile")
    assert [(n.name, n.slots) for n in nodes] == [("worker-1", 4), ("worker-2", 4)]


def test_slurm_ranges_expand():
    assert names(parse_inventory("gpu[01-04,07] slots=8\n")) == ["gpu01", "gpu02", "gpu03", "gpu04", "gpu07"]
    assert names(parse_inventory("rack[1-2]-n[1-3]\n")) == [
        "rack1-n1", "rack1-n2", "rack1-n3", "rack2-n1", "rack2-n2", "rack2-n3"]


def test_command_line_defaults_lose_to_the_file():
    nodes = parse_inventory("bob@a:2200 python=/x/python\nb\n", "f",
                            Defaults(user="root", port=22, python="/usr/bin/python3"))
    assert (nodes[0].user, nodes[0].port, nodes[0].python) == ("bob", 2200, "/x/python")
    assert (nodes[1].user, nodes[1].port, nodes[1].python) == ("root", 22, "/usr/bin/python3")


def test_localhost_is_local():
    nodes = parse_inventory("localhost\n127.0.0.1:2222\nnode1\n")
    assert [n.is_local for n in nodes] == [True, True, False]


@pytest.mark.parametrize("text, line, fragment, value", [
    ("a\nb\na\n", 3, "duplicate node (first at f:1)", "a"),
    ("gpu[01-03]\ngpu02\n", 2, "duplicate node (first at f:1)", "gpu02"),
    ("ok\ngpu[03-01]\n", 2, "bad host range", "gpu[03-01]"),
    ("gpu[01-\n", 1, "bad host range", "gpu[01-"),
    ("a:0\n", 1, "port must be", "0"),
    ("a:70000\n", 1, "port must be", "70000"),
    ("a:ssh\n", 1, "port must be", "ssh"),
    ("a gpus=8\n", 1, "unknown key", "gpus"),
    ("a slots=eight\n", 1, "slots must be", "eight"),
    ("a slots=0\n", 1, "slots must be", "0"),
    ("a slots\n", 1, "expected key=value", "slots"),
    ("a slots=1 slots=2\n", 1, "key given twice", "slots"),
    ("a ifname=averyveryverylongname\n", 1, "not a network interface", "averyveryverylongname"),
    ("a:22 port=23\n", 1, "port given twice", "a:22"),
    ("@a\n", 1, "empty user name", "a"),
    ("a;rm\n", 1, "not a host name", "a;rm"),
    # Other formats are refused, not read as host names: a CSV with a header, a CSV of index,ip.
    ("index,ip\n0,10.0.0.1\n", 1, "looks like a CSV", "index,ip"),
    ("# index,ip\n0,10.0.0.1\n", 2, "looks like a CSV", "0,10.0.0.1"),
    ("0\n", 1, "a bare number", "0"),
    ("node1:8 slots=8\n", 1, "slots given twice", "node1:8"),
    ("node1 slots=8 max_slots=4\n", 1, "max_slots is below", "4"),
])
def test_bad_lines_name_file_line_and_value(text, line, fragment, value):
    with pytest.raises(InputError) as caught:
        parse_inventory(text, "f")
    error = caught.value
    assert (error.source, error.line, error.value) == ("f", line, value)
    assert fragment in str(error)
    assert str(error).startswith(f"f:{line}: ")


def test_empty_file_is_an_error():
    with pytest.raises(InputError, match="no nodes"):
        parse_inventory("# nothing here\n\n", "empty.txt")


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="no such inventory file"):
        read_inventory(str(tmp_path / "nope.txt"))


def test_slurm_allocation():
    env = {"SLURM_JOB_NODELIST": "gpu[01-02],cpu7", "SLURM_GPUS_ON_NODE": "4"}
    nodes = slurm_inventory(env)
    assert [(n.name, n.slots) for n in nodes] == [("gpu01", 4), ("gpu02", 4), ("cpu7", 4)]
    with pytest.raises(InputError, match="inside an allocation"):
        slurm_inventory({})


def test_fold_makes_compact_host_lists():
    assert fold(["node1", "node2", "node3", "node5"]) == "node[1-3,5]"
    assert fold(["gpu01", "gpu02", "cpu1"]) == "cpu1,gpu[01-02]"


def test_cli_bad_input_exit_code_and_message_contact_nothing(tmp_path):
    nodes = tmp_path / "nodes.txt"
    # The first line names a host that cannot resolve: bad input must stop before any contact.
    nodes.write_text("no-such-host.invalid\nnode[1-2] slots=x\n")
    proc = clustercheck("run", str(nodes), "--", "true", timeout=30)
    assert proc.returncode == EXIT_BAD_INPUT
    assert proc.stderr.strip() == f"Error: {nodes}:2: slots must be a whole number of at least 1: 'x'"
    assert proc.stdout == ""


def test_cli_usage_errors_are_bad_input():
    proc = clustercheck("run", "--fanout", "0", "--", "true", timeout=30)
    assert proc.returncode == EXIT_BAD_INPUT
    assert "--fanout" in proc.stderr


def test_mpich_and_open_mpi_machinefiles_are_read_for_what_they_are():
    """Was: MPICH's node1:8 (8 ranks) was read as SSH port 8."""
    mpich = parse_inventory("node1:8\nnode2:8\n", "machinefile")
    assert [(n.name, n.slots, n.port) for n in mpich] == [("node1", 8, None), ("node2", 8, None)]
    openmpi = parse_inventory("node1 slots=8 max_slots=16\n", "hostfile")
    assert (openmpi[0].slots, openmpi[0].port) == (8, None)
    ports = parse_inventory("login2:2222\nlogin3:22\nalice@login4:222\n", "nodes")
    assert [(n.slots, n.port) for n in ports] == [(None, 2222), (None, 22), (None, 222)]


def test_a_nodes_file_saved_with_a_byte_order_mark_is_read(tmp_path):
    """Was: refused ("\ufeffworker-1" is no host name). Editors on Windows save UTF-8 with the mark
    EF BB BF first (as the hosts files in x-falcon/Virtual-Hosts#56 and microsoft/WSL#9642 had it);
    DeepSpeed's own hostfile lines, saved that way."""
    path = tmp_path / "hostfile"
    path.write_bytes(b"\xef\xbb\xbf" + "worker-1 slots=4\nworker-2 slots=4\n".encode())
    nodes = read_inventory(str(path))
    assert [(n.name, n.slots, n.source) for n in nodes] == [("worker-1", 4, f"{path}:1"), ("worker-2", 4, f"{path}:2")]
