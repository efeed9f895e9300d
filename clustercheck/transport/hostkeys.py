"""Host key verification: known_hosts read once per run, new keys recorded safely.

Policy, as OpenSSH's StrictHostKeyChecking: a known key must match (a changed key is
always refused: paramiko raises BadHostKeyException whatever the policy); an unknown
key is refused unless the user opted in (accept-new), in which case it is appended to
the first user known_hosts file under an exclusive lock, so that many connections
accepting keys at once neither lose nor duplicate lines.
"""

from __future__ import annotations

import fcntl
import os
import threading
from typing import Dict, Iterable, List

import paramiko

from clustercheck.core.errors import InputError


class UnknownHostKey(paramiko.SSHException):
    def __init__(self, hostkey_name: str, key: paramiko.PKey, files: List[str]):
        self.hostkey_name = hostkey_name
        self.key = key
        self.files = files
        shown = files[0] if files else "known_hosts"
        super().__init__(
            f"{key.get_name()} key {key.fingerprint} of {hostkey_name} is not in {shown}: "
            f"verify it, then add it (ssh-keyscan) or rerun with --accept-new-hostkeys")


class KnownHosts:
    """The known_hosts files of a run, parsed once, shared by every connection."""

    def __init__(self, user_files: Iterable[str], global_files: Iterable[str] = ()):
        self.user_files = [f for f in user_files]
        self.global_files = [f for f in global_files]
        self._keys = paramiko.HostKeys()
        self._lock = threading.Lock()
        for path in self.global_files + self.user_files:
            self._load(path)
        self._index()

    def _index(self) -> None:
        """paramiko scans every entry per lookup: with a line per node, a million matches for
        1,000 nodes. Plain names are indexed; hashed names and patterns are tried every time."""
        self._by_name: Dict[str, List[int]] = {}
        self._others: List[int] = []
        for index, entry in enumerate(self._keys._entries):
            if any(h.startswith("|1|") or any(c in h for c in "*?!") for h in entry.hostnames):
                self._others.append(index)
            else:
                for host in entry.hostnames:
                    self._by_name.setdefault(host, []).append(index)

    def _load(self, path: str) -> None:
        if not os.path.isfile(path):
            return
        try:
            self._keys.load(path)
        except OSError:
            pass  # unreadable (permissions): it adds no keys; unknown hosts will be refused, naming it
        except (UnicodeDecodeError, paramiko.SSHException, ValueError) as exc:
            # a corrupt file would make every host look unknown: say which file it is instead
            raise InputError(f"not a known_hosts file ({type(exc).__name__}: {str(exc)[:120]})", path) from None

    def lookup(self, hostkey_name: str) -> Dict[str, paramiko.PKey]:
        with self._lock:
            subset = paramiko.HostKeys()
            indices = sorted(set(self._by_name.get(hostkey_name, [])) | set(self._others))
            subset._entries = [self._keys._entries[i] for i in indices]
            found = subset.lookup(hostkey_name)
            return dict(found) if found else {}

    def add(self, hostkey_name: str, key: paramiko.PKey) -> None:
        """Record a new key in memory and append it to the first user file, under a lock."""
        with self._lock:
            self._keys.add(hostkey_name, key.get_name(), key)
            self._index()
        if not self.user_files:
            return
        path = self.user_files[0]
        os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o700, exist_ok=True)
        line = f"{hostkey_name} {key.get_name()} {key.get_base64()}\n"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "r+", encoding="utf-8") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                handle.seek(0)
                if line not in handle.read().splitlines(keepends=True):
                    handle.write(line)
                    handle.flush()
                    os.fsync(handle.fileno())
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


class Policy(paramiko.MissingHostKeyPolicy):
    """Called by paramiko only for keys it does not know: refuse, or accept and record."""

    def __init__(self, known: KnownHosts, accept_new: bool):
        self.known = known
        self.accept_new = accept_new

    def missing_host_key(self, client, hostname, key):
        if not self.accept_new:
            raise UnknownHostKey(hostname, key, self.known.user_files)
        self.known.add(hostname, key)
