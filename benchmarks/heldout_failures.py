"""Score a clustercheck checkout on the held-out failure logs of issue 43 (CONTRACT.md says the rules).

    python3 benchmarks/heldout_failures.py --repo DIR --half check|build [--set issue43|issue48|issue48b] [--root DIR] [--exclude FILE] [--verbose]

--set issue43 (the default) scores tests/data/heldout/failures/<half>/ with labels-<half>.json beside it;
--set issue48 scores tests/data/heldout/issue48/<half>/failures/ with its labels.json (issue48/CONTRACT.md).

For each log of the half: `python3 -m clustercheck explain --json FILE` run from DIR (cwd and PYTHONPATH), then
smoke's classifier from DIR replayed as tests/test_smoke_classify.py does it (the log as node1's stderr with
other local ranks' noise, node2 healthy but noisy) at 1, 2 and 8 ranks per node."""

import argparse
import importlib
import importlib.util
import json
import os
import re
import subprocess
import sys

sys.dont_write_bytecode = True   # score a checkout without writing into it
HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "data", "heldout", "failures")
RPN = (1, 2, 8)
# A copy of tests/test_smoke_classify.py's noise at the base checkout, used only if DIR's test file lacks it.
OTHER_RANKS = [
    "[W228 18:45:15.738941174 socket.cpp:462] [c10d] waitForInput: poll for socket SocketImpl(fd=11) returned 0, "
    "likely a timeout",
    "/opt/conda/lib/python3.10/site-packages/torch/distributed/c10d_logger.py:83: FutureWarning: "
    "`torch.distributed.all_gather_into_tensor` is deprecated.",
    "[WARNING] [real_accelerator.py:162:get_accelerator] No module named 'triton'",
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.2]:12717",
]


def base_node_stderr(text, ranks_per_node, other=OTHER_RANKS):
    noise = [f"[rank{r}]: {line}" for r in range(1, ranks_per_node) for line in other for _ in range(12)]
    return "\n".join([text, *noise])


def find_def(repo, pattern):
    """The module under DIR/clustercheck whose source matches pattern (a def or class line), as a dotted name."""
    for root, _, files in os.walk(os.path.join(repo, "clustercheck")):
        for name in sorted(files):
            text = open(os.path.join(root, name), errors="replace").read() if name.endswith(".py") else ""
            if re.search(pattern, text, re.M):
                rel = os.path.relpath(os.path.join(root, name), repo)[:-3]
                return rel.replace(os.sep, ".")
    return None


def load(repo, known, attr, pattern):
    """attr from the first known module that has it, else from the module that defines it; and where it was found."""
    for mod in known + [find_def(repo, pattern)]:
        if not mod:
            continue
        try:
            return getattr(importlib.import_module(mod), attr), f"{mod}.{attr}"
        except (ImportError, AttributeError):
            continue
    raise SystemExit(f"benchmarks/heldout_failures.py: no {attr} found under {repo}/clustercheck")


def load_replay(repo):
    """node_stderr and its noise from DIR/tests/test_smoke_classify.py, or the base checkout's copy."""
    path = os.path.join(repo, "tests", "test_smoke_classify.py")
    try:
        spec = importlib.util.spec_from_file_location("_cc_test_smoke_classify", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod.node_stderr, mod.OTHER_RANKS[-1], f"{path}: node_stderr"
    except Exception as err:   # a later checkout may have moved it: the base copy still replays the same way
        return base_node_stderr, OTHER_RANKS[-1], f"benchmarks/heldout_failures.py's copy of the base node_stderr ({type(err).__name__})"


def explain(repo, path):
    env = dict(os.environ, PYTHONPATH=repo, PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run([sys.executable, "-m", "clustercheck", "explain", "--json", path], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=300)
    try:
        out = json.loads(proc.stdout)
    except ValueError:
        return proc.returncode, None, "(no json)", [], [], (proc.stderr.strip().splitlines() or ["?"])[-1]
    cause = out.get("cause") or {}
    kind = cause.get("kind") or f"(no cause, {out.get('verdict')})"
    return (proc.returncode, out.get("verdict"), kind, cause.get("nodes") or [], cause.get("ranks") or [],
            cause.get("summary") or "")


def blamed(label, path, nodes, ranks):
    """Where the label names the failing node or rank: the other nodes or ranks explain names as failing."""
    itself = {"log", os.path.basename(path), os.path.splitext(os.path.basename(path))[0]}
    others = []
    if label.get("node"):
        others += [f"node {n}" for n in nodes if n not in itself and n != label["node"]]
    if label.get("rank") is not None:
        others += [f"rank {r}" for r in ranks if r != label["rank"]]
    return others


def judge_explain(label, path, rc, verdict, kind, nodes, ranks):
    """(right, why, healthy ones blamed) for explain's answer against the label."""
    want, others = label["kind"], blamed(label, path, nodes, ranks)
    if rc == 0:
        return False, "READY (exit 0)", others
    if want == "unclassified" and verdict != "UNKNOWN":
        return False, f"named {kind} ({verdict}) where the log shows no cause: UNKNOWN wanted", others
    if want != "unclassified" and kind != want:
        return False, f"named {kind}, label {want}" + (f"; blames {others}" if others else ""), others
    if others:
        return False, f"blames {others}, label node {label.get('node')} rank {label.get('rank')}", others
    return True, "ok", others


def smoke(classify, node_run, node_stderr, healthy, text, rpn):
    runs = {"node1": node_run("node1", exit_code=1, stderr=node_stderr(text, rpn)),
            "node2": node_run("node2", exit_code=1, stderr=node_stderr(healthy, rpn))}
    cause = classify(runs, 600)
    return cause.kind, "node2" in (cause.nodes or [])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", required=True, help="a clustercheck checkout")
    ap.add_argument("--half", required=True, choices=("build", "build2", "check"))
    ap.add_argument("--set", default="issue43", choices=("issue43", "issue48", "issue48b"), help="which held-out set")
    ap.add_argument("--root", help="a folder of the issue-48 layout (<half>/failures/) instead of --set's")
    ap.add_argument("--exclude", help="a file listing logs left out (failures/NAME per line: issue48b's OVERLAP.txt, "
                                      "the threads both gatherers picked)")
    ap.add_argument("--verbose", action="store_true", help="also explain's summary and the label's reason")
    args = ap.parse_args()
    repo = os.path.abspath(args.repo)
    sys.path.insert(0, repo)
    node_run, where_run = load(repo, ["clustercheck.ranks.runs"], "NodeRun", r"^class NodeRun\b")
    classify, where_cls = load(repo, ["clustercheck.stages.smoke.classify"], "classify", r"^def classify\(runs\b")
    node_stderr, healthy, where_replay = load_replay(repo)
    if args.set != "issue43" or args.root:
        folder = os.path.join(args.root or os.path.join(os.path.dirname(HERE), args.set), args.half, "failures")
        labels = json.load(open(os.path.join(folder, "labels.json")))
    else:
        folder = os.path.join(HERE, args.half)
        labels = json.load(open(os.path.join(HERE, f"labels-{args.half}.json")))
    if args.exclude:
        left_out = {line.strip().split("/", 1)[-1] for line in open(args.exclude)
                    if line.strip().startswith("failures/")}
        labels = {name: label for name, label in labels.items() if name not in left_out}
    print(f"repo {repo}  half {args.half}  ({len(labels)} logs)")
    print(f"smoke replay: {where_cls} with {where_run}, noise from {where_replay}")
    tot = {"explain": 0, "ready": 0, "blamed": 0, **{n: 0 for n in RPN}}
    for name in sorted(labels):
        label, path = labels[name], os.path.join(folder, name)
        rc, verdict, kind, nodes, ranks, summary = explain(repo, path)
        ok, why, others = judge_explain(label, path, rc, verdict, kind, nodes, ranks)
        tot["explain"] += ok
        tot["ready"] += rc == 0
        tot["blamed"] += bool(others)
        text = open(path, errors="replace").read()
        cells = []
        for n in RPN:
            try:
                skind, node2 = smoke(classify, node_run, node_stderr, healthy, text, n)
            except Exception as err:   # a crash is a wrong answer, said as such
                skind, node2 = f"crash:{type(err).__name__}", False
            good = skind == label["kind"] and not node2
            tot[n] += good
            tot["blamed"] += node2
            cells.append(f"{n}:{skind}{'' if good else '!'}{' node2!' if node2 else ''}")
        print(f"{'RIGHT' if ok else 'WRONG'} {name}: label {label['kind']}; explain {kind} exit {rc}"
              f" ({why}); smoke {' '.join(cells)}")
        if args.verbose:
            print(f"    explain: {verdict} nodes={nodes} ranks={ranks} {summary[:160]}")
            print(f"    label: node={label.get('node')} rank={label.get('rank')} {label['why'][:200]}")
    m = len(labels)
    print(f"\nexplain right {tot['explain']}/{m} ({100 * tot['explain'] // m}%)")
    print("smoke right " + ", ".join(f"{n} rpn {tot[n]}/{m}" for n in RPN))
    print(f"READY (exit 0): {tot['ready']}")
    print(f"healthy node/rank blamed: {tot['blamed']} (explain naming another node/rank, or smoke naming node2)")


if __name__ == "__main__":
    main()
