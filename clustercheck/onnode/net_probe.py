"""clustercheck network probe: listeners, connection attempts, link quality, node-to-node SSH.

Shipped to the nodes with nodelib.py and run with the node's interpreter. Standard
library only, Python 3.6+. Every mode prints JSON lines on stdout and never raises.

    net_probe.py listen  [--launch-ports P,Q] [--samples K] [--peers a,b] [--hold S]
        Binds the launch ports (MASTER_PORT and the c10d rendezvous port: any node may be
        MASTER_ADDR) and K free ports from the node's
        ephemeral range, prints one JSON line {"ready": ...} with what it bound and the
        node's names and interfaces, then serves until --hold seconds pass or it is killed.
        Connections that send "P" get an echo, "S" a byte sink (for the link mode).
    net_probe.py connect --targets JSON [--resolve a,b] [--timeout S]
        Connects to every [label, host, port] at once; each is open, refused, filtered
        (no answer before the timeout), unreachable, or unresolved.
    net_probe.py link --host H --port P [--rtt-count N] [--stream-s S]
        Round-trip time (median) and a short throughput stream to one listener.
    net_probe.py ssh --hosts a,b [--timeout S]
        `ssh -o BatchMode=yes HOST true` to each host, as pdsh / DeepSpeed's launcher would.
"""

import errno
import json
import os
import random
import selectors
import socket
import struct
import subprocess
import sys
import threading
import time

try:  # imported as part of the clustercheck package (the tests)
    from .nodelib import collect_env, collect_host, collect_net, emit_json, read, resolve
except ImportError:  # shipped to a node: inline_command registers nodelib beside this program
    from nodelib import collect_env, collect_host, collect_net, emit_json, read, resolve

SCHEMA = 1
CHUNK = 64 * 1024


def out(doc):
    sys.stdout.write(json.dumps(doc, default=str) + "\n")
    sys.stdout.flush()


def parse_args(argv):
    args = {"mode": argv[0] if argv else ""}
    index = 1
    while index < len(argv):
        if argv[index].startswith("--") and index + 1 < len(argv):
            args[argv[index][2:].replace("-", "_")] = argv[index + 1]
            index += 2
        else:
            index += 1
    return args


# ---- listen ------------------------------------------------------------------------------
def ephemeral_range():
    text = read("/proc/sys/net/ipv4/ip_local_port_range") or "32768 60999"
    low, high = (int(x) for x in text.split()[:2])
    return low, high


def port_holder(port):
    """Who listens on TCP `port` here: {"pid", "command"} when /proc lets us see it."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in (read(table) or "").splitlines()[1:]:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    if not inodes:
        return None
    wanted = {"socket:[%s]" % inode for inode in inodes}
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            fds = os.listdir("/proc/%s/fd" % pid)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink("/proc/%s/fd/%s" % (pid, fd)) in wanted:
                    command = " ".join((read("/proc/%s/cmdline" % pid) or "").replace("\0", " ").split())
                    return {"pid": int(pid), "command": command[:200]}
            except OSError:
                continue
    return {"pid": None, "command": "a process this user cannot see"}


def bind_listener(port):
    sock = socket.socket(socket.AF_INET6 if socket.has_ipv6 else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if sock.family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # v4 and v6 on one socket
            sock.bind(("::", port))
        else:
            sock.bind(("0.0.0.0", port))
        sock.listen(512)
        return sock
    except OSError:
        sock.close()
        raise


def serve_connection(conn):
    """'P': echo until EOF; 'S': count bytes until EOF and answer the count; else just close."""
    try:
        conn.settimeout(60)
        kind = conn.recv(1)
        if kind == b"P":
            while True:
                data = conn.recv(CHUNK)
                if not data:
                    break
                conn.sendall(data)
        elif kind == b"S":
            total = 0
            while True:
                data = conn.recv(CHUNK)
                if not data:
                    break
                total += len(data)
            conn.sendall(struct.pack("!Q", total))
    except OSError:
        pass
    finally:
        conn.close()


def listen(args):
    hold_s = float(args.get("hold", "120"))
    samples = int(args.get("samples", "2"))
    wanted = [int(p) for p in (args.get("launch_ports") or "").split(",") if p.strip().isdigit()]
    low, high = ephemeral_range()
    listeners, ports, launch = [], {"ephemeral": []}, []
    for port in wanted:
        try:
            listeners.append(bind_listener(port))
            launch.append({"port": port, "bound": True})
        except OSError as exc:
            launch.append({"port": port, "bound": False, "error": exc.strerror or str(exc),
                           "holder": port_holder(port) if exc.errno == errno.EADDRINUSE else None})
    candidates = random.sample(range(low, high + 1), min(high - low + 1, samples * 20))
    for port in candidates:
        if len(ports["ephemeral"]) >= samples:
            break
        try:
            listeners.append(bind_listener(port))
            ports["ephemeral"].append(port)
        except OSError:
            continue
    info = {"schema": SCHEMA, "ready": True, "launch": launch, "ports": ports, "ephemeral_range": [low, high],
            "host": collect_host(args), "net": collect_net(args), "env": collect_env(args)}
    out(info)
    selector = selectors.DefaultSelector()
    for sock in listeners:
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
    deadline = time.time() + hold_s
    while time.time() < deadline:
        for key, _ in selector.select(min(1.0, max(0.0, deadline - time.time()))):
            try:
                conn, _ = key.fileobj.accept()
            except OSError:
                continue
            conn.setblocking(True)
            threading.Thread(target=serve_connection, args=(conn,), daemon=True).start()
    return None


# ---- connect -----------------------------------------------------------------------------
def classify(err):
    if err == 0:
        return "open"
    if err == errno.ECONNREFUSED:
        return "refused"
    if err in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        return "unreachable"
    if err == errno.ETIMEDOUT:
        return "filtered"
    return "error: " + os.strerror(err)


def connect(args):
    targets = json.loads(args.get("targets", "[]"))
    timeout_s = float(args.get("timeout", "3"))
    names = sorted({t[1] for t in targets} | set(n for n in args.get("resolve", "").split(",") if n))
    resolved = {}
    threads = []
    for name in names:
        thread = threading.Thread(target=lambda n=name: resolved.__setitem__(n, resolve(n)), daemon=True)
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join(5)
    results, pending = [], {}
    selector = selectors.DefaultSelector()
    start = time.time()
    for label, host, port in targets:
        entry = {"to": label, "host": host, "port": port}
        addrs = (resolved.get(host) or {}).get("addresses") or []
        if not addrs:
            entry.update(state="unresolved", error=(resolved.get(host) or {}).get("error", "no answer"))
            results.append(entry)
            continue
        entry["address"] = addrs[0]
        family = socket.AF_INET6 if ":" in addrs[0] else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setblocking(False)
        err = sock.connect_ex((addrs[0], port))
        if err in (0, errno.EINPROGRESS):
            selector.register(sock, selectors.EVENT_WRITE, entry)
            pending[sock] = entry
        else:
            entry["state"] = classify(err)
            results.append(entry)
            sock.close()
    # The wait starts once every attempt is in flight, and a last look after it ends: on a loaded
    # host an answer that came in time may not have been read in time.
    deadline = time.time() + timeout_s
    while pending:
        remaining = deadline - time.time()
        ready = selector.select(max(0.0, remaining))
        if not ready and remaining <= 0:
            break
        for key, _ in ready:
            sock, entry = key.fileobj, key.data
            entry["state"] = classify(sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))
            entry["ms"] = round((time.time() - start) * 1000, 1)
            selector.unregister(sock)
            sock.close()
            del pending[sock]
            results.append(entry)
    for sock, entry in pending.items():
        entry["state"] = "filtered"
        entry["ms"] = round(timeout_s * 1000, 1)
        sock.close()
        results.append(entry)
    return {"schema": SCHEMA, "results": results, "resolved": resolved, "timeout_s": timeout_s}


# ---- link --------------------------------------------------------------------------------
def link(args):
    host, port = args["host"], int(args["port"])
    count = int(args.get("rtt_count", "20"))
    stream_s = float(args.get("stream_s", "1.0"))
    result = {"schema": SCHEMA, "host": host, "port": port}
    sock = socket.create_connection((host, port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.sendall(b"P")
        rtts, message = [], b"x" * 32
        for _ in range(count):
            begin = time.perf_counter()
            sock.sendall(message)
            got = 0
            while got < len(message):
                chunk = sock.recv(len(message) - got)
                if not chunk:
                    raise OSError("the listener closed the connection")
                got += len(chunk)
            rtts.append((time.perf_counter() - begin) * 1000)
        rtts.sort()
        result["rtt_ms"] = round(rtts[len(rtts) // 2], 3)
    finally:
        sock.close()
    sock = socket.create_connection((host, port), timeout=30)
    try:
        sock.sendall(b"S")
        payload = os.urandom(CHUNK)
        begin = time.perf_counter()
        while time.perf_counter() - begin < stream_s:
            sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        received = struct.unpack("!Q", sock.recv(8).rjust(8, b"\0"))[0]
        elapsed = time.perf_counter() - begin
        result["bytes"] = received
        result["mbit_s"] = round(received * 8 / elapsed / 1e6, 1)
    finally:
        sock.close()
    return result


# ---- ssh ---------------------------------------------------------------------------------
def ssh_one(host, timeout_s):
    argv = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=%d" % max(1, int(timeout_s)), host, "true"]
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                              timeout=timeout_s + 5, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"host": host, "ok": False, "error": "no answer within %g s" % (timeout_s + 5)}
    except OSError as exc:
        return {"host": host, "ok": False, "error": "cannot run ssh: %s" % exc}
    lines = [line for line in proc.stderr.strip().splitlines() if not line.startswith("Warning: Permanently")]
    return {"host": host, "ok": proc.returncode == 0, "exit_code": proc.returncode,
            "error": lines[-1] if lines and proc.returncode else ""}


def ssh(args):
    hosts = [h for h in args.get("hosts", "").split(",") if h]
    timeout_s = float(args.get("timeout", "5"))
    results = {}
    threads = [threading.Thread(target=lambda h=h: results.__setitem__(h, ssh_one(h, timeout_s)), daemon=True)
               for h in hosts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout_s + 10)
    return {"schema": SCHEMA, "results": [results.get(h, {"host": h, "ok": False, "error": "no result"})
                                          for h in hosts]}


MODES = {"listen": listen, "connect": connect, "link": link, "ssh": ssh}


def main():
    args = parse_args(sys.argv[1:])
    mode = MODES.get(args["mode"])
    if mode is None:
        out({"schema": SCHEMA, "fatal": "unknown mode %r (one of %s)" % (args["mode"], ", ".join(MODES))})
        return
    if args["mode"] == "listen":  # prints its own line, then serves
        try:
            listen(args)
        except Exception as exc:
            out({"schema": SCHEMA, "fatal": "%s: %s" % (type(exc).__name__, exc)})
        return
    emit_json(lambda: mode(args))


if __name__ == "__main__":
    main()
