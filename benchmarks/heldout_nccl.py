#!/usr/bin/env python3
"""Score `clustercheck explain --json` against the held-out NCCL log labels (issue 44).

    python3 benchmarks/heldout_nccl.py --repo DIR --half check|build [--set issue44|issue48|issue48b] [--root DIR] [--exclude FILE] [--verbose]

Runs `python3 -m clustercheck explain --json FILE` with cwd=DIR and PYTHONPATH=DIR for every labelled file of the
half, reads the top-level "nccl_paths" object and the exit code (contract: tests/data/heldout/nccl/CONTRACT.md), and
prints each aspect right/wrong per file, then the totals.

Tolerant of a checkout from before the change: where a node has no "network" key, the network is derived from its
"between" text (IB/IBext -> InfiniBand, which cannot tell RoCE; Socket -> Socket; OFI/AWS/Libfabric -> EFA or
libfabric, either label accepted); where it has no "gpudirect" key, "GDRDMA" in "between" gives true and RDMA
connection paths without it give false; where no node has a "fallback" key, a fallback counts as flagged only if
the exit code is >= 1 and a finding that is not OK mentions sockets or a fallback in its summary.
"""
import argparse
import json
import os
import subprocess
import sys
from collections import Counter

HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "data", "heldout", "nccl")
NETWORKS = ("InfiniBand", "RoCE", "EFA", "libfabric", "Socket", "none")
OFI_EITHER = "EFA|libfabric"


def run_explain(repo, path):
    env = dict(os.environ, PYTHONPATH=repo)
    try:
        proc = subprocess.run([sys.executable, "-m", "clustercheck", "explain", "--json", path], cwd=repo, env=env,
                              capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return None, 124, "timed out"
    try:
        return json.loads(proc.stdout), proc.returncode, proc.stderr.strip()[-300:]
    except ValueError:
        return None, proc.returncode, (proc.stderr or proc.stdout).strip()[-300:]


def network_from_between(text):
    """The network named by an old checkout's "between" text, or None."""
    if not text or text == "-":
        return None
    first = text.split(",")[0]
    for part in (first, text):
        if any(k in part for k in ("OFI", "AWS", "Libfabric", "libfabric")):
            return OFI_EITHER
        if "Socket" in part:
            return "Socket"
        if "IB" in part:
            return "InfiniBand"
    return None


def gpudirect_from_between(text):
    if not text or text == "-":
        return None
    if "GDRDMA" in text:
        return True
    if "no connection line" in text:
        return None
    if any(k in text for k in ("NET/IB", "NET/OFI", "NET/AWS", "Libfabric")):
        return False
    return None


def node_network(node):
    if "network" in node:
        return node["network"]
    return network_from_between(node.get("between"))


def node_gpudirect(node):
    if "gpudirect" in node:
        return node["gpudirect"]
    return gpudirect_from_between(node.get("between"))


def judged(result, code):
    """(network, gpudirect, fallback_flagged, fail, detail) read from one explain result."""
    paths = (result or {}).get("nccl_paths") or {}
    nodes = [n for n in paths.values() if isinstance(n, dict)]
    nets = Counter(v for v in (node_network(n) for n in nodes) if v not in (None, "none"))
    network = nets.most_common(1)[0][0] if nets else "none"
    gds = [node_gpudirect(n) for n in nodes]
    gpudirect = True if True in gds else (False if False in gds else None)
    if any("fallback" in n for n in nodes):
        fallback = code >= 1 and any(n.get("fallback") for n in nodes)
        how = "nccl_paths fallback"
    else:
        words = ("socket", "fallback", "fall back", "falls back", "fell back")
        summaries = [f.get("summary", "") for f in (result or {}).get("findings", []) if f.get("status") != "OK"]
        fallback = code >= 1 and any(any(w in s.lower() for w in words) for s in summaries)
        how = "findings text (old checkout)"
    return network, gpudirect, fallback, code == 2, {"nodes": sorted(paths), "how": how}


def network_right(label, got):
    if got == OFI_EITHER:
        return label in ("EFA", "libfabric")
    return label == got


def score(repo, half, verbose, which="issue44", root=None, exclude=None):
    paired = which != "issue44" or root     # the issue-48 layout: <root>/<half>/nccl/ with its labels.json
    folder = os.path.join(root or os.path.join(os.path.dirname(HERE), which), half, "nccl") if paired else \
        os.path.join(HERE, half)
    labels = json.load(open(os.path.join(folder, "labels.json" if paired else f"labels-{half}.json")))
    if exclude:      # issue48b's OVERLAP.txt: the threads both gatherers picked
        left_out = {line.strip().split("/", 1)[-1] for line in open(exclude) if line.strip().startswith("nccl/")}
        labels = {name: label for name, label in labels.items() if name not in left_out}
    t = Counter()
    lines = []
    for name in sorted(labels):
        lab = labels[name]
        path = os.path.join(folder, name)
        result, code, err = run_explain(repo, path)
        if result is None or code in (3, 64, 124):
            t["crash"] += 1
        t["ready"] += code == 0
        net, gd, fb, fail, detail = judged(result, code)
        marks = []
        ok = True
        if lab["network"] is not None:
            t["net_n"] += 1
            r = network_right(lab["network"], net)
            t["net_ok"] += r
            ok &= r
            marks.append(f"network {'right' if r else 'WRONG'} (label {lab['network']}, got {net})")
        else:
            named = net != "none"
            t["net_unshown_named"] += named
            marks.append(f"network not labelled (got {net})")
        if lab["gpudirect"] is not None:
            t["gd_n"] += 1
            r = gd == lab["gpudirect"]
            t["gd_ok"] += r
            ok &= r
            marks.append(f"gpudirect {'right' if r else 'WRONG'} (label {lab['gpudirect']}, got {gd})")
        if lab["fallback"]:
            t["fb_n"] += 1
            t["fb_ok"] += fb
            ok &= fb
            marks.append(f"fallback {'flagged' if fb else 'MISSED'}")
        else:
            t["fb_false_n"] += 1
            t["fb_false_flag"] += fb
            ok &= not fb
            marks.append("fallback " + ("FLAGGED WRONGLY" if fb else "not flagged, right"))
        if not lab["failure"]:
            t["nofail_n"] += 1
            t["info_fail"] += fail
            ok &= not fail
            marks.append("FAIL on a no-failure log" if fail else "no FAIL, right")
        else:
            t["fail_n"] += 1
            t["fail_ok"] += fail
            marks.append(f"failure {'given FAIL' if fail else 'not given FAIL'} (not in all-right)")
        t["all_ok"] += ok
        t["n"] += 1
        q = sum(1 for n in detail["nodes"] if n in ("?", ""))
        t["unnamed_nodes"] += q
        head = f"{'ALL RIGHT' if ok else 'wrong    '}  {name}  exit {code}"
        lines.append(head + "\n    " + "; ".join(marks))
        if verbose:
            lines.append(f"    nodes {detail['nodes']} ({detail['how']})" + (f"; stderr: {err}" if err else ""))
    print("\n".join(lines))
    print()
    print(f"repo {repo}, half {half}: {t['n']} files")
    print(f"network right {t['net_ok']}/{t['net_n']} (files whose network is labelled); "
          f"a network named where the file shows none: {t['net_unshown_named']}")
    print(f"gpudirect right {t['gd_ok']}/{t['gd_n']} (where labelled)")
    print(f"fallbacks flagged {t['fb_ok']}/{t['fb_n']}; flagged where there is none: "
          f"{t['fb_false_flag']}/{t['fb_false_n']}")
    print(f"INFO-as-FAIL (exit 2 on a log labelled failure=false): {t['info_fail']}/{t['nofail_n']}; "
          f"real failures given FAIL: {t['fail_ok']}/{t['fail_n']}")
    print(f"all-right {t['all_ok']}/{t['n']} ({100.0 * t['all_ok'] / max(t['n'], 1):.0f}%)")
    print(f"could not check (exit 3), bad input (64), timeout or no JSON: {t['crash']}; nodes named '?' or empty: {t['unnamed_nodes']}")
    print(f"READY (exit 0, a verdict of READY on a log that does not show the job ended): {t['ready']}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repo", required=True, help="a clustercheck checkout")
    ap.add_argument("--half", required=True, choices=("check", "build", "build2"))
    ap.add_argument("--set", default="issue44", choices=("issue44", "issue48", "issue48b"),
                    help="issue44: tests/data/heldout/nccl/<half>/; issue48, issue48b: "
                         "tests/data/heldout/<set>/<half>/nccl/")
    ap.add_argument("--root", help="a folder of the issue-48 layout (<half>/nccl/) instead of --set's")
    ap.add_argument("--exclude", help="a file listing logs left out (nccl/NAME per line: issue48b's OVERLAP.txt)")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()
    score(os.path.abspath(a.repo), a.half, a.verbose, a.set, a.root, a.exclude)


if __name__ == "__main__":
    main()
