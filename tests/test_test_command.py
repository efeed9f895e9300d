"""The test command with a user's own interpreter (scripts/test.sh's PYTHON=): a virtual environment under
/tmp, which the sandbox's nodes cannot see (each has a /tmp of its own), is said once before any test runs,
and the sandbox tests are skipped with that reason instead of failing one by one."""

import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SANDBOX_TEST = '''import pytest
pytestmark = pytest.mark.sandbox


def test_one():
    raise AssertionError("a sandbox test ran with an interpreter its nodes cannot see")


def test_two():
    raise AssertionError("a sandbox test ran with an interpreter its nodes cannot see")
'''


def test_an_interpreter_under_tmp_is_said_once_and_the_sandbox_tests_skip_with_the_reason():
    venv = tempfile.mkdtemp(prefix="clustercheck-venv-", dir="/tmp")
    try:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=120)
        tests = os.path.join(venv, "test_sandbox_standin.py")
        with open(tests, "w") as handle:
            handle.write(SANDBOX_TEST)
        # the venv's interpreter with the packages of the one running this test (pytest, clustercheck, ...)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT] + [p for p in sys.path if p]))
        proc = subprocess.run([os.path.join(venv, "bin", "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "-p", "tests.conftest", tests], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=300)
    finally:
        shutil.rmtree(venv, ignore_errors=True)
    said = [line for line in proc.stdout.splitlines()
            if line.startswith("2 sandbox tests will be skipped; they need: ")]
    assert proc.returncode == 0 and "2 skipped" in proc.stdout, proc.stdout + proc.stderr
    assert len(said) == 1 and f"{venv}/bin/python lies under /tmp" in said[0]
    assert "make the virtual environment outside /tmp" in said[0]
    assert proc.stdout.index(said[0]) < proc.stdout.index("ss")   # before the tests, not after
