import os
import time

from clustercheck.core.errors import EXIT_FAIL, EXIT_OK
from clustercheck.transport.base import Outcome
from clustercheck.transport.local import LocalTransport
from tests.conftest import clustercheck, leftover


def test_exit_codes_and_streams():
    node = LocalTransport()
    try:
        result = node.run("echo out; echo err >&2; exit 7", 10)
        assert result.outcome is Outcome.COMMAND_FAILED
        assert (result.exit_code, result.stdout, result.stderr) == (7, "out\n", "err\n")
        assert node.run("true", 10).ok
    finally:
        node.close()


def test_deadline_kills_the_command_and_its_children():
    node = LocalTransport()
    try:
        start = time.monotonic()
        # A child that ignores TERM and a grandchild in the background: the whole group must go.
        result = node.run("trap '' TERM; sleep 600.31 & sleep 600.32", 1)
        assert result.outcome is Outcome.TIMED_OUT
        assert time.monotonic() - start < 6
        time.sleep(0.3)
        assert leftover("sleep 600.3") == 0
    finally:
        node.close()


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


def test_a_loud_command_never_blocks_on_its_stderr_while_stdout_is_followed():
    """A rank that writes megabytes to stderr (NCCL_DEBUG, TORCH_DISTRIBUTED_DEBUG) keeps running:
    the pipe is drained whatever the caller reads, and the tail of stderr is kept."""
    node = LocalTransport()
    loud = ("python3 -c \"import sys; [sys.stderr.write('noise %06d ' % i + 'x' * 90 + chr(10)) for i in "
            "range(30000)]; sys.stderr.write('the telling last line' + chr(10)); print('done', flush=True)\"")
    running = node.start(loud)
    try:
        assert running.readline(30) == "done"   # 3 MB of stderr first: a pipe read only for stdout blocks at 64 KiB
        assert running.wait(10) == 0
        err = running.stop()
        assert err.rstrip().endswith("the telling last line") and err.startswith("noise 000000")
    finally:
        node.close()
