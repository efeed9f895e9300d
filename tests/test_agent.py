"""One session per node (transport/agent.py, agent_sh.py), run locally: the same loop the SSH
transport starts on a node, behind a local process instead of a channel."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from clustercheck.transport.agent import FrameReader, Session, request
from clustercheck.transport.base import Outcome
from clustercheck.transport.local import LocalTransport


@pytest.fixture
def node():
    transport = LocalTransport("here")
    yield transport
    transport.close()


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ")[-1][0] != "Z"
    except OSError:
        return False


def wait_gone(pid: int, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_commands_run_in_one_session_with_their_output_and_exit_code(node):
    first = node.run("echo out; echo err >&2; exit 3", 10)
    assert (first.outcome, first.exit_code, first.stdout, first.stderr) == (Outcome.COMMAND_FAILED, 3, "out\n", "err\n")
    assert node.session is not None and not node.session_problem
    loop = node.session
    assert node.run("printf 'no newline'", 10).stdout == "no newline"
    assert node.session is loop   # no new login per command


def test_quotes_newlines_and_long_commands_arrive_unchanged(node):
    tricky = "printf '%s|' 'it'\"'\"'s' \"$((1 + 2))\" '\\n' ; echo\necho second line"
    assert node.run(tricky, 10).stdout == "it's|3|\\n|\nsecond line\n"
    long = "echo " + "x" * 10000 + "; echo tail"   # over INLINE_MAX: sent as a payload
    assert node.run(long, 10).stdout == "x" * 10000 + "\ntail\n"


def test_output_that_looks_like_a_frame_is_only_output(node):
    marker = "\\n@B" + node.run("true", 10).node  # not the session's marker, but frame-shaped
    result = node.run(f"printf '@R 1 0 0\\n{marker}\\n@Z\\n'; printf '\\000\\001' >&2", 10)
    assert result.stdout.startswith("@R 1 0 0\n") and result.stdout.endswith("@Z\n")
    assert result.stderr == "\x00\x01"


def test_a_command_past_its_deadline_is_killed_with_its_children(node, tmp_path):
    pidfile = tmp_path / "child.pid"
    start = time.monotonic()
    result = node.run(f"sleep 300 & echo $! > {pidfile}; wait", 1.0)
    assert result.outcome is Outcome.TIMED_OUT and time.monotonic() - start < 5
    assert wait_gone(int(pidfile.read_text()))
    assert node.run("echo still here", 10).stdout == "still here\n"


def test_what_a_finished_command_left_behind_in_its_group_is_killed(node, tmp_path):
    pidfile = tmp_path / "bg.pid"
    assert node.run(f"sleep 300 >/dev/null 2>&1 & echo $! > {pidfile}", 10).ok
    assert wait_gone(int(pidfile.read_text()))


def test_commands_from_several_threads_are_in_flight_at_once(node):
    from concurrent.futures import ThreadPoolExecutor
    start = time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda i: node.run(f"sleep 1; echo {i}", 10), range(4)))
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(4)]
    assert time.monotonic() - start < 3.5


def test_a_started_command_streams_lines_and_stops_with_its_stderr(node):
    running = node.start("echo one; echo two; echo warn >&2; sleep 300")
    assert running.readline(10) == "one" and running.readline(10) == "two"
    assert running.readline(0.3) is None and running.wait(0.1) is None
    assert running.stop() == "warn\n"
    assert running.wait(1) == 143   # TERM
    ended = node.start("echo x; exit 4")
    assert ended.readline(10) == "x" and ended.wait(10) == 4


def test_files_are_written_byte_for_byte_with_their_mode(node):
    data = bytes(range(256)) * 1000
    path = node.put(data, "blob.bin", 0o750)
    with open(path, "rb") as handle:
        assert handle.read() == data
    assert os.stat(path).st_mode & 0o777 == 0o750
    assert path.startswith(node.session.dir)


def test_closing_kills_what_runs_and_removes_the_directory(tmp_path):
    node = LocalTransport("here")
    pidfile = tmp_path / "pid"
    running = node.start(f"sleep 300 & echo $! > {pidfile}; echo started; wait")
    assert running.readline(10) == "started"
    directory = node.session.dir
    node.close()
    assert not alive(int(pidfile.read_text())), "close returns only once the loop has killed everything"
    assert not os.path.exists(directory)


def test_a_killed_tool_leaves_nothing_running(tmp_path):
    """SIGKILL gives no chance to clean up: the loop sees its stdin end and kills every group."""
    pidfile = tmp_path / "pid"
    script = textwrap.dedent(f"""
        import sys, time
        from clustercheck.transport.local import LocalTransport
        node = LocalTransport("here")
        node.start("sleep 300 & echo $! > {pidfile}; echo started; wait").readline(10)
        print("ready", flush=True)
        time.sleep(300)
    """)
    tool = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert tool.stdout.readline().strip() == "ready"
    os.kill(tool.pid, signal.SIGKILL)
    tool.wait()
    assert wait_gone(int(pidfile.read_text()), 5.0)


def test_a_node_where_the_loop_cannot_start_runs_one_process_per_command(monkeypatch):
    monkeypatch.setenv("TMPDIR", "/nonexistent/clustercheck-test")
    node = LocalTransport("here")
    try:
        result = node.run("echo fallback", 10)
        assert result.stdout == "fallback\n" and node.session is None
        assert "nonexistent" in node.session_problem or "ended" in node.session_problem
    finally:
        node.close()


def test_frames_are_read_whatever_the_chunking():
    boundary = "b" * 32
    marker = b"\n@B" + boundary.encode() + b"\n"
    stream = (b"@H 1 /tmp/x\n@R 7 2 0\nout\n@Bnot-it\n" + marker + b"e" + marker
              + b"@L 9\nline one\n@E 9 0\nwarn" + marker + b"@P 8 0 5\n@Z\n")
    for step in (1, 2, 3, 7, len(stream)):
        sinks: dict = {}
        reader = FrameReader(boundary, lambda frame, i, sinks=sinks: sinks.setdefault((frame.kind, i), bytearray()))
        frames = []
        for at in range(0, len(stream), step):
            frames += reader.feed(stream[at:at + step])
        assert [f.kind for f in frames] == ["@H", "@R", "@L", "@E", "@P", "@Z"]
        assert bytes(sinks[("@R", 0)]) == b"out\n@Bnot-it\n" and bytes(sinks[("@R", 1)]) == b"e"
        assert frames[2].fields == ["9", "line one"] and bytes(sinks[("@E", 0)]) == b"warn"


def test_requests_inline_short_commands_and_ship_long_ones():
    assert request("R", 1, "echo 'a'\nb") == b"R 1 C 'echo '\\''a'\\'''\"$N\"'b'\n"
    long = request("R", 2, "x" * 5000)
    assert long.startswith(b"R 2 F 5000\n") and long.endswith(b"x" * 5000)


def test_session_reports_why_it_did_not_start():
    from clustercheck.transport.agent import AgentUnavailable
    from clustercheck.transport.local import ProcessPipe

    with pytest.raises(AgentUnavailable):
        Session("here", lambda argv: ProcessPipe(["/bin/sh", "-c", "echo cannot start >&2; exit 97"]), 5.0)


def test_a_node_without_head_c_keeps_one_process_per_command(monkeypatch, tmp_path):
    """Without head -c a payload would be read as requests: the loop must refuse to start."""
    import shutil
    for tool in ("mktemp", "mkdir", "mkfifo", "setsid", "cat", "rm", "chmod", "sleep", "wc", "tr"):
        os.symlink(shutil.which(tool), tmp_path / tool)
    monkeypatch.setenv("PATH", str(tmp_path))
    node = LocalTransport("here")
    try:
        assert node.run("echo fallback", 10).stdout == "fallback\n"
        assert node.session is None and "head -c missing" in node.session_problem
    finally:
        node.close()


def test_a_loop_that_hears_nothing_from_its_tool_ends_every_command_by_itself(tmp_path):
    """The tool's connection can vanish without an end reaching the node (a host gone, a cut link, a tool
    stopped by a signal while the socket lingers): past LOST seconds without a line, the loop's watchdog
    ends every command and the loop. Here the pipe stays open and only the heartbeat stops."""
    from clustercheck.transport import heartbeat
    from clustercheck.transport.local import ProcessPipe

    session = Session("silent", ProcessPipe, 30.0, lost_after_s=3)
    heartbeat.forget(session)   # no heartbeat for this one: the tool "is gone"
    pid_file = tmp_path / "pid"
    running = session.start(f"echo $$ > {pid_file}; exec sleep 300")
    deadline = time.monotonic() + 5
    while not pid_file.exists() or not pid_file.read_text().strip():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    pid = int(pid_file.read_text())
    assert alive(pid)
    assert wait_gone(pid, within_s=3 + 4), "the command outlived the loop's watchdog"
    assert running.wait(5) is not None or session.dead
    session.abandon()


def test_a_loop_that_hears_the_heartbeat_keeps_its_commands(tmp_path):
    from clustercheck.transport import heartbeat
    from clustercheck.transport.local import ProcessPipe

    session = Session("beating", ProcessPipe, 30.0, lost_after_s=2)
    try:
        stop = time.monotonic() + 5
        while time.monotonic() < stop:   # the heartbeat, faster than the module's, for a short LOST
            session.beat()
            time.sleep(0.3)
        assert session.run("echo still here", 10).stdout == "still here\n"
    finally:
        heartbeat.forget(session)
        session.close()
