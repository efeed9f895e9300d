"""--baseline and --require files as users have them (issue 42): pip-compile's locked files with hashes, pip list
--format=json, conda list --export, an environment.yml's pip section, markers, extras, -r includes and -c
constraints relative to the file. Every file under tests/data/requirements is a real one from a public repository
(SOURCES.md there); a variant is made in the test by changing a copy of one."""

import os
import shutil

import pytest

from clustercheck.core.errors import InputError
from clustercheck.core.reqfile import read_requirements_file, requirements_argument
from clustercheck.core.result import Status
from clustercheck.core.thresholds import Config
from clustercheck.stages.env import baseline, packages
from clustercheck.stages.env.judges import evaluate
from tests.conftest import clustercheck
from tests.test_env_rules import DATA, cluster, set_version

REQS = os.path.join(DATA, "requirements")
PROXPI = os.path.join(REQS, "proxpi-app.requirements.txt")         # pip-compile --generate-hashes
CONDA = os.path.join(REQS, "eco4cast-conda-export.txt")            # conda list --export
PIP_LIST = os.path.join(REQS, "pifire-pip-list.json")              # pip list --format=json
ENV_YML = os.path.join(REQS, "conda-advanced-pip-environment.yml")  # an environment.yml with -e, -r in pip:
CONSTRAINTS = os.path.join(REQS, "pip-tools-constraints.txt")      # pip-compile output used as -c


def held(path, change=None, num_nodes=3, **versions):
    """The baseline file's findings on nodes that have its packages at `versions` (name -> version or None)."""
    wanted = baseline.read_baseline(path)

    def install(i, doc):
        for name, want in wanted.packages.items():
            if want.pinned:
                set_version(doc, name, want.pinned)
        for name, version in versions.items():
            set_version(doc, name.replace("_", "-"), version)
        if change:
            change(i, doc)
    probed = cluster(num_nodes, install)
    values = evaluate(probed, Config()).values
    return wanted, baseline.against_baseline(wanted, packages.package_view(probed), values, packages.PackagePolicy())


def test_a_pip_compile_file_with_hashes_is_read_whole_and_a_drifted_node_is_named():
    wanted, [ok] = held(PROXPI)
    # 17 packages, not the first one only: charset-normalizer alone is continued over 97 hash lines
    assert len(wanted.packages) == 17 and wanted.packages["charset-normalizer"].pinned == "3.3.2"
    assert ok.status is Status.OK and ok.summary == f"every node matches the baseline {PROXPI} (17 packages, 0 facts)"

    def older_flask(i, doc):
        if i == 1:
            set_version(doc, "flask", "3.0.2")
    _, [drift] = held(PROXPI, older_flask)
    assert drift.status is Status.WARN and drift.nodes == ["node02"]
    assert drift.evidence == ["flask 3.0.3 -> 3.0.2 on node02"]


def test_a_broken_line_inside_a_continued_requirement_is_named_by_its_first_line(tmp_path):
    text = open(PROXPI).read()
    path = tmp_path / "requirements.txt"
    path.write_text(text.replace("flask==3.0.3 \\", "flask=>3.0.3 \\"))
    number = text.splitlines().index("flask==3.0.3 \\") + 1
    with pytest.raises(InputError) as caught:
        baseline.read_baseline(str(path))
    assert str(caught.value).startswith(f"{path}:{number}: not a package requirement")
    assert "'flask=>3.0.3'" in str(caught.value)


def test_pip_list_json_pins_every_package_and_a_node_without_one_is_named():
    def no_numpy(i, doc):
        if i == 2:
            set_version(doc, "numpy", None)
    wanted, findings = held(PIP_LIST, no_numpy)
    assert len(wanted.packages) == 56 and wanted.packages["python-dateutil"].pinned == "2.9.0.post0"
    [gone] = [f for f in findings if f.status is not Status.OK]
    assert gone.nodes == ["node03"] and gone.evidence == ["numpy 2.2.5 -> not installed on node03"]


def test_conda_export_requires_pips_packages_and_holds_condas_only_where_the_node_has_them():
    wanted, [ok] = held(CONDA, numpy=None, pip=None, python=None)
    assert ok.status is Status.OK                       # conda's numpy, pip, python: not installed by pip, not needed
    assert not wanted.packages["torch"].constraint and wanted.packages["torch"].pinned == "2.0.1"
    assert wanted.packages["numpy"].constraint and "jpeg" not in wanted.packages    # 9e is no Python version

    def other_numpy(i, doc):
        if i == 0:
            set_version(doc, "numpy", "1.26.4")
    _, [numpy] = held(CONDA, other_numpy)
    assert numpy.nodes == ["node01"] and numpy.evidence == ["numpy 1.24.3 -> 1.26.4 on node01"]


def test_an_environment_yml_pip_section_with_editables_and_an_include_relative_to_it(tmp_path):
    yml = tmp_path / "env" / "environment.yml"
    yml.parent.mkdir()
    shutil.copy(ENV_YML, yml)
    with pytest.raises(InputError) as caught:           # its -r names a file that is not there: line 27 says so
        read_requirements_file(str(yml))
    assert str(caught.value).startswith(f"{yml}:27: the file it includes cannot be read") \
        and "another-project-requirements.txt" in str(caught.value)
    # the included file, beside the environment.yml, itself constrained by a pip-compile output one folder up
    shutil.copy(CONSTRAINTS, tmp_path / "constraints.txt")
    (yml.parent / "another-project-requirements.txt").write_text("-c ../constraints.txt\ndjango[argon2]>=4\n")
    read = read_requirements_file(str(yml))
    assert sorted(read.wanted) == ["argh", "asgiref", "attrs", "django", "editables", "hatchling", "iniconfig",
                                   "packaging", "pathspec", "pluggy", "py", "pyparsing", "pytest", "sqlparse",
                                   "tomli", "xmltodict"]
    django = read.wanted["django"]
    assert not django.constraint and django.specifier == "==4.1,>=4" and django.allows("4.1")
    assert not django.allows("4.2") and read.wanted["pytest"].constraint and read.wanted["pytest"].allows(None)
    assert read.skipped == [f"{yml}:22: -e ./module_to_install_in_editable_mode (an editable without #egg=NAME: "
                            f"which package?)"]
    assert read.files == [str(yml), str(yml.parent / "another-project-requirements.txt"),
                          str(tmp_path / "constraints.txt")]


def test_a_marker_holds_a_requirement_only_on_the_nodes_whose_python_it_names(tmp_path):
    path = tmp_path / "requirements.txt"
    path.write_text('tomli>=1.1 ; python_version < "3.11"\nexceptiongroup==1.2.0 ; python_version < "3.12"\n'
                    'torch==2.13.0+cpu\n')

    def python(i, doc):
        doc["python"]["version"] = "3.10.14" if i == 0 else "3.11.7"
        set_version(doc, "tomli", None)
        set_version(doc, "exceptiongroup", "1.2.0")
    wanted, findings = held(str(path), python)
    [missing] = [f for f in findings if f.status is not Status.OK]
    assert missing.nodes == ["node01"] and missing.evidence == ["tomli >=1.1 -> not installed on node01"]


def test_require_takes_a_file_and_many_met_are_one_line():
    wanted = requirements_argument(PROXPI)
    assert len(wanted) == 17
    probed = cluster(2, lambda i, doc: [set_version(doc, w.name, w.pinned) for w in wanted])
    [ok] = packages.required(packages.package_view(probed), wanted)
    assert ok.status is Status.OK and ok.summary == "17 required packages met on every node"
    assert requirements_argument("flash-attn>=2.6")[0].specifier == ">=2.6"


@pytest.mark.parametrize("make, words", [
    (lambda d: "requirements.txt", ["requirements.txt", "no such requirements file"]),
    (lambda d: d.joinpath("r.txt").write_text("torch==2.5\n-r more.txt\n") and str(d / "r.txt"),
     ["r.txt:2:", "more.txt"]),
    (lambda d: d.joinpath("r.txt").write_text("torch==2.5 \\\n    --hash=sha256:00\nnumpy>=>1\n") and
     str(d / "r.txt"), ["r.txt:3:", "not a package requirement", "'numpy>=>1'"]),
])
def test_a_bad_require_file_is_refused_before_any_node_naming_file_and_line(tmp_path, make, words):
    proc = clustercheck("env", "nodes-that-do-not-exist.invalid", "--require", make(tmp_path), cwd=str(tmp_path))
    assert proc.returncode == 64 and "Traceback" not in proc.stderr
    assert all(word in proc.stderr for word in words), proc.stderr
