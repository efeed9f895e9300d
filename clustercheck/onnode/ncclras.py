"""clustercheck's NCCL RAS client: ask the NCCL job running on this node for its state, the way NCCL's own
`ncclras` client does (NVIDIA/nccl src/ras/client.cc; the server side is src/ras/client_support.cc). Standard
library only, Python 3.6+; prints one JSON document and never raises; bounded by --deadline, never hangs.

    ncclras.py [--addr HOST:PORT] [--deadline S]

The address is --addr, else NCCL_RAS_ADDR, else localhost:28028 (NCCL's default). The text protocol, line by line:
`CLIENT PROTOCOL 2` -> `SERVER PROTOCOL N`; `TIMEOUT S` -> `OK` (how long RAS may wait for unresponsive
peers); `SET FORMAT json` -> `OK` from NCCL 2.28.7 on (an older NCCL answers `ERROR: Unknown command`: the text
report is read instead); `VERBOSE STATUS` -> the report, up to the server closing the connection. A port that is
closed, silent, slow or answers anything else is said with why ("answered": false), never guessed.
"""

import argparse
import json
import os
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
        doc["answered"] = bool(doc["reply"].strip())
        if not doc["answered"]:
            doc["why"] = "NCCL's RAS closed the connection without a report"
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
