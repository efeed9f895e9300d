"""Where and how to connect to a node, as OpenSSH would: ~/.ssh/config (or -F) applied.

paramiko parses ssh_config but applies none of it on its own; this module does,
for HostName, User, Port, IdentityFile, IdentitiesOnly, ProxyJump, ProxyCommand,
UserKnownHostsFile, GlobalKnownHostsFile, StrictHostKeyChecking, HostKeyAlias and
ConnectTimeout. Precedence is OpenSSH's: the command line (here, the inventory and
its defaults, and --connect-timeout as OpenSSH's -o ConnectTimeout) wins over the config file.
"""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import paramiko

from clustercheck.core.errors import InputError

DEFAULT_USER_KNOWN_HOSTS = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")
DEFAULT_GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")
DEFAULT_CONNECT_TIMEOUT_S = 10.0   # as ClusterShell


@dataclass(frozen=True)
class Target:
    """A resolved SSH destination."""

    alias: str                  # the name the user wrote
    hostname: str               # what to connect to
    port: int
    user: str
    identity_files: Tuple[str, ...] = ()
    identities_only: bool = False
    proxy_command: Optional[str] = None
    proxy_jump: Tuple[str, ...] = ()   # hops, first to last, each "[user@]host[:port]"
    hostkey_alias: Optional[str] = None
    strict_hostkeys: str = "yes"       # yes | accept-new (OpenSSH's "no" is read as accept-new)
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S

    @property
    def hostkey_name(self) -> str:
        """The name known_hosts files the key under, as OpenSSH writes it."""
        name = self.hostkey_alias or self.hostname
        return name if self.port == 22 else f"[{name}]:{self.port}"


@dataclass
class SSHSettings:
    """Per-run SSH settings shared by every node."""

    config_path: Optional[str] = None          # -F; None: ~/.ssh/config when it exists
    user_known_hosts: List[str] = field(default_factory=list)  # --known-hosts overrides the config
    accept_new_hostkeys: bool = False
    connect_timeout_s: Optional[float] = None  # given on the command line: beats ConnectTimeout in the config

    def load_config(self) -> paramiko.SSHConfig:
        path = self.config_path
        if path is None:
            default = os.path.expanduser("~/.ssh/config")
            if not os.path.exists(default):
                return paramiko.SSHConfig()
            path = default
        try:
            return IndexedSSHConfig.indexed(paramiko.SSHConfig.from_path(path))
        except FileNotFoundError:
            raise InputError("no such ssh config file", path) from None
        except (paramiko.ConfigParseError, ValueError) as exc:
            raise InputError(f"cannot parse ssh config ({exc})", path) from None


class IndexedSSHConfig(paramiko.SSHConfig):
    """paramiko's lookup tries every Host block in turn (calling getpwuid for each): with one
    block per node, 1,000 lookups cost a million matches. Blocks that name hosts literally are
    indexed by name; the others (wildcards, negations, Match) take part in every lookup; the
    file's order, which decides which value wins, is kept."""

    @classmethod
    def indexed(cls, config: paramiko.SSHConfig) -> "IndexedSSHConfig":
        self = cls()
        self._config = config._config
        self._literal: Dict[str, List[int]] = {}
        self._always: List[int] = []
        for index, context in enumerate(self._config):
            hosts = context.get("host") or []
            if hosts and "matches" not in context and not any(c in h for h in hosts for c in "*?!"):
                for host in hosts:
                    self._literal.setdefault(host, []).append(index)
            else:
                self._always.append(index)
        # A canonicalised name may match other literal blocks: no shortcut then.
        self._plain = not any("canonicalizehostname" in c.get("config", {}) for c in self._config)
        return self

    def lookup(self, hostname: str):
        if not self._plain:
            return super().lookup(hostname)
        subset = paramiko.SSHConfig()
        subset._config = [self._config[i] for i in sorted(set(self._literal.get(hostname, [])) | set(self._always))]
        return subset.lookup(hostname)


def _split_hop(hop: str) -> Tuple[Optional[str], str, Optional[int]]:
    user = None
    if "@" in hop:
        user, _, hop = hop.rpartition("@")
    host, port = hop, None
    if hop.count(":") == 1:
        host, _, port_text = hop.partition(":")
        port = int(port_text) if port_text.isdigit() else None
    return user, host, port


def _number(settings: SSHSettings, alias: str, keyword: str, text, low: int, high: int) -> int:
    """A whole number from ssh_config, in range, or bad input naming the file, the host and the value."""
    value = str(text).strip()
    if not value.isdigit() or not low <= int(value) <= high:
        where = settings.config_path or "~/.ssh/config"
        raise InputError(f"{keyword} for {alias} must be a whole number from {low} to {high}", where, value=value)
    return int(value)


def resolve(config: paramiko.SSHConfig, alias: str, settings: SSHSettings,
            user: Optional[str] = None, port: Optional[int] = None) -> Target:
    """Apply ssh_config to `alias`; explicit user/port win over the config."""
    entry = config.lookup(alias)
    strict = str(entry.get("stricthostkeychecking", "yes")).lower()
    accept_new = settings.accept_new_hostkeys or strict in ("accept-new", "no", "off")
    jump = entry.get("proxyjump")
    hops: Tuple[str, ...] = ()
    if jump and jump.lower() != "none":
        hops = tuple(h.strip() for h in jump.split(",") if h.strip())
    proxy_command = entry.get("proxycommand")
    if proxy_command and proxy_command.lower() == "none":
        proxy_command = None
    config_timeout = entry.get("connecttimeout")
    if settings.connect_timeout_s is not None:
        timeout_s = settings.connect_timeout_s
    elif config_timeout:
        timeout_s = float(_number(settings, alias, "ConnectTimeout", config_timeout, 1, 3600))
    else:
        timeout_s = DEFAULT_CONNECT_TIMEOUT_S
    config_port = entry.get("port")
    return Target(
        alias=alias,
        hostname=entry.get("hostname", alias),
        port=port or (_number(settings, alias, "Port", config_port, 1, 65535) if config_port else 22),
        user=user or entry.get("user") or getpass.getuser(),
        identity_files=tuple(os.path.expanduser(p) for p in entry.get("identityfile", [])),
        identities_only=str(entry.get("identitiesonly", "no")).lower() == "yes",
        proxy_command=proxy_command,
        proxy_jump=hops,
        hostkey_alias=entry.get("hostkeyalias"),
        strict_hostkeys="accept-new" if accept_new else "yes",
        connect_timeout_s=timeout_s,
    )


def resolve_hop(config: paramiko.SSHConfig, hop: str, settings: SSHSettings) -> Target:
    """A ProxyJump hop is itself resolved through the config, as OpenSSH does."""
    user, host, port = _split_hop(hop)
    return resolve(config, host, settings, user=user, port=port)


def known_hosts_files(config: paramiko.SSHConfig, alias: str, settings: SSHSettings) -> Tuple[List[str], List[str]]:
    """(user files, global files): where keys are looked up; new keys go to the first user file."""
    entry = config.lookup(alias)
    if settings.user_known_hosts:
        user_files = list(settings.user_known_hosts)
    elif entry.get("userknownhostsfile"):
        user_files = entry["userknownhostsfile"].split()
    else:
        user_files = list(DEFAULT_USER_KNOWN_HOSTS)
    global_files = (entry["globalknownhostsfile"].split() if entry.get("globalknownhostsfile")
                    else list(DEFAULT_GLOBAL_KNOWN_HOSTS))
    expand = lambda paths: [os.path.expanduser(p) for p in paths if p.lower() != "none"]  # noqa: E731
    return expand(user_files), expand(global_files)
