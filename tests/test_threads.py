"""Every thread the tool starts has a stop and is joined within a deadline (core/threads.py), so an interrupted
run's interpreter exits as it normally does."""

import os
import signal
import subprocess
import sys
import threading
import time

from clustercheck.core import threads
from tests.conftest import ROOT


def test_stop_all_calls_every_stop_newest_first_and_joins_them():
    order, events = [], [threading.Event() for _ in range(3)]
    for i, event in enumerate(events):
        threads.start(event.wait, f"t-{i}", stop=lambda i=i, e=event: (order.append(i), e.set()))
    assert {"t-0", "t-1", "t-2"} <= set(threads.running())
    assert threads.stop_all(2.0) == [] and order[:3] == [2, 1, 0]
    assert not {"t-0", "t-1", "t-2"} & set(threads.running())


def test_a_thread_that_will_not_stop_is_named_at_the_deadline():
    stuck = threading.Event()
    threads.start(stuck.wait, "never-stops")          # no stop: only its own end ends it
    start = time.monotonic()
    assert "never-stops" in threads.stop_all(0.3) and time.monotonic() - start < 2
    stuck.set()


def test_an_interrupted_command_exits_through_the_interpreter_not_a_forced_exit(tmp_path):
    """`clustercheck run -- sleep` on this machine, Ctrl-C'd: 130, and atexit handlers ran (an os._exit skips
    them): the tool's threads were stopped first."""
    marker = tmp_path / "atexit-ran"
    code = (f"import atexit, sys; atexit.register(lambda: open({str(marker)!r}, 'w').write('yes')); "
            f"sys.argv = ['clustercheck', 'run', '--timeout', '60', '--', 'sleep', '702.5']; "
            f"from clustercheck.__main__ import run; run()")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=ROOT))
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err[-2000:]
    assert "still in a blocking call" not in err and marker.read_text() == "yes", err[-2000:]


def test_a_ctrl_c_python_re_raised_as_another_error_is_an_interruption():
    """Ctrl-C while a dataclass is being defined (a module loading) comes out of Python 3.11 as "RuntimeError: Error
    calling __set_name__ ..." with the KeyboardInterrupt as its cause: exit 130, never a traceback and exit 1."""
    from clustercheck.core.errors import caused_by_interrupt
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as interrupt:
            raise RuntimeError("Error calling __set_name__ on 'Field' instance 'faults' in 'GpuReport'") from interrupt
    except RuntimeError as exc:
        assert caused_by_interrupt(exc)
    assert not caused_by_interrupt(RuntimeError("a failure of its own"))
