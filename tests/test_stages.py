"""The stage shape: one runner over stages it knows only through their interface, each stage's own
skip rule, reproduce-with commands derived from the options given, and the layout rules
(no stage imports another, small modules, thin commands)."""

import ast
import os
import shlex
import sys

import click
import pytest

from clustercheck.cli import cli
from clustercheck.core.inventory import Node
from clustercheck.core.result import Finding, Status
from clustercheck.node.gather import ProbeOptions
from clustercheck.preflight.options import PreflightOptions, preflight_stages
from clustercheck.ranks.runs import RanksRun, NodeRun
from clustercheck.runner.options import ClusterOptions, from_params, to_args
from clustercheck.runner.stage import Stage, StageResult, run_stages
from clustercheck.stages.bench.facts import BenchFacts
from clustercheck.stages.bench.options import BenchOptions
from clustercheck.stages.bench.stage import BenchStage
from clustercheck.stages.smoke.options import SmokeOptions
from clustercheck.stages.smoke.stage import SmokeStage
from clustercheck.transport.fanout import FanoutOptions

ROOT = os.path.join(os.path.dirname(__file__), "..", "clustercheck")
STAGE_PACKAGES = ("env", "device", "net", "bench", "smoke")


class Probing(Stage):
    """A stage that needs the nodes' documents, fails, and stops every later stage that launches ranks."""

    name = "probing"

    def gather(self, layer):
        return layer.probed(ProbeOptions(timeout_s=30))

    def judge(self, facts):
        return [Finding("probing.done", Status.FAIL, f"probed {len(facts)} node(s)")]

    def blocks(self, result, later):
        return "probing failed" if later.launches_ranks else ""


class Launching(Stage):
    name = "launching"
    launches_ranks = True
    gathered = False

    def gather(self, layer):
        Launching.gathered = True
        return layer.probed()

    def judge(self, facts):
        return []


class Listening(Probing):
    """Needs the nodes too, but launches nothing: not stopped by Probing."""

    name = "listening"

    def judge(self, facts):
        return [Finding("listening.done", Status.OK, "fine")]


def test_the_runner_runs_new_stages_skips_by_their_rules_and_judges_the_nodes_once():
    stages = [Probing(None), Launching(None), Listening(None)]
    run = run_stages(stages, [Node("localhost")], FanoutOptions())
    probing, launching, listening = run.stages
    assert probing.ran and launching.skipped == "probing failed" and not Launching.gathered
    assert listening.ran and [f.check for f in listening.findings] == ["listening.done"]
    shared = [f.check for f in probing.findings if f.check != "probing.done"]
    assert "reach" in shared and "hostname.unique" in shared        # the node layer's judges, once, first stage
    assert run.exit_code == 2


def launch(name, exit_codes):
    return RanksRun(name, {node: NodeRun(node, exit_code=code) for node, code in exit_codes.items()}, 1.0, {})


def bench_result(launches):
    facts = BenchFacts([Node("a"), Node("b")], [], stages=launches)
    return StageResult("bench", facts=facts)


def test_failed_pairwise_ranks_skip_smoke_and_a_clean_bench_does_not():
    bench, smoke = BenchStage(BenchOptions()), SmokeStage(SmokeOptions())
    clean = bench_result([launch("torchrun", {"a": 0, "b": 0})])
    assert bench.blocks(clean, smoke) == ""
    broken = bench_result([launch("torchrun", {"a": 0, "b": 1})])
    assert bench.blocks(broken, smoke) == "the bench's ranks failed: the torchrun launch on b"
    hung = bench_result([launch("torchrun", {"a": None, "b": 0})])
    assert bench.blocks(hung, smoke) == "the bench's ranks failed: the torchrun launch on a"


def parse_back(command):
    """The options the single command would run with, parsed by its own command line."""
    words = shlex.split(command)
    assert words[0] == "clustercheck"
    # under the group's context, as `clustercheck <command>` parses it: click caches a command's help option the
    # first time it makes one, and a command parsed alone would keep "--help" without the group's "-h"
    parent = click.Context(cli, info_name="clustercheck", **cli.context_settings)
    sub = cli.get_command(parent, words[1])
    ctx = sub.make_context(words[1], words[2:], parent=parent)
    return ctx.params


def test_reproduce_with_commands_carry_every_option_given_and_parse_back_to_the_same_options(tmp_path):
    thresholds = tmp_path / "cc.toml"
    thresholds.write_text("[env]\nnofile_min = 1024\n")
    options = PreflightOptions(workdir="/scratch/run", config_path=str(thresholds), master_port=29555,
                               attempt_timeout_s=2.0, bench_max_bytes=4 * 2 ** 20, pairwise="off", smoke_mode="zero2",
                               smoke_steps=12, timeout_s=120.0)
    cluster = ClusterOptions(nodes_file="nodes.txt", ssh_config="ssh cfg", python_path="/opt/py", fanout=16,
                             connect_timeout_s=3.0, known_hosts=("kh1", "kh2"), accept_new_hostkeys=True)
    for stage in preflight_stages(options):
        command = stage.command(to_args(cluster))
        for flag in ("--connect-timeout 3", "--fanout 16", "--python /opt/py", "--accept-new-hostkeys",
                     "--known-hosts kh1 --known-hosts kh2", "-F 'ssh cfg'"):
            assert flag in command, (flag, command)
        params = parse_back(command)
        assert from_params(ClusterOptions, params) == cluster
        assert from_params(type(stage.options), params) == stage.options, command
    commands = {s.name: s.command([]) for s in preflight_stages(options)}
    assert "--workdir /scratch/run" in commands["env"] and f"--config {thresholds}" in commands["env"]
    assert "--timeout 120" in commands["bench"] and "--timeout 120" in commands["smoke"]
    assert "-e 4M" in commands["bench"] and "--pairwise off" in commands["bench"]


# ---- the layout the code keeps ---------------------------------------------------------------
def modules():
    for folder, _, files in os.walk(ROOT):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                yield os.path.relpath(path, ROOT), path


def imported(path):
    tree = ast.parse(open(path).read())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            yield node.module, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []


@pytest.mark.parametrize("stage", STAGE_PACKAGES)
def test_a_stage_imports_no_other_stage(stage):
    others = {f"clustercheck.stages.{s}" for s in STAGE_PACKAGES if s != stage}
    mine = [(rel, path) for rel, path in modules() if rel.startswith(os.path.join("stages", stage) + os.sep)]
    assert mine, stage   # the stage's package is where the layout says
    for rel, path in mine:
        for module, names in imported(path):
            targets = {module} | {f"{module}.{n}" for n in names}
            assert not any(t == o or t.startswith(o + ".") for t in targets for o in others), (rel, module)


def test_every_command_body_is_at_most_15_lines():
    commands = os.path.join(ROOT, "commands")
    for name in os.listdir(commands):
        if not name.endswith(".py"):
            continue
        tree = ast.parse(open(os.path.join(commands, name)).read())
        for func in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.decorator_list]:
            body = func.body[1:] if ast.get_docstring(func) else func.body
            if not body:   # a click group: its docstring is all it has
                continue
            lines = body[-1].end_lineno - body[0].lineno + 1
            assert lines <= 15, f"{name}:{func.name} has {lines} lines of body"


def test_the_runner_names_no_stage():
    source = open(os.path.join(ROOT, "runner", "stage.py")).read()
    for stage in STAGE_PACKAGES:
        assert f'"{stage}"' not in source and f"'{stage}'" not in source


def test_a_stages_own_documents_are_judged_but_never_stand_for_the_probe():
    """net's listeners report host / net / env only: after `preflight --skip env` bench and smoke must
    still see each node's packages and GPUs, or every node would look as if it lacked torch."""
    from clustercheck.node.facts import Probed
    from clustercheck.node.layer import NodeLayer
    from clustercheck.transport.fanout import Cluster

    nodes = [Node("localhost", python=sys.executable)]   # the interpreter under test (scripts/test.sh's PYTHON=)
    listener = {"schema": 1, "host": {"hostname": "localhost", "resolves": {}}, "net": {"interfaces": {}}, "env": {}}
    with Cluster(nodes) as cluster:
        layer = NodeLayer(cluster, nodes)
        layer.offer([Probed(nodes[0], facts=listener)])
        assert [f.check for f in layer.take_findings()][:2] == ["reach", "hostname.unique"]
        [probed] = layer.probed(ProbeOptions(timeout_s=30))
        assert "packages" in probed.facts and "torch" in probed.facts["packages"]["versions"]
        assert layer.take_findings() == []   # judged once per run


# ---- the answer a flag asked for (issue 42): shown whatever its status, never folded --------------------------
def stage_classes():
    from clustercheck.stages.device.options import DeviceOptions
    from clustercheck.stages.device.stage import DeviceStage
    from clustercheck.stages.env.options import EnvOptions
    from clustercheck.stages.env.stage import EnvStage
    from clustercheck.stages.net.options import NetOptions
    from clustercheck.stages.net.stage import NetStage
    from clustercheck.stages.storage.options import StorageOptions
    from clustercheck.stages.storage.stage import StorageStage
    return [(EnvStage, EnvOptions), (DeviceStage, DeviceOptions), (StorageStage, StorageOptions),
            (NetStage, NetOptions), (BenchStage, BenchOptions), (SmokeStage, SmokeOptions)]


@pytest.mark.parametrize("stage,options", stage_classes(), ids=lambda s: getattr(s, "name", ""))
def test_every_answers_table_names_flags_the_stage_has(stage, options):
    import dataclasses
    flags = {f.name for f in dataclasses.fields(options) if f.metadata.get("decls")}
    assert stage.answers, f"{stage.name} answers no flag"
    assert set(stage.answers) <= flags, set(stage.answers) - flags


def test_a_figure_asked_by_a_flag_is_shown_without_v_and_one_not_asked_stays_folded():
    from clustercheck.display.findings import findings_lines
    from clustercheck.runner.stage import mark_answers
    found = [Finding("bench.expected.all_reduce", Status.OK, "all_reduce: 95% of expected 100 GB/s"),
             Finding("bench.bandwidth.all_gather", Status.OK, "all_gather: avg bus bandwidth 80 GB/s"),
             Finding("bench.data", Status.OK, "every result checked correct")]
    mark_answers(BenchStage(BenchOptions()), found)
    assert not any(f.answers for f in found)          # nothing asked: everything OK folds
    assert findings_lines(found)[0] == "OK    3 checks passed (-v lists them)"
    mark_answers(BenchStage(BenchOptions(expect_busbw=100.0, collectives=("all_reduce", "all_gather"))), found)
    assert [f.answers for f in found] == ["--expect-busbw 100, --collectives all_reduce,all_gather",
                                          "--collectives all_reduce,all_gather", ""]
    lines = findings_lines(found)
    assert lines[:4] == ["OK    all_reduce: 95% of expected 100 GB/s",
                         "        (asked by --expect-busbw 100, --collectives all_reduce,all_gather)",
                         "OK    all_gather: avg bus bandwidth 80 GB/s",
                         "        (asked by --collectives all_reduce,all_gather)"]
    assert "OK    1 checks passed (-v lists them)" in lines and lines[-1] == "Verdict: READY (3 passed)"
    assert found[0].to_dict()["answers"].startswith("--expect-busbw 100") and "answers" not in found[2].to_dict()


def test_the_docs_list_every_flag_whose_figure_is_always_shown():
    """docs/checks.md's table says, for every command, which flags ask for a figure shown whatever its status."""
    import dataclasses
    text = open(os.path.join(ROOT, "..", "docs", "checks.md")).read()
    rows = {line for line in text.splitlines() if line.startswith("| `")}
    for stage, options in stage_classes():
        long = {f.name: next(d for d in f.metadata["decls"] if d.startswith("--")).split("/")[0]
                for f in dataclasses.fields(options) if f.metadata.get("decls")}
        for name, checks in stage.answers.items():
            assert any(row.startswith(f"| `{stage.name}` |") and f"`{long[name]}`" in row
                       and all(f"`{check}" in row for check in checks) for row in rows), (stage.name, long[name])
