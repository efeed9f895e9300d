"""NVIDIA Xid events from the kernel log: every distinct (Xid, GPU) with its count, first and
last time, latest message and the Xids its lines name as their cause, so that a storm of routine
events never pushes a critical one out.

Standard library only, Python 3.6+; shipped with env_probe.py. Reads /dev/kmsg (this boot),
else `journalctl -k -b 0`, else /var/log/kern.log or /var/log/messages (from the last boot on).
Only events since the NVIDIA driver last loaded count: those before describe GPUs since reset. Lines may come in
any of the formats people paste: kmsg records, `dmesg`, `dmesg -T`, ISO (`dmesg --time-format
iso`, `journalctl -o short-iso`) and syslog's kern.log. When no source can be read the result
says so ("readable": false, with why): no Xid events seen is not "no Xid events".
"""

import os
import re
import shutil
import time

try:  # imported as part of the clustercheck package (the tests)
    from .nodelib import read, run
except ImportError:  # shipped to a node
    from nodelib import read, run

XID_RE = re.compile(r"NVRM: Xid \(([^)]*)\): (\d+)")
CAUSED_BY = re.compile(r"caused by previous Xid (\d+)")   # the driver's words on an Xid 45 that another Xid caused
PCI_RE = re.compile(r"\b([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.\d)?\b")
KMSG_RE = re.compile(r"^(\d+),(\d+),(\d+),[^;]*;(.*)$")
STAMPS = (   # (pattern near the start of a line, how to make it a time people read)
    (re.compile(r"(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2})"), lambda m, boot: m.group(1).replace(" ", "T")),
    (re.compile(r"^\[\s*(\w{3} \w{3}\s+\d+ \d{2}:\d{2}:\d{2} \d{4})\]"),
     lambda m, boot: _iso(time.mktime(time.strptime(m.group(1), "%a %b %d %H:%M:%S %Y")))),
    (re.compile(r"^([A-Za-z]{3,9}\s+\d+ \d{2}:\d{2}:\d{2}) "), lambda m, boot: m.group(1)),
    (re.compile(r"^\[\s*(\d+\.\d+)\]"),
     lambda m, boot: _iso(boot + float(m.group(1))) if boot else "%s s after boot" % m.group(1)),
)
DRIVER_LOADED = "NVRM: loading NVIDIA UNIX"   # the module's first line at each load
BOOTED = re.compile(r"kernel: (\[\s*[\d.]+\] )?Linux version ")   # a kernel's first line, in syslog files
# net/core/neighbour.c: "%s: neighbor table overflow!" with the table's id (arp_cache, ndisc_cache); before 4.x
# "Neighbour table overflow." with none. Said when a node needs more neighbours than gc_thresh3 allows.
NEIGH_OVERFLOW = re.compile(r"(?:(arp_cache|ndisc_cache): )?neighbou?r table overflow", re.I)
MAX_DISTINCT = 256      # distinct (Xid, GPU) pairs kept; the rest are kept by Xid alone
LOG_TAIL_BYTES = 32 * 2 ** 20
KERNEL_LOG_FILES = ("/var/log/kern.log", "/var/log/messages")


def _iso(seconds):
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(seconds))


def boot_time(procfs="/proc"):
    for line in (read(os.path.join(procfs, "stat"), "") or "").splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    return None


def stamp_of(line, boot=None):
    head = line[:64]
    for pattern, show in STAMPS:
        match = pattern.search(head)
        if match:
            try:
                return show(match, boot)
            except (ValueError, OverflowError):
                return match.group(1)
    return None


def pci_of(text):
    """'PCI:0000:3b:00' -> '0000:3b:00' (domain:bus:device, lower case), the key GPUs are matched by."""
    text = text.strip()
    if text.upper().startswith("PCI:"):
        text = text[4:]
    return text.lower()


def _from_last(lines, marks):
    """The lines from the last one that `marks` (a predicate) on; all of them when none does."""
    for index in range(len(lines) - 1, -1, -1):
        if marks(lines[index]):
            return lines[index:]
    return lines


def since_driver_load(lines):
    """The lines from the NVIDIA driver's last load on: a GPU reset through a module reload (or a
    reboot) starts anew, and what was logged before it no longer describes the GPUs."""
    return _from_last(lines, lambda line: DRIVER_LOADED in line)


def since_boot(lines):
    """The lines of a multi-boot log file (kern.log, messages) from the last boot on."""
    return _from_last(lines, BOOTED.search)


def _count(found, key, fields, message, when, line):
    """One more line of the event `key` in `found`: its count, last time and message, and the causes it names."""
    event = found.setdefault(key, dict(fields, count=0, first=when, first_line=message))
    event["count"] += 1
    event["last"] = when
    event["line"] = message
    causes = sorted(set(event.get("causes", [])) | {int(n) for n in CAUSED_BY.findall(line)})
    if causes:
        event["causes"] = causes


def xid_events(lines, boot=None):
    """Aggregate Xid lines: one entry per distinct (Xid, GPU), in order of first appearance; and, past
    MAX_DISTINCT pairs, one entry per Xid for the rest (their GPU named only in their message)."""
    found, not_kept = {}, {}
    mentioned = "?"   # the GPU an NVRM message named last: "fallen off the bus" may come lines later
    for line in lines:
        match = XID_RE.search(line)
        if "NVRM" in line and PCI_RE.search(line):
            mentioned = pci_of(PCI_RE.search(line).group(1))
        if match:
            xid, pci, said_again = int(match.group(2)), pci_of(match.group(1)), False
        elif "fallen off the bus" in line and "NVRM" in line:   # may be said without an Xid line
            xid, pci, said_again = 79, mentioned, True
        else:
            continue
        message = line.split("NVRM: ", 1)[-1].strip()[:300]
        key = (xid, pci)
        if key in found:
            if not said_again:   # else the driver's own words for an Xid 79 already counted
                _count(found, key, {}, message, stamp_of(line, boot), line)
        elif len(found) < MAX_DISTINCT:
            _count(found, key, {"xid": xid, "pci": pci}, message, stamp_of(line, boot), line)
        elif not (said_again and xid in not_kept):
            _count(not_kept, xid, {"xid": xid}, message, stamp_of(line, boot), line)
    return list(found.values()), list(not_kept.values())


def neighbour_overflows(lines, boot=None):
    """The kernel's neighbour-table overflow lines since boot: per table, how many, when last, the last line."""
    found = {}
    for line in lines:
        match = NEIGH_OVERFLOW.search(line)
        if match:
            _count(found, match.group(1) or "arp_cache", {"table": match.group(1) or "arp_cache"},
                   line[match.start():].strip()[:200], stamp_of(line, boot), line)
    return list(found.values())


def read_kmsg(limit_s=2.0, path="/dev/kmsg"):
    """(messages, sequence number of the first) of the kernel ring buffer, read without blocking,
    each with its time since boot. A first sequence number above 0: the buffer has wrapped.

    /dev/kmsg hands out one record per read; a regular file in its format (a saved copy)
    comes in chunks, so records are cut at newlines either way. Continuation lines (" KEY=")
    are dropped."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    lines, pending, first = [], b"", None
    deadline = time.time() + limit_s
    try:
        while time.time() < deadline:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == 32:  # EPIPE: overwritten while reading; go on
                    continue
                raise
            if not chunk:
                break
            pending += chunk
            *complete, pending = pending.split(b"\n")
            for record in complete:
                match = KMSG_RE.match(record.decode("utf-8", "replace"))
                if match:
                    if first is None:
                        first = int(match.group(2))
                    lines.append("[%.6f] %s" % (int(match.group(3)) / 1e6, match.group(4)))
    finally:
        os.close(fd)
    return lines, first


def _tail(path, limit=LOG_TAIL_BYTES):
    with open(path, "rb") as handle:
        handle.seek(0, 2)
        size = handle.tell()
        handle.seek(max(0, size - limit))
        return since_boot(handle.read().decode("utf-8", "replace").splitlines())


def _journal():
    journalctl = shutil.which("journalctl")
    if journalctl is None:
        raise OSError("no journalctl")
    code, out, err = run([journalctl, "-k", "-b", "0", "-o", "short-iso", "--no-pager", "-q"])
    if code != 0 or not out.strip():   # no rights: journalctl prints nothing, or a hint on stderr
        raise OSError((err.strip().splitlines() or ["no entries (not in group systemd-journal or adm?)"])[0][:200])
    return out.splitlines()


def collect_kernel_log(args):
    """Xid events since the NVIDIA driver last loaded, from the first source that can be read.
    When the ring buffer has wrapped (its first record is not the boot's first), the journal,
    which keeps the whole boot, is read instead where it can be; else the result says from when."""
    boot = boot_time()
    nvidia = os.path.exists("/proc/driver/nvidia")   # the slower sources only where Xids can be logged
    reasons = []
    sources = [("/dev/kmsg", lambda: read_kmsg())]
    if nvidia:
        sources += [("journalctl -k -b 0", lambda: (_journal(), 0))]
        sources += [(path, lambda path=path: (_tail(path), 0)) for path in KERNEL_LOG_FILES if os.path.exists(path)]
    for name, reader in sources:
        try:
            lines, first_seq = reader()
        except (OSError, ValueError) as exc:
            reasons.append("%s: %s" % (name, getattr(exc, "strerror", None) or exc))
            continue
        wrapped = bool(first_seq)
        if wrapped and nvidia:
            try:
                lines, name, wrapped = _journal(), "journalctl -k -b 0", False
            except (OSError, ValueError):
                pass
        events, not_kept = xid_events(since_driver_load(lines), boot)
        doc = {"readable": True, "source": name, "lines": len(lines), "xid": events,
               "neigh_overflow": neighbour_overflows(lines, boot)}
        if wrapped:
            doc["from"] = stamp_of(lines[0], boot) if lines else None
        if not_kept:
            doc["xid_not_kept"] = not_kept
        if boot:
            doc["boot"] = _iso(boot)
        return doc
    return {"readable": False, "reason": "; ".join(reasons), "xid": []}
