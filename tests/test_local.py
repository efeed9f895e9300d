import os
import time

from clustercheck.errors import EXIT_FAIL, EXIT_OK
from clustercheck.transport.base import Outcome
from clustercheck.transport.local import LocalTransport
from tests.conftest import clustercheck, leftover


def test_exit_codes_and_streams():
    node = LocalTransport()
    result = node.run("echo out; echo err >&2; exit 7", 10)
    assert result.outcome is Outcome.COMMAND_FAILED
    assert (result.exit_code, result.stdout, result.stderr) == (7, "out\n", "err\n")
    assert node.run("true", 10).ok


def test_deadline_kills_the_command_and_its_children():
    node = LocalTransport()
    start = time.monotonic()
    # A child that ignores TERM and a grandchild in the background: the whole group must go.
    result = node.run("trap '' TERM; sleep 600.31 & sleep 600.32", 1)
    assert result.outcome is Outcome.TIMED_OUT
    assert time.monotonic() - start < 6
    time.sleep(0.3)
    assert leftover("sleep 600.3") == 0


def test_put_goes_to_a_private_temp_dir_removed_on_close():
    node = LocalTransport()
    path = node.put(b"print('hi')\n", "probe.py")
    assert open(path).read() == "print('hi')\n"
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert node.run(f"python3 {path}", 10).stdout == "hi\n"
    node.close()
    assert not os.path.exists(os.path.dirname(path))


def test_run_without_a_nodes_file_uses_this_machine():
    proc = clustercheck("run", "--", "echo", "hello")
    assert proc.returncode == EXIT_OK
    assert "localhost (1)" in proc.stdout and "hello" in proc.stdout
    assert "ok: 1/1 nodes" in proc.stdout
    failing = clustercheck("run", "--", "exit 4")
    assert failing.returncode == EXIT_FAIL
    assert "command failed: localhost: exit code 4" in failing.stdout
