"""The layout holds: small modules and functions, no import circle, the trainer never imported by the
tool, judges that load neither click nor paramiko, and docs/architecture.md naming every module."""

import ast
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
PACKAGES = ("clustercheck", "reference_train")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80
# The judges: pure functions from gathered facts to findings, importable where neither the CLI nor SSH is.
JUDGE_FILES = ("rules.py", "judges.py", "classify.py", "forensics.py", "fit.py", "topology.py", "xid.py",
               "gpu_health.py", "dcgm.py", "path_judge.py", "impossible_facts.py", "diag_judge.py", "ras_judge.py")


def modules():
    """{dotted name: path} of every module of both packages."""
    found = {}
    for package in PACKAGES:
        for folder, _, files in os.walk(os.path.join(ROOT, package)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    dotted = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                    found[dotted.removesuffix(".__init__")] = path
    return found


def imports(path, known):
    """The modules of `known` that the file at `path` imports, anywhere in it (functions too)."""
    out = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                target = f"{node.module}.{alias.name}"
                out.add(target if target in known else node.module)
        elif isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
    return {name for name in out if name in known}


def test_no_module_is_over_400_lines():
    long = {path: sum(1 for _ in open(path)) for path in modules().values()}
    assert not {p: n for p, n in long.items() if n > MAX_MODULE_LINES}


def test_no_function_is_over_80_lines():
    long = []
    for path in modules().values():
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{os.path.relpath(path, ROOT)}:{node.name} has {lines} lines")
    assert not long


def test_no_import_circle():
    known = modules()
    graph = {name: imports(path, known) - {name} for name, path in known.items()}
    # a package's __init__ importing its own modules is how packages load, not a circle between rooms
    graph = {name: {t for t in targets if not t.startswith(name + ".")} for name, targets in graph.items()}
    state, circles = {}, []

    def visit(name, trail):
        state[name] = "open"
        for target in sorted(graph[name]):
            if state.get(target) == "open":
                circles.append(" -> ".join(trail[trail.index(target):] + [target]))
            elif target not in state:
                visit(target, trail + [target])
        state[name] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not circles


def test_clustercheck_never_imports_the_reference_trainer():
    known = modules()
    offenders = []
    for name, path in known.items():
        if not name.startswith("clustercheck"):
            continue
        for node in ast.walk(ast.parse(open(path).read())):
            named = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{name} imports {n}" for n in named if n.split(".")[0] == "reference_train"]
    assert not offenders


def test_judges_import_without_click_or_paramiko():
    judges = sorted(name for name, path in modules().items()
                    if name.startswith("clustercheck.") and os.path.basename(path) in JUDGE_FILES)
    assert len(judges) >= 8, judges   # the rule is not vacuous
    code = ("import importlib, sys\n"
            "bad = {}\n"
            "for name in sys.argv[1:]:\n"
            "    importlib.import_module(name)\n"
            "for name in ('click', 'paramiko'):\n"
            "    if name in sys.modules: bad[name] = True\n"
            "print(sorted(bad))\n")
    for judge in judges:   # each alone: one judge's imports must not hide another's
        proc = subprocess.run([sys.executable, "-c", code, judge], capture_output=True, text=True, cwd=ROOT,
                              timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "[]", f"{judge} loads {proc.stdout.strip()}"


def test_architecture_lists_every_module():
    text = open(os.path.join(ROOT, "docs", "architecture.md")).read()
    missing = [os.path.relpath(path, ROOT) for path in modules().values()
               if f"`{os.path.relpath(path, ROOT)}`" not in text]
    assert not missing, "docs/architecture.md does not name: " + ", ".join(missing)


def test_the_layers_below_the_stages_import_no_stage_and_metrics_no_runner():
    """The judges below the stages (the failure judge and its vocabulary, the tools' outputs, the node layer's
    GPU health, NCCL's judges) serve a stage, explain and any gatherer alike: they know no stage, and explain
    imports none; the metrics package builds from findings and samples and sits below the runner (issue 43)."""
    known = modules()
    below = [("clustercheck.failure", "clustercheck.stages"), ("clustercheck.vocabulary", "clustercheck.stages"),
             ("clustercheck.outputs", "clustercheck.stages"), ("clustercheck.node", "clustercheck.stages"),
             ("clustercheck.nccl", "clustercheck.stages"),
             ("clustercheck.explain", "clustercheck.stages"), ("clustercheck.metrics", "clustercheck.runner"),
             # the progress a run reports is core's noun: the transport and core tell it, never the display
             ("clustercheck.transport", "clustercheck.display"), ("clustercheck.core", "clustercheck.display")]
    offenders = [f"{name} imports {target}" for name, path in known.items() for layer, above in below
                 if name.startswith(layer) for target in imports(path, known) if target.startswith(above)]
    assert not offenders


def test_an_import_inside_a_function_says_why_it_is_not_at_the_top():
    """Imports sit at the top of a module; one inside a function (an optional dependency, a heavy one loaded only
    where it is used) says its reason in a comment on its line or the line above."""
    silent = []
    for dotted, path in sorted(modules().items()):
        lines = open(path).read().splitlines()
        for function in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    said = "#" in lines[node.lineno - 1] or "#" in lines[node.lineno - 2]
                    first = node.lineno > 1 and isinstance(function.body[0], (ast.Import, ast.ImportFrom)) and \
                        node is not function.body[0] and "#" in lines[function.body[0].lineno - 1]
                    if not said and not first:
                        silent.append(f"{dotted}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    assert not silent, "\n".join(silent)
