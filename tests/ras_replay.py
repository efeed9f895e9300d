"""A stand-in for NCCL's RAS port (NCCL cannot run here: no GPU): a small TCP server that speaks the text protocol
of NVIDIA/nccl src/ras/client_support.cc (CLIENT PROTOCOL -> SERVER PROTOCOL 2, TIMEOUT -> OK, SET FORMAT -> OK, or
NCCL before 2.28.7's "ERROR: Unknown command", STATUS / VERBOSE STATUS -> the report, then the connection closed) and
replays a report recorded from NCCL's documentation or a user's issue (tests/data/nccl-diag/SOURCES.md).

    python3 tests/ras_replay.py PORT FILE [--text-only] [--silent] [--garbage]
"""

import argparse
import socket
import sys
import threading


def serve_one(conn, reply, json_ok, mode):
    with conn:
        if mode == "silent":
            conn.recv(4096)
            threading.Event().wait(3600)
            return
        if mode == "garbage":
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            return
        buffer = b""
        while True:
            data = conn.recv(4096)
            if not data:
                return
            buffer += data
            while b"\n" in buffer:
                line, _, buffer = buffer.partition(b"\n")
                cmd = line.decode().strip().lower()
                if cmd.startswith("client protocol "):
                    conn.sendall(b"SERVER PROTOCOL 2\n")
                elif cmd.startswith("timeout "):
                    conn.sendall(b"OK\n")
                elif cmd.startswith("set format ") and json_ok:
                    conn.sendall(b"OK\n")
                elif cmd in ("status", "verbose status"):
                    conn.sendall(reply)
                    return
                else:
                    conn.sendall(b"ERROR: Unknown command " + line.strip() + b"\n")


def serve(port, reply, json_ok=True, mode="", host="127.0.0.1", ready=None):
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((host, port))
    server.listen(16)
    if ready is not None:
        ready.append(server.getsockname()[1])
    while True:
        conn, _ = server.accept()
        threading.Thread(target=serve_one, args=(conn, reply, json_ok, mode), daemon=True).start()


def start_in_thread(reply, json_ok=True, mode=""):
    """The port a replaying server listens on (127.0.0.1), served by a daemon thread."""
    ready = []
    thread = threading.Thread(target=serve, args=(0, reply, json_ok, mode), kwargs={"ready": ready}, daemon=True)
    thread.start()
    while not ready:
        threading.Event().wait(0.01)
    return ready[0]


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("file")
    parser.add_argument("--text-only", action="store_true")
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args()
    with open(args.file, "rb") as handle:
        data = handle.read()
    sys.stdout.write("listening\n")
    sys.stdout.flush()
    serve(args.port, data, json_ok=not args.text_only, host=args.host)
