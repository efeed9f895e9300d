"""Where the metrics go: a Pushgateway (one request, grouped by job and cluster, under a bounded wait; a gateway
that is down is a WARN, never a hang or a lost report) or node_exporter's textfile collector (written
atomically: a temporary file renamed, as node_exporter documents). Bad input is said before any node is
contacted."""

from __future__ import annotations

import os
import re
import time
from typing import Optional
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, Gauge, push_to_gateway, pushadd_to_gateway, write_to_textfile

from clustercheck.core.errors import InputError
from clustercheck.core.result import Finding, Status, note
from clustercheck.metrics.schema import METRICS

PUSH_TIMEOUT_S = 5.0
JOB = "clustercheck"
TEXTFILE = "clustercheck.prom"


def check_pushgateway(url: str, flag: str = "--pushgateway") -> str:
    """A Pushgateway URL or InputError naming it: http(s), a host, a port in range, no whitespace."""
    if re.search(r"\s", url):
        raise InputError("not a Pushgateway URL: it holds whitespace or a line break", flag, value=url)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError("not a Pushgateway URL: write http://HOST:PORT (9091 is the Pushgateway's port)", flag,
                         value=url)
    try:
        port = parts.port
    except ValueError:
        raise InputError("not a Pushgateway URL: its port is not a number from 1 to 65535", flag, value=url) from None
    if port == 0:
        raise InputError("not a Pushgateway URL: port 0", flag, value=url)
    return url


def check_textfile_dir(directory: str, flag: str = "--textfile") -> str:
    if not os.path.isdir(directory):
        raise InputError("no such directory (node_exporter's --collector.textfile.directory)", flag, value=directory)
    if not os.access(directory, os.W_OK | os.X_OK):
        raise InputError("the directory is not writable by this user", flag, value=directory)
    return directory


def push(url: str, registry: CollectorRegistry, cluster: str, timeout_s: float = PUSH_TIMEOUT_S,
         replace: bool = True) -> Finding:
    """One push of the registry; the outcome as a finding (WARN when the gateway did not take it). replace: the
    group's metrics are these alone (PUT); else only the metrics of these names are replaced (POST), as a later
    push beside a run's does (the watch's slowdown beside the check's results)."""
    name = "clustercheck_push_timestamp_seconds"
    stamp = getattr(registry, "_names_to_collectors", {}).get(name) or Gauge(name, METRICS[name].help,
                                                                            registry=registry)
    stamp.set(time.time())      # a second push of the same registry (a retry) stamps it again
    try:
        (push_to_gateway if replace else pushadd_to_gateway)(url, job=JOB, registry=registry,
                                                             grouping_key={"cluster": cluster}, timeout=timeout_s)
    except Exception as exc:     # refused, timed out, an HTTP error: the verdict and the report stand
        return Finding("metrics.push", Status.WARN, f"the results were not pushed to {url}: "
                                                    f"{type(exc).__name__}: {str(exc)[:200]}", [],
                       "check the Pushgateway (is it up? curl URL/-/ready), then rerun; the report has the results")
    # what became of the results, not a check of the cluster: a note, never a pass that could stand for one
    return note("metrics.push", f"results pushed to {url} (job {JOB}, cluster {cluster})")


def write_textfile(directory: str, registry: CollectorRegistry, name: Optional[str] = None) -> str:
    path = os.path.join(directory, name or TEXTFILE)
    write_to_textfile(path, registry)      # a temporary file beside it, then renamed: never half read
    return path
