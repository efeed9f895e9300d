"""clustercheck's NCCL RAS client: ask the NCCL job running on this node for its state, the way NCCL's own
`ncclras` client does (NVIDIA/nccl src/ras/client.cc; the server side is src/ras/client_support.cc). Standard
library only, Python 3.6+; prints one JSON document and never raises; bounded by --deadline, never hangs.

    nccl_ras_client.py [--addr HOST:PORT] [--deadline S]

The address is --addr, else NCCL_RAS_ADDR, else localhost:28028 (NCCL's default). The text protocol, line by line:
`CLIENT PROTOCOL 2` -> `SERVER PROTOCOL N`; `TIMEOUT S` -> `OK` (how long RAS may wait for unresponsive
peers); `SET FORMAT json` -> `OK` from NCCL 2.28.7 on (an older NCCL answers `ERROR: Unknown command`: the text
report is read instead); `VERBOSE STATUS` -> the report, up to the server closing the connection, read here into
one small shape (dead, missing, mismatched, erring ranks: nccl/ras_judge.py judges it). A port that is closed,
silent, slow or answers anything else is said with why ("answered": false), never guessed.
"""

import argparse
import json
import os
import re
import socket
import sys
import time

SCHEMA = 1
PROTOCOL = 2                       # NCCL_RAS_CLIENT_PROTOCOL (src/ras/ras_internal.h)
DEFAULT_ADDR = "localhost:28028"   # NCCL_RAS_CLIENT_PORT
MAX_REPLY = 8 * 2 ** 20            # a 1,000-node job's verbose report is well under this


def address(addr):
    """(host, port) of NCCL_RAS_ADDR's "host:port" (an IPv6 host in brackets)."""
    addr = (addr or DEFAULT_ADDR).strip()
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError("not host:port: %r" % addr)
    return host.strip("[]"), int(port)


class _Conn(object):
    def __init__(self, sock, deadline):
        self.sock, self.deadline, self.buffer = sock, deadline, b""

    def _left(self):
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("the deadline passed")
        return left

    def send(self, line):
        self.sock.settimeout(self._left())
        self.sock.sendall(line.encode() + b"\n")

    def line(self):
        while b"\n" not in self.buffer:
            self.sock.settimeout(self._left())
            data = self.sock.recv(4096)
            if not data:
                raise EOFError("NCCL closed the connection")
            self.buffer += data
            if len(self.buffer) > 4096:
                raise ValueError("not NCCL's RAS protocol: %r" % self.buffer[:80])
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode("utf-8", "replace").strip()

    def rest(self):
        chunks, size = [self.buffer], len(self.buffer)
        while size < MAX_REPLY:
            self.sock.settimeout(self._left())
            data = self.sock.recv(65536)
            if not data:
                break
            chunks.append(data)
            size += len(data)
        return b"".join(chunks)[:MAX_REPLY].decode("utf-8", "replace"), size >= MAX_REPLY


def _session(conn, wait_s):
    doc = {}
    conn.send("CLIENT PROTOCOL %d" % PROTOCOL)
    hello = conn.line()
    if not hello.upper().startswith("SERVER PROTOCOL "):
        raise ValueError("not NCCL's RAS protocol: %r" % hello[:80])
    doc["protocol"] = hello.split()[-1]
    conn.send("TIMEOUT %d" % max(1, int(wait_s)))
    said = conn.line()
    if said.upper() != "OK":
        raise ValueError("TIMEOUT answered %r" % said[:80])
    conn.send("SET FORMAT json")
    doc["format"] = "json" if conn.line().upper() == "OK" else "text"   # before 2.28.7: ERROR: Unknown command
    conn.send("VERBOSE STATUS")
    doc["reply"], doc["cut"] = conn.rest()
    return doc


# ---- the report in one shape: only this crosses the network (a 1,000-node job's report is megabytes) ----
_PROCESS = re.compile(r"Process (\d+) on node (\S+) managing GPUs? (\S+)")
_RANK = re.compile(r"Rank (\d+) -- GPU (\S+) managed by process (\d+) on node (\S+)")
_MISSING = re.compile(r"The missing ranks?: ([\d, ]+)")
_BLOCK = re.compile(r"^#(\d+-\d+) \((\w+)\) ([A-Z,]+)$")
_GROUP = re.compile(r"(\d+) ranks? ha(?:s|ve) (?:launched up to operation (\d+)|status (\w+))")
_DIFFERENT = re.compile(r"Communicator ranks have different (.+)")
MAX_SAID = 10


def empty():
    return {"dead": [], "missing": [], "mismatch": [], "errors": [], "comms": 0}


def from_json(doc):
    found = empty()
    for comm in doc.get("communicators") or []:
        found["comms"] += 1
        name = str(comm.get("hash", "?"))
        for rank in comm.get("missing_ranks") or []:
            status = rank.get("status") or {}
            where = f"rank {rank.get('rank')} (process {rank.get('pid')} on {rank.get('host')}, GPU {rank.get('cuda_dev')})"
            found["dead" if status.get("considered_dead") else "missing"].append(
                {"text": f"{where}{' unresponsive' if status.get('unresponsive') else ''} in communicator {name}",
                 "host": str(rank.get("host"))})
        ranks = comm.get("ranks") or []
        for rank in ranks:
            status = rank.get("status") or {}
            bad = {k: status.get(k) for k in ("init_state", "async_error") if status.get(k) not in (None, 0, 7)}
            if bad or status.get("abort_flag"):
                found["errors"].append({"text": f"rank {rank.get('rank')} on {rank.get('host')} in communicator "
                                                f"{name}: {bad or 'aborted'}", "host": str(rank.get("host"))})
        ops = sorted({op for r in ranks for op in (r.get("collective_counts") or {})})
        for op in ops:
            counts = {r.get("rank"): (r.get("collective_counts") or {}).get(op) for r in ranks}
            if len(set(counts.values())) > 1:
                low = min(c for c in counts.values() if c is not None)     # the ranks behind: listed
                behind = [r for r in ranks if (r.get("collective_counts") or {}).get(op) == low]
                lines = [f"{sum(1 for c in counts.values() if c == v)} rank(s) have launched up to operation {v}"
                         for v in sorted(set(counts.values()) - {None})]
                lines[1:1] = [f"  rank {r.get('rank')} (process {r.get('pid')} on {r.get('host')}, GPU "
                              f"{r.get('cuda_dev')})" for r in behind[:MAX_SAID]]
                found["mismatch"].append({"comm": name, "what": f"{op} operation counts", "lines": lines})
    return found


def from_text(text):
    found, section, block = empty(), "", None
    for raw in text.splitlines():
        line = raw.strip()
        if line in ("Errors", "Warnings", "Job summary") or line.startswith("Communicators"):
            section, block = line.split()[0].rstrip("."), None
            continue
        header = _BLOCK.match(line)
        if header or line in ("DEAD", "INCOMPLETE", "TIMEOUT"):
            block = {"comm": header.group(2), "kind": header.group(3)} if header else {"comm": None, "kind": line}
            if header and "MISMATCH" in header.group(3):
                block["mismatch"] = {"comm": header.group(2), "what": "", "lines": []}
                found["mismatch"].append(block["mismatch"])
            continue
        if re.match(r"^\d+\s+\d+\s+\d+", line) and section == "Communicators":
            found["comms"] += int(line.split()[1])
        if block is None:
            continue
        _text_line(found, block, line)
    return found


def _text_line(found, block, line):
    kind, process, rank = block["kind"], _PROCESS.search(line), _RANK.search(line)
    mismatch = block.get("mismatch")
    if mismatch is not None:
        different, group = _DIFFERENT.search(line), _GROUP.search(line)
        if different:
            mismatch["what"] = different.group(1)
        elif group:              # RAS lists the members of a group (an outlier) under the group's line
            mismatch["lines"].append(line)
        elif rank:
            mismatch["lines"].append(f"  rank {rank.group(1)} (process {rank.group(3)} on {rank.group(4)}, GPU "
                                     f"{rank.group(2)})")
        return
    where = "dead" if kind == "DEAD" else "missing" if "INCOMPLETE" in kind else "errors" if "ERROR" in kind else ""
    if not where:
        return
    if process:
        found[where].append({"text": f"process {process.group(1)} on {process.group(2)} (GPU {process.group(3)})",
                             "host": process.group(2)})
    elif rank:
        found[where].append({"text": f"rank {rank.group(1)} (process {rank.group(3)} on {rank.group(4)}, GPU "
                                     f"{rank.group(2)})", "host": rank.group(4)})
    elif _MISSING.search(line):
        found[where].append({"text": f"{line} in communicator {block['comm']}", "host": ""})
    elif where == "errors" and line:
        found[where].append({"text": f"communicator {block['comm']}: {line}", "host": ""})


def read_reply(doc):
    """The RAS report in one shape (None: no report, or one that reads as neither format)."""
    reply = doc.get("reply") or ""
    if doc.get("format") == "json":
        try:
            parsed = json.loads(reply)
        except ValueError:
            return None
        return from_json(parsed) if isinstance(parsed, dict) and "communicators" in parsed else None
    found = from_text(reply)
    return found if found["comms"] or any(found[k] for k in ("dead", "missing", "mismatch", "errors")) else None


def ask(addr=None, deadline_s=10.0):
    """The RAS report of the job on this node, or why there is none."""
    started = time.monotonic()
    doc = {"schema": SCHEMA, "addr": addr or os.environ.get("NCCL_RAS_ADDR") or DEFAULT_ADDR, "answered": False}
    try:
        host, port = address(doc["addr"])
    except ValueError as exc:
        doc["why"] = "NCCL_RAS_ADDR %s" % exc
        return doc
    sock = None
    try:
        deadline = started + deadline_s
        sock = socket.create_connection((host, port), timeout=max(0.1, deadline - time.monotonic()))
        # RAS waits up to TIMEOUT for unresponsive peers: leave room to read its answer inside our deadline
        doc.update(_session(_Conn(sock, deadline), max(1.0, deadline_s / 2)))
        reply = doc.pop("reply")
        doc["reply_bytes"] = len(reply)
        doc["view"] = read_reply({"reply": reply, "format": doc["format"]})
        doc["answered"] = doc["view"] is not None
        if not doc["answered"]:
            doc["why"] = ("NCCL's RAS closed the connection without a report" if not reply.strip() else
                          "a reply that reads as neither of NCCL's RAS formats: %r" % reply[:80])
    except ConnectionRefusedError:
        doc["why"] = "nothing listens on %s:%d (no NCCL job here, RAS off: NCCL_RAS_ENABLE=0, or NCCL before 2.24)" % (
            host, port)
    except socket.timeout:
        doc["why"] = "no answer from %s:%d within %.1f s" % (host, port, deadline_s)
    except (OSError, EOFError, ValueError) as exc:
        doc["why"] = "%s:%d: %s" % (host, port, exc)
    finally:
        if sock is not None:
            sock.close()
    doc["elapsed_s"] = round(time.monotonic() - started, 3)
    return doc


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--addr", default=None)
    parser.add_argument("--deadline", type=float, default=10.0)
    args = parser.parse_args(argv)
    try:
        doc = ask(args.addr, max(0.5, args.deadline))
    except Exception as exc:     # never a traceback instead of the document
        doc = {"schema": SCHEMA, "answered": False, "why": "the RAS client failed: %s: %s" % (type(exc).__name__, exc)}
    sys.stdout.write(json.dumps(doc) + "\n")


if __name__ == "__main__":
    main()
