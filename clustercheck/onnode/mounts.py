"""Where a path lives on this node and how an OSError is said: the storage probe's helpers (standard library
only; shipped beside it)."""

import errno
import os


def failure(path, exc):
    """An OSError as the stage shows it: the path, the errno's name and the OS's words."""
    code = getattr(exc, "errno", None)
    return {"path": path, "errno": code, "errno_name": errno.errorcode.get(code, "") if code else "",
            "message": getattr(exc, "strerror", None) or str(exc)}


def mount_of(path, mountinfo="/proc/self/mountinfo"):
    """The mount a path lives on: its mount point, filesystem type, source and options (longest prefix)."""
    best = None
    try:
        with open(mountinfo) as handle:
            for line in handle:
                left, _, right = line.partition(" - ")
                fields, tail = left.split(), right.split()
                if len(fields) < 5 or len(tail) < 2:
                    continue
                point = fields[4].replace("\\040", " ")
                if (path == point or path.startswith(point.rstrip("/") + "/")) and (
                        best is None or len(point) >= len(best["point"])):
                    best = {"point": point, "fstype": tail[0], "source": tail[1], "options": fields[5]}
    except OSError:
        pass
    return best or {}


def filesystem(path):
    doc = {"path": path, "mount": mount_of(os.path.realpath(path))}
    try:
        st = os.statvfs(path)
        doc.update(free_bytes=st.f_bavail * st.f_frsize, total_bytes=st.f_blocks * st.f_frsize,
                   read_only=bool(st.f_flag & os.ST_RDONLY), device=os.stat(path).st_dev)
    except OSError as exc:
        doc["error"] = failure(path, exc)
    return doc
