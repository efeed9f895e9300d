import os
import shutil
import subprocess
import sys
import time
from typing import List

import pytest

from clustercheck.sandbox import Sandbox, down, faults, missing_requirements
from tests import leftovers

SANDBOX_NODES = 4
SANDBOX_GROUP = "sandbox"
# The sandbox's nodes share this host's programs: a READY verdict needs pdsh here, as DeepSpeed's
# launcher needs it on a real launch node (scripts/test.sh installs it). Said, not silently assumed.
needs_pdsh = pytest.mark.skipif(shutil.which("pdsh") is None,
                                reason="pdsh is not installed on this host (scripts/test.sh installs it); without it "
                                       "env rightly warns and a READY verdict cannot be expected")
_sandbox_counts = {"passed": 0, "failed": 0, "skipped": 0}
_skip_reason = []


def interpreter_hidden_from_nodes() -> List[str]:
    """The nodes run the interpreter under test (--python sys.executable): one under /tmp they cannot see,
    for each node has a /tmp of its own, as on a real cluster (scripts/test.sh's PYTHON= a venv there)."""
    paths = {os.path.abspath(sys.executable), os.path.realpath(sys.executable), sys.prefix, sys.base_prefix}
    hidden = sorted(p for p in paths if any(f"{seen}/".startswith("/tmp/") for seen in (p, os.path.realpath(p))))
    if not hidden:
        return []
    return [f"an interpreter the sandbox's nodes can see: {sys.executable} lies under /tmp ({', '.join(hidden)}), "
            "and each node has a /tmp of its own; make the virtual environment outside /tmp "
            "(PYTHON=~/venvs/cc/bin/python scripts/test.sh)"]


@pytest.hookimpl(tryfirst=True)    # before xdist's own, which reads the group
def pytest_collection_modifyitems(config, items):
    sandboxed = [item for item in items if "sandbox" in item.keywords]
    for item in sandboxed:
        # one worker runs every sandbox test, one after the other (scripts/test.sh: --dist loadgroup): one
        # cluster of namespaces at a time on this host, the unit tests beside it on the other workers
        item.add_marker(pytest.mark.xdist_group(SANDBOX_GROUP))
    problems = missing_requirements() + interpreter_hidden_from_nodes()
    if problems and sandboxed:
        _skip_reason.append("; ".join(problems))
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:   # said once, before any test runs, not once per skipped test
            reporter.write_line(f"{len(sandboxed)} sandbox tests will be skipped; they need: "
                                + "; ".join(problems))
        marker = pytest.mark.skip(reason="sandbox tests need: " + "; ".join(problems))
        for item in sandboxed:
            item.add_marker(marker)


def pytest_configure(config):
    """Under xdist the workers collect, out of sight: the controller says why the sandbox tests will skip."""
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        problems = missing_requirements() + interpreter_hidden_from_nodes()
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if problems and reporter is not None:
            reporter.write_line("the sandbox tests will be skipped; they need: " + "; ".join(problems))
            _skip_reason.append("; ".join(problems))


def pytest_runtest_logreport(report):
    if "sandbox" not in report.keywords:
        return
    if report.when == "call":
        _sandbox_counts["passed" if report.passed else "failed"] += 1
    elif report.skipped:
        _sandbox_counts["skipped"] += 1


def pytest_terminal_summary(terminalreporter):
    counts = _sandbox_counts
    line = f"sandbox tests: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped"
    if _skip_reason:
        line += f" (skipped because: {_skip_reason[0]})"
    terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def sandbox():
    """A 4-node sandbox of our own (unique name and subnet), removed at the end."""
    name = f"t{os.getpid() % 10000}"
    box = Sandbox.up(SANDBOX_NODES, name)
    try:
        yield box
    finally:
        down(name)


# How long the tool's processes may take to go once a run ended: the launch's stop (TERM, KILL a second later,
# the sweep's 10 s bound), on a host loaded by the rest of the suite.
STOP_DEADLINE_S = 15.0


def fail_on_leftovers(since: int, node_prefix=None, where: str = "") -> None:
    """Fail the test that left the tool's processes running (naming node and process), after killing them, so
    that the next test starts clean and the leak is reported where it was made."""
    left = leftovers.wait_gone(node_prefix, STOP_DEADLINE_S, since)
    if left:
        leftovers.kill(left)
        pytest.fail(f"{where}{leftovers.describe(left)}", pytrace=False)


@pytest.fixture(autouse=True)
def nothing_left_on_the_host():
    """Every test: what it started on this host (a local transport, a local torchrun) is gone when it ends."""
    since = leftovers.now_ticks()
    yield
    fail_on_leftovers(since, node_prefix="\0", where="left on this host by the test: ")


HOG = "import time\nend = time.monotonic() + 600\nwhile time.monotonic() < end:\n    pass\n"


@pytest.fixture
def loaded_host():
    """The host loaded as the whole suite loads it: a busy process on one of its cores for the test's length
    (bounded at 600 s, killed at the end), so that a stop's deadline is held on a busy host, not an idle one."""
    hog = subprocess.Popen([sys.executable, "-c", HOG], stdin=subprocess.DEVNULL)
    try:
        yield hog
    finally:
        hog.kill()
        hog.wait()


@pytest.fixture
def box(sandbox):
    """The shared sandbox, with every fault a test made undone afterwards, and nothing of the tool's left
    running on any node (the test that leaves something fails, naming it)."""
    since = leftovers.now_ticks()
    yield sandbox
    try:
        fail_on_leftovers(since, node_prefix=f"{sandbox.name}-n", where="left on the sandbox's nodes: ")
    finally:
        faults.clear_all(sandbox)


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def clustercheck(*args, timeout=120, **kwargs):
    """Run the real command line, as a user would: this checkout's, from whatever directory (cwd=)."""
    env = dict(kwargs.pop("env", None) or os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "clustercheck", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, **kwargs)


def leftover(pattern: str) -> int:
    """How many processes of this test session (its sandboxes' nodes, and the host's with its mark) match
    pattern (pgrep -f's way): another run's on the same host are not counted."""
    return len(leftovers.clustercheck_processes(pattern=pattern))


class Gone:
    """Whether nothing matches; false, it says what is left, on which node (pytest prints it)."""

    def __init__(self, pattern: str, left: List["leftovers.Left"]):
        self.pattern, self.left = pattern, left

    def __bool__(self) -> bool:
        return not self.left

    def __repr__(self) -> str:
        return f"nothing matching {self.pattern!r} left" if not self.left else \
            f"{self.pattern!r}: {leftovers.describe(self.left)}"


def gone(pattern: str, within_s: float = 3.0) -> Gone:
    """No process matches pattern, allowing within_s for channels closing and guards exiting."""
    deadline = time.monotonic() + within_s
    left = leftovers.clustercheck_processes(pattern=pattern)
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = leftovers.clustercheck_processes(pattern=pattern)
    return Gone(pattern, left)
