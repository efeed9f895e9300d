"""clustercheck at 1,000 nodes: fan-out, env and net on the largest sandbox this host holds.

    sudo python benchmarks/scale.py                 # 1,000 nodes (about 25 minutes on 2 cores)
    sudo python benchmarks/scale.py --nodes 256     # quicker

Everything in one run, against references measured in the same run (the host is shared):
- what a node costs: host memory before and after `sandbox up` (one host key for all nodes);
- a command on an open connection: the session loop, one exec per command (--exec-per-command),
  and a bare paramiko exec (the node's sshd and login shell alone), medians of 50;
- `run -- true` on every node: wall and client CPU against OpenSSH (`xargs -P 64 ssh`), after
  one untimed OpenSSH pass that lets every node's first login do its one-off work;
- `env` on 64 nodes against `run -- true` on the same 64;
- `env` and `net` (as `preflight --only net`, for its report) on every node: verdict, wall,
  screen lines, report sizes, and net's plan and attempts;
- `net` with one node dropping its ephemeral range: which nodes the findings name, and `diff`
  between the two reports;
- after each command: the processes other than sshd left on any node.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from clustercheck.core.inventory import read_inventory  # noqa: E402
from clustercheck.sandbox import Sandbox, down, faults  # noqa: E402
from clustercheck.transport.fanout import Cluster, FanoutOptions  # noqa: E402
from clustercheck.transport.sshconfig import SSHSettings  # noqa: E402

PYTHON = sys.executable


def mem_available_mib() -> float:
    with open("/proc/meminfo") as handle:
        for line in handle:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    return 0.0


def timed(argv, stdin=None):
    """(wall s, client CPU s of the process tree, exit code, stdout)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - start, usage.ru_utime + usage.ru_stime, os.waitstatus_to_exitcode(status), \
        out.decode(errors="replace")


def leftovers(box: Sandbox) -> int:
    """Processes other than sshd (listener and closing sessions) in any node."""
    count = 0
    for node in box.nodes:
        pids = subprocess.run(["ip", "netns", "pids", node.netns], capture_output=True, text=True).stdout.split()
        for pid in pids:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as handle:
                    argv0 = handle.read().split(b"\0")[0]
            except OSError:
                continue
            if not argv0.startswith(b"sshd") and b"/sshd" not in argv0:
                count += 1
    return count


def report_files(directory: str, name: str):
    found = {}
    for entry in os.listdir(directory):
        if entry.endswith(f"-{name}.json"):
            found["json"] = os.path.join(directory, entry)
        elif entry.endswith(f"-{name}.md"):
            found["markdown"] = os.path.join(directory, entry)
    return found


def sizes(files) -> str:
    with open(files["markdown"]) as handle:
        md_lines = sum(1 for _ in handle)
    return (f"{os.path.getsize(files['markdown']) / 1024:.0f} KiB Markdown ({md_lines} lines), "
            f"{os.path.getsize(files['json']) / 1048576:.1f} MiB JSON")


def tool(box: Sandbox, nodes_file: str, *args: str):
    return timed([PYTHON, "-m", "clustercheck", *args[:1], nodes_file, "-F", box.ssh_config, *args[1:]])


def latencies(box: Sandbox, session: bool):
    nodes = read_inventory(box.nodes_file)[:1]
    with Cluster(nodes, FanoutOptions(session=session, ssh=SSHSettings(config_path=box.ssh_config))) as cluster:
        cluster.connect()
        transport = cluster.transports[nodes[0].name]
        transport.run("true", 30)
        wall, cpu, raw = [], [], []
        for _ in range(50):
            start, start_cpu = time.perf_counter(), time.process_time()
            assert transport.run("true", 30).ok
            wall.append((time.perf_counter() - start) * 1000)
            cpu.append((time.process_time() - start_cpu) * 1000)
            if not session:
                start = time.perf_counter()
                chan = transport._client.get_transport().open_session()
                chan.exec_command("true")
                chan.recv_exit_status()
                chan.close()
                raw.append((time.perf_counter() - start) * 1000)
    return statistics.median(wall), statistics.median(cpu), (statistics.median(raw) if raw else None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--name", default="bscale")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()

    before = mem_available_mib()
    start = time.perf_counter()
    box = Sandbox.up(args.nodes, args.name, shared_hostkey=True)
    built_s = time.perf_counter() - start
    time.sleep(2)
    per_node_mib = (before - mem_available_mib()) / args.nodes
    work = tempfile.mkdtemp(prefix="clustercheck-scale.")
    names = [n.name for n in box.nodes]
    first64 = os.path.join(work, "nodes64.txt")
    with open(first64, "w") as handle:
        handle.write("\n".join(names[:64]) + "\n")
    plain = os.path.join(work, "names.txt")
    with open(plain, "w") as handle:
        handle.write("\n".join(names) + "\n")
    lines = []
    say = lines.append
    try:
        with open(plain) as stdin:   # every node's first login (pyenv's first rehash), untimed
            timed(["xargs", "-P", "64", "-I{}", "ssh", "-F", box.ssh_config, "{}", "true"], stdin=stdin)
        session = latencies(box, True)
        exec_ = latencies(box, False)
        say(f"sandbox: {args.nodes} nodes built in {built_s:.0f} s; {per_node_mib:.2f} MiB of host memory per node")
        say(f"command on an open connection (median of 50): session {session[0]:.1f} ms "
            f"(clustercheck's own CPU {session[1]:.1f} ms) -> {'met' if session[0] <= 10 else 'MISSED'} "
            f"(target <= 10 ms); one exec per command {exec_[0]:.1f} ms; bare paramiko exec {exec_[2]:.1f} ms "
            f"(the node's sshd and login shell)")

        run_wall, run_cpu, code, _ = tool(box, box.nodes_file, "run", "--", "true")
        left_run = leftovers(box)
        with open(plain) as stdin:
            ossh_wall, ossh_cpu, _, _ = timed(["xargs", "-P", "64", "-I{}", "ssh", "-F", box.ssh_config, "{}",
                                               "true"], stdin=stdin)
        say(f"run -- true on {args.nodes} nodes: {run_wall:.1f} s vs OpenSSH xargs -P 64 {ossh_wall:.1f} s "
            f"({run_wall / ossh_wall:.2f}x, target <= 1.0x: {'met' if run_wall <= ossh_wall else 'MISSED'}); "
            f"client CPU {run_cpu * 1000 / args.nodes:.1f} vs {ossh_cpu * 1000 / args.nodes:.1f} ms per node "
            f"({run_cpu / ossh_cpu:.2f}x); exit {code}; processes left on nodes: {left_run}")

        run64, _, _, _ = tool(box, first64, "run", "--", "true")
        env64, _, code64, _ = tool(box, first64, "env", "--python", PYTHON)
        say(f"env on 64 nodes: {env64:.1f} s vs run -- true on the same 64 {run64:.1f} s = {env64 / run64:.2f}x "
            f"(target <= 1.5x: {'met' if env64 <= 1.5 * run64 else 'MISSED'}); exit {code64}")

        env_wall, _, env_code, env_out = tool(box, box.nodes_file, "env", "--python", PYTHON, "--report",
                                              "--reports-dir", os.path.join(work, "env"))
        left_env = leftovers(box)
        markdown = [os.path.join(work, "env", f) for f in os.listdir(os.path.join(work, "env")) if f.endswith(".md")]
        size = f"{os.path.getsize(markdown[0]) / 1024:.0f} KiB Markdown" if markdown else "no report"
        say(f"env on {args.nodes} nodes: exit {env_code} ({env_out.strip().splitlines()[-2]}), {env_wall:.1f} s, "
            f"{len(env_out.splitlines())} lines on the screen; report {size}; processes left on nodes: {left_env}")

        reports = os.path.join(work, "reports")
        net_wall, _, net_code, net_text = tool(box, box.nodes_file, "preflight", "--only", "net", "--python", PYTHON,
                                               "--reports-dir", reports, "--name", "clean")
        left_net = leftovers(box)
        clean = report_files(reports, "clean")
        with open(clean["json"]) as handle:
            doc = json.load(handle)
        plan = doc["net"]["plan"]
        say(f"net (preflight --only net) on {args.nodes} nodes: {doc['verdict']} (exit {net_code}), "
            f"{net_wall:.1f} s; plan {plan['mode']}, {plan['attempts']} attempts ({plan['retried']} retried, "
            f"{plan['recovered']} open on retry); {len(net_text.splitlines())} lines on the screen; report "
            f"{sizes(clean)}; processes left on nodes: {left_net}")

        culprit = names[len(names) * 2 // 5]
        faults.drop_port(box, culprit, "32768:60999")
        drop_wall, _, drop_code, _ = tool(box, box.nodes_file, "preflight", "--only", "net", "--python", PYTHON,
                                          "--reports-dir", reports, "--name", "drop")
        drop = report_files(reports, "drop")
        with open(drop["json"]) as handle:
            bad = [f for f in json.load(handle)["findings"] if f["status"] != "OK"]
        named = sorted({n for f in bad for n in f["nodes"]})
        say(f"net with {culprit} dropping its ephemeral range: exit {drop_code}, {len(bad)} finding(s) "
            f"({', '.join(f['check'] for f in bad)}) naming {named} -> "
            f"{'exactly that node, one finding' if named == [culprit] and len(bad) == 1 else 'NOT just that node'}; "
            f"{drop_wall:.1f} s")
        diff_wall, _, diff_code, diff_text = timed([PYTHON, "-m", "clustercheck", "diff", clean["json"], drop["json"]])
        say(f"diff of the two {args.nodes}-node reports: exit {diff_code}, {diff_wall:.2f} s, "
            f"{len(diff_text.splitlines())} lines: {' / '.join(diff_text.strip().splitlines()[-2:])}")
    finally:
        if not args.keep:
            down(args.name)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
