"""What a process waits on in the kernel: its state letter, its wchan and its kernel stack from /proc, and a
watch that keeps each watched process's longest spell in D state (uninterruptible: waiting on a filesystem
or a device) without progress. A process reading or writing a slow filesystem back to back is in D state at
almost every sample while its I/O counters move: that is slow, not stuck, and the watch resets its spell
whenever /proc/PID/io moves. Standard library only; shipped beside the storage probe."""

try:  # imported as part of the clustercheck package (the tests)
    from .nodelib import read
except ImportError:  # shipped to a node: inline_command registers nodelib before this helper
    from nodelib import read


def proc_state(pid):
    """(state letter, wchan) of a process, or (None, '') once it is gone."""
    after_name = read(f"/proc/{pid}/stat", "").rsplit(")", 1)[-1].split()   # the name may hold spaces and ")"
    if not after_name:
        return None, ""
    wchan = read(f"/proc/{pid}/wchan", "")
    return after_name[0], wchan if wchan != "0" else ""


def io_counters(pid):
    """The bytes and calls a process has passed through read and write so far (/proc/PID/io), or None."""
    fields = dict(line.split(":", 1) for line in read(f"/proc/{pid}/io", "").splitlines() if ":" in line)
    try:
        return tuple(int(fields[k]) for k in ("rchar", "wchar", "syscr", "syscw"))
    except (KeyError, ValueError):
        return None


def stack_frames(text, limit=12):
    """/proc/PID/stack as function names, innermost first: "[<0>] nfs_wait_bit_killable+0x24/0xa0 [nfs]" is
    "nfs_wait_bit_killable [nfs]" (kernels since 4.15 hide the addresses; older ones print them)."""
    frames = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 2 or not parts[0].startswith("[<"):
            continue
        name = parts[1].split("+", 1)[0]
        if name.startswith("0x"):      # the end marker, 0xffffffffffffffff
            continue
        frames.append(name + (" " + parts[2] if len(parts) > 2 and parts[2].startswith("[") else ""))
    return frames[:limit]


def kernel_stack(pid):
    return stack_frames(read(f"/proc/{pid}/stack", ""))


class Watch:
    """Each writer's longest spell in D state, with what it waited on."""

    def __init__(self, pids, threshold):
        self.pids, self.threshold = dict(pids), threshold
        self.since = {}
        self.longest = {}
        self.counters = {}

    def sample(self, now):
        for slot, pid in self.pids.items():
            state, wchan = proc_state(pid)
            counters = io_counters(pid)
            moved = counters is not None and counters != self.counters.get(slot)
            self.counters[slot] = counters
            if state != "D" or moved:
                self.since.pop(slot, None)
                continue
            began = self.since.setdefault(slot, now)
            spell = now - began
            if spell >= self.threshold and spell > self.longest.get(slot, {}).get("seconds", 0):
                known = self.longest.get(slot, {})
                self.longest[slot] = {"slot": slot, "seconds": round(spell, 2), "still": True,
                                      "wchan": wchan or known.get("wchan", ""),
                                      "stack": known.get("stack") or kernel_stack(pid)}

    def finish(self, alive):
        for slot, spell in self.longest.items():
            spell["still"] = slot in alive and slot in self.since
        return sorted(self.longest.values(), key=lambda s: -s["seconds"])
