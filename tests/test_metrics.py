"""Results where operators look (issue 39): the real Prometheus, Pushgateway and node_exporter on loopback
(tests/prometheus_servers.py) scrape what clustercheck pushes and writes, asked through Prometheus's query API
as a dashboard would; the schema document matches what is scraped; bad input is exit 64 before any node."""

import os
import re
import socket
import threading
import time

import pytest

from clustercheck.metrics.schema import METRICS
from tests.conftest import clustercheck
from tests.prometheus_servers import servers_or_skip

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def servers(tmp_path):
    running = servers_or_skip(tmp_path)
    yield running
    running.stop()


def documented():
    """metric -> labels, from docs/metrics.md's table."""
    found = {}
    for line in open(os.path.join(ROOT, "docs", "metrics.md")):
        match = re.match(r"^\| `(clustercheck_\w+)` \| [^|]* \| ([^|]*) \|", line)
        if match:
            found[match.group(1)] = tuple(l.strip(" `") for l in match.group(2).split(",") if l.strip(" `-"))
    return found


def test_the_schema_document_is_the_schema():
    assert documented() == {name: metric.labels for name, metric in METRICS.items()}


def test_node_check_s_textfile_is_served_by_node_exporter_and_queried_in_prometheus(servers):
    proc = clustercheck("node-check", "--textfile", servers.textfiles, "--npd")
    assert proc.returncode in (0, 1, 2), proc.stderr
    scraped = servers.scrape(servers.exporter)
    host = socket.gethostname()
    assert f'clustercheck_check_status{{check="shm",node="{host}",stage="node-check"}}' in scraped
    assert "clustercheck_verdict " in scraped
    [verdict] = servers.query('clustercheck_verdict{job="node"}')
    assert verdict["value"][1] in ("0", "1", "2", "3")
    assert not [n for n in os.listdir(servers.textfiles) if not n.endswith(".prom")]   # no temporary left


def test_a_push_that_the_gateway_takes_is_scraped_with_its_cluster(servers):
    proc = clustercheck("env", "--pushgateway", servers.gateway, "--json")
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    scraped = servers.scrape(servers.gateway)
    assert 'clustercheck_check_status{check="reach",cluster="local",instance="",job="clustercheck",node="",' \
           'stage="env"}' in scraped or 'cluster="local"' in scraped
    names = {m for m in re.findall(r"^(clustercheck_\w+)\{", scraped, re.M)}
    assert names <= set(METRICS) and "clustercheck_check_status" in names
    for name, labels in re.findall(r"^(clustercheck_\w+)\{([^}]*)\}", scraped, re.M):
        keys = {pair.split("=")[0] for pair in labels.split(",") if pair} - {"cluster", "instance", "job"}
        assert keys == set(METRICS[name].labels), (name, keys)
    result = servers.query('clustercheck_verdict{job="clustercheck",cluster="local"}')
    assert result and result[0]["metric"]["cluster"] == "local"


def test_a_gateway_that_is_down_or_silent_is_a_warn_and_the_report_is_still_written(tmp_path):
    proc = clustercheck("env", "--pushgateway", "http://127.0.0.1:9", "--report", "--reports-dir", str(tmp_path))
    assert proc.returncode == 1 and "WARN  the results were not pushed to http://127.0.0.1:9" in proc.stdout
    assert any(name.endswith(".md") for name in os.listdir(tmp_path))
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(5)                     # takes the connection, never answers
    port = silent.getsockname()[1]
    held = []
    threading.Thread(target=lambda: held.append(silent.accept()), daemon=True).start()
    started = time.monotonic()
    proc = clustercheck("env", "--pushgateway", f"http://127.0.0.1:{port}")
    assert proc.returncode == 1 and "not pushed" in proc.stdout and time.monotonic() - started < 40
    silent.close()


@pytest.mark.parametrize("args, words", [
    (["env", "--pushgateway", "127.0.0.1:9091"], ["--pushgateway", "write http://HOST:PORT"]),
    (["env", "--pushgateway", "http://127.0.0.1:99999"], ["--pushgateway", "port"]),
    (["env", "--pushgateway", "http://gw:9091/a\nb"], ["--pushgateway", "line break"]),
    (["node-check", "--textfile", "/nonexistent/dir"], ["--textfile", "no such directory"]),
])
def test_bad_metrics_input_is_refused_before_any_node(args, words):
    proc = clustercheck(*args)
    assert proc.returncode == 64 and "Traceback" not in proc.stderr
    assert all(w in proc.stderr for w in words), proc.stderr


def test_launch_from_a_file_that_is_no_preflight_report_is_bad_input(tmp_path):
    other = tmp_path / "other.json"
    other.write_text('{"schema": 1, "command": "env", "findings": []}')
    proc = clustercheck("launch", "--from", str(other))
    assert proc.returncode == 64 and "not a clustercheck preflight report" in proc.stderr
    none = tmp_path / "none.json"
    none.write_text('{"command": "preflight", "launch": {"spec": null, "reason": "x"}, "failed_nodes": ["n1"], '
                    '"healthy_launch": {"spec": null, "reason": "no node passed"}}')
    proc = clustercheck("launch", "--from", str(none))
    assert proc.returncode == 64 and "no healthy node to launch on (no node passed)" in proc.stderr


def test_the_npd_exit_codes_follow_node_problem_detector():
    from clustercheck.core.result import Finding, Status
    from clustercheck.tools.node_health import npd_code
    assert [npd_code([Finding("x", s, "")]) for s in (Status.OK, Status.WARN, Status.FAIL, Status.UNKNOWN)] == \
        [0, 0, 1, 2]
