"""clustercheck stacks probe: the Python stack of chosen processes on this node.

Shipped to the nodes with nodelib.py and run with the node's interpreter. Standard library
only, Python 3.6+. Prints one JSON document and never raises.

    stacks_probe.py --tag RUN [--hang-dir DIR] [--wait S]
        The ranks of one clustercheck run (CLUSTERCHECK_RUN=RUN in their environment and a
        RANK): their stacks, their state, and what the hang hook of each rank answers (its
        step, phase and last collectives; hang/request and hang/state.RANK.json in DIR).
    stacks_probe.py --match REGEX [--wait S]
        Every process whose command line matches REGEX (this probe and its callers excepted); the ranks of a
        job under clustercheck.injob answer through their hook too (nodelib.job_hook_directory, seen through
        /proc/PID/root: a container's /tmp is its own).

A rank's hook that answers with its Flight Recorder record (hang/fr.RANK, torch's pickle) has the record read
here by an unpickler that builds plain values only (a class named in it refuses the file), its last
RECORD_ENTRIES collectives kept with the call site of each.

Stacks come from `py-spy dump` where py-spy is on PATH or beside the interpreter (paused for
a moment; not paused when the process is stopped, which py-spy cannot pause), else, for a
rank whose hang hook caught SIGUSR2, from what faulthandler writes to hang/stack.RANK.txt.
"""

import argparse
import io
import json
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid

try:  # imported as part of the clustercheck package (the tests)
    from .nodelib import emit_json, job_hook_directory, job_key, read
except ImportError:  # shipped to a node: inline_command registers nodelib beside this program
    from nodelib import emit_json, job_hook_directory, job_key, read

SCHEMA = 1
PY_SPY_TIMEOUT_S = 10.0
RECORD_ENTRIES = 400
RECORD_MAX_BYTES = 64 << 20
_PLAIN = frozenset(("builtins", n) for n in ("dict", "list", "tuple", "set", "frozenset", "str", "int", "float",
                                             "bool", "bytes"))
RECORD_KEYS = ("version", "pg_config", "pg_status", "comm_lib_version", "nccl_version")
STATES = {"R": "running", "S": "sleeping", "D": "in uninterruptible I/O (D)", "T": "stopped (SIGSTOP or a debugger)",
          "t": "stopped by a debugger", "Z": "a zombie (exited, not reaped)"}
_FRAME = re.compile(r'^\s+File "(?P<file>.*)", line (?P<line>\d+) in (?P<func>.*)$')
_THREAD = re.compile(r"^(?P<current>Current thread|Thread) (?P<id>0x[0-9a-f]+)")


def environ(pid):
    try:
        with open("/proc/%d/environ" % pid, "rb") as handle:
            items = handle.read().split(b"\0")
    except OSError:
        return None
    env = {}
    for item in items:
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return env


def cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            return [a.decode("utf-8", "replace") for a in handle.read().split(b"\0") if a]
    except OSError:
        return None


def status(pid):
    fields = {}
    for line in (read("/proc/%d/status" % pid, "") or "").splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def catches(fields, signum):
    """Whether the process has a handler for signum (its SigCgt mask): else the signal would kill it."""
    try:
        return bool(int(fields.get("SigCgt", "0"), 16) >> (signum - 1) & 1)
    except ValueError:
        return False


def ancestors():
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        fields = status(pid)
        try:
            pid = int(fields.get("PPid", "0"))
        except ValueError:
            break
    return pids


def is_python(pid):
    """A Python interpreter: its executable is named python*, or it maps libpython (an embedding program)."""
    try:
        if os.path.basename(os.readlink("/proc/%d/exe" % pid)).startswith("python"):
            return True
    except OSError:
        return False
    return "libpython" in (read("/proc/%d/maps" % pid, "") or "")


def chosen(args, skipped):
    """[(pid, argv, env)] of the processes asked for; non-Python matches are counted in skipped."""
    mine = ancestors()
    pattern = re.compile(args.match) if args.match else None
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in mine:
            continue
        pid = int(entry)
        argv = cmdline(pid)
        if not argv:
            continue
        if pattern is not None:
            if "stacks_probe" in " ".join(argv) or os.path.basename(argv[0]) == "py-spy":
                continue
            if not pattern.search(" ".join(argv)):
                continue
            if not is_python(pid):   # a shell or launcher whose command line names the script
                skipped.append(pid)
                continue
            found.append((pid, argv, environ(pid) or {}))
        else:
            env = environ(pid)
            if env and env.get("CLUSTERCHECK_RUN") == args.tag and "RANK" in env:
                found.append((pid, argv, env))
    if args.tag:   # a rank's own children (data loader workers) carry its RANK too: the rank is the parent
        ranks = {pid: env.get("RANK") for pid, _, env in found}
        found = [(pid, argv, env) for pid, argv, env in found
                 if ranks.get(parent_of(pid)) != env.get("RANK")]
    return found


def parent_of(pid):
    try:
        return int(status(pid).get("PPid", "0"))
    except ValueError:
        return 0


def find_py_spy():
    here = os.path.join(os.path.dirname(sys.executable), "py-spy")
    if os.access(here, os.X_OK):
        return here
    return shutil.which("py-spy") or ""


def py_spy_frames(doc):
    """The threads of py-spy's JSON, main thread first: [{"name", "frames": [[func, file, line]]}]."""
    threads = []
    for thread in doc if isinstance(doc, list) else []:
        frames = [[f.get("name", "?"), f.get("short_filename") or f.get("filename", "?"), f.get("line", 0)]
                  for f in thread.get("frames") or []]
        threads.append({"name": thread.get("thread_name") or str(thread.get("thread_id")), "frames": frames,
                        "main": thread.get("os_thread_id") == thread.get("pid") or thread.get("thread_name") ==
                        "MainThread"})
    return sorted(threads, key=lambda t: not t["main"])


def faulthandler_frames(text):
    """faulthandler's text (most recent call first), the main thread first (its id is the process's, last)."""
    threads = []
    for line in text.splitlines():
        head = _THREAD.match(line)
        if head:
            threads.append({"name": head.group("id"), "frames": [], "main": False})
            continue
        frame = _FRAME.match(line)
        if frame and threads:
            threads[-1]["frames"].append([frame.group("func"), short(frame.group("file")), int(frame.group("line"))])
    if threads:   # faulthandler lists the main thread last (the oldest)
        threads[-1]["main"] = True
    return sorted(threads, key=lambda t: not t["main"])


def short(path):
    """site-packages/torch/distributed/x.py -> torch/distributed/x.py, as py-spy shortens."""
    marker = "-packages/"
    return path.split(marker, 1)[1] if marker in path else os.path.basename(path) if path.startswith("/") else path


def start_py_spy(py_spy, pid, stopped):
    argv = [py_spy, "dump", "--pid", str(pid), "--json"] + (["--nonblocking"] if stopped else [])
    try:
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    except OSError:
        return None


def finish_py_spy(proc, deadline):
    """(threads, problem) from a py-spy run."""
    try:
        out, err = proc.communicate(timeout=max(0.5, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return None, "py-spy did not answer within %g s" % PY_SPY_TIMEOUT_S
    if proc.returncode != 0:
        lines = [line for line in err.strip().splitlines() if line.strip() and not line.startswith(" ")]
        text = " ".join(lines[:3])[:300]
        if "ermission" in text or "ptrace" in text.lower():
            text += (" (py-spy needs ptrace rights over the process: run as root, or as its user with "
                     "kernel.yama.ptrace_scope=0, or give py-spy CAP_SYS_PTRACE)")
        return None, "py-spy failed: " + text
    try:
        return py_spy_frames(json.loads(out)), ""
    except ValueError:
        return None, "py-spy printed no JSON"


def ask_hooks(procs, hang_dir, wait_s):
    """Ask every rank's hang hook: write a token to hang/request and SIGUSR2 the ranks that catch it."""
    token = uuid.uuid4().hex
    offsets = {}
    try:
        os.makedirs(hang_dir, exist_ok=True)
        with open(os.path.join(hang_dir, "request"), "w") as handle:
            handle.write(token)
    except OSError as exc:
        for proc in procs:
            proc["problem"] = "cannot write %s: %s" % (hang_dir, exc)
        return
    for proc in procs:
        stack_file = os.path.join(hang_dir, "stack.%s.txt" % proc["rank"])
        try:
            offsets[proc["pid"]] = os.path.getsize(stack_file)
        except OSError:
            offsets[proc["pid"]] = 0
        if proc["catches"] and proc["state"] not in ("T", "t", "Z"):
            try:
                os.kill(proc["pid"], signal.SIGUSR2)
            except OSError:
                pass
    deadline = time.monotonic() + wait_s
    waiting = [p for p in procs if p["state"] not in ("T", "t", "Z")]
    while True:
        for proc in list(waiting):
            try:
                with open(os.path.join(hang_dir, "state.%s.json" % proc["rank"])) as handle:
                    answer = json.load(handle)
            except (OSError, ValueError):
                continue
            if answer.get("token") == token:
                proc["hook"] = {k: answer.get(k) for k in ("step", "phase", "at", "collectives")}
                if answer.get("record"):
                    proc["flight"] = read_record(os.path.join(hang_dir, os.path.basename(answer["record"])))
                waiting.remove(proc)
        if not waiting or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for proc in procs:
        if proc["threads"] is None and proc["catches"]:
            path = os.path.join(hang_dir, "stack.%s.txt" % proc["rank"])
            try:
                with open(path) as handle:
                    handle.seek(offsets[proc["pid"]])
                    text = handle.read()
            except OSError:
                text = ""
            if text.strip():
                proc["threads"], proc["source"] = faulthandler_frames(text), "faulthandler"


class _Plain(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) in _PLAIN:
            return pickle.Unpickler.find_class(self, module, name)
        raise pickle.UnpicklingError("it names %s.%s, which no Flight Recorder record holds" % (module, name))


def _call_site(frames):
    """The first frame outside torch: the rank's own line that called the collective."""
    for frame in frames or ():
        name = str(frame.get("filename", "")) if isinstance(frame, dict) else ""
        if name and "/torch/" not in name and not name.startswith("<"):
            return [frame]
    return []


def read_record(path):
    """The rank's record, its last collectives only and each with its call site; {"problem": why} if unreadable."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(RECORD_MAX_BYTES + 1)
        if len(data) > RECORD_MAX_BYTES:
            return {"problem": "over %d MB" % (RECORD_MAX_BYTES >> 20)}
        doc = _Plain(io.BytesIO(data)).load()
    except Exception as exc:   # cut short, corrupt or naming a class: refused, said
        return {"problem": "%s: %s" % (type(exc).__name__, str(exc)[:200])}
    if not isinstance(doc, dict) or not isinstance(doc.get("entries"), list):
        return {"problem": "not a Flight Recorder record"}
    kept = {key: doc[key] for key in RECORD_KEYS if key in doc}
    kept["entries"] = [dict(e, frames=_call_site(e.get("frames"))) for e in doc["entries"][-RECORD_ENTRIES:]
                       if isinstance(e, dict)]
    kept["entries_dropped"] = max(0, len(doc["entries"]) - RECORD_ENTRIES)
    # tuples as lists, as torch's JSON form writes them; anything else odd as its text
    return json.loads(json.dumps(kept, default=lambda o: list(o) if isinstance(o, (set, frozenset)) else str(o)))


def job_hooks(procs, envs, wait_s):
    """Ask the hooks of the ranks of jobs under clustercheck.injob, each job's folder once."""
    by_folder = {}
    for proc in procs:
        env = envs.get(proc["pid"]) or {}
        if proc["rank"] is None or not ("MASTER_ADDR" in env and "MASTER_PORT" in env):
            continue
        folder = os.path.join("/proc/%d/root" % proc["pid"], job_hook_directory(env).lstrip("/"))
        if os.path.isdir(folder):
            by_folder.setdefault(folder, []).append(proc)
    for folder, group in sorted(by_folder.items()):
        ask_hooks(group, folder, wait_s)


def collect(args):
    py_spy = "" if args.no_py_spy else find_py_spy()
    procs, skipped, envs = [], [], {}
    for pid, argv, env in chosen(args, skipped):
        envs[pid] = env
        fields = status(pid)
        state = (fields.get("State") or "?")[:1]
        procs.append({"pid": pid, "rank": env.get("RANK"), "local_rank": env.get("LOCAL_RANK"), "job": job_key(env),
                      "command": " ".join(argv)[:300], "state": state, "state_text": STATES.get(state, state),
                      "wchan": read("/proc/%d/wchan" % pid, "") or "", "catches": catches(fields, signal.SIGUSR2),
                      "threads": None, "source": "", "problem": "", "hook": None, "flight": None})
    deadline = time.monotonic() + PY_SPY_TIMEOUT_S
    running = {p["pid"]: start_py_spy(py_spy, p["pid"], p["state"] in ("T", "t")) for p in procs} if py_spy else {}
    for proc in procs:
        spy = running.get(proc["pid"])
        if spy is not None:
            proc["threads"], proc["problem"] = finish_py_spy(spy, deadline)
            proc["source"] = "py-spy" if proc["threads"] is not None else ""
    if args.hang_dir:
        ask_hooks(procs, args.hang_dir, args.wait)
    elif args.match:
        job_hooks(procs, envs, args.wait)
    for proc in procs:
        if proc["threads"] is None and not proc["problem"]:
            proc["problem"] = ("stopped: it cannot answer" if proc["state"] in ("T", "t") else
                               "no py-spy on this node (pip install py-spy) and no hang hook answered" if args.hang_dir
                               else "no py-spy on this node: pip install py-spy into %s's environment, or put it "
                                    "on PATH" % sys.executable)
        del proc["catches"]
    return {"schema": SCHEMA, "hostname": os.uname()[1], "py_spy": py_spy, "pid_namespace": pid_namespace(),
            "processes": procs, "not_python": len(skipped)}


def pid_namespace():
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def main(argv=None):
    parser = argparse.ArgumentParser()
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--tag")
    which.add_argument("--match")
    parser.add_argument("--hang-dir", default="")
    parser.add_argument("--wait", type=float, default=3.0)
    parser.add_argument("--no-py-spy", action="store_true")
    args = parser.parse_args(argv)
    emit_json(lambda: collect(args))


if __name__ == "__main__":
    main()
