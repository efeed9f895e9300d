"""The real Prometheus, Pushgateway and node_exporter (Debian's packages, installed by scripts/test.sh), started
on loopback ports for a test and stopped after it: no double of Prometheus anywhere."""

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

BINARIES = {"prometheus": "prometheus", "pushgateway": "prometheus-pushgateway",
            "node_exporter": "prometheus-node-exporter"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_ready(url: str, within_s: float = 30.0) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer within {within_s:.0f} s")


class Servers:
    def __init__(self, work: str):
        self.work, self.procs = work, []
        self.textfiles = os.path.join(work, "textfiles")
        os.makedirs(self.textfiles)
        self.gateway_port, self.exporter_port, self.prometheus_port = free_port(), free_port(), free_port()
        self.gateway = f"http://127.0.0.1:{self.gateway_port}"
        self.exporter = f"http://127.0.0.1:{self.exporter_port}"
        self.prometheus = f"http://127.0.0.1:{self.prometheus_port}"

    def start(self) -> "Servers":
        self._spawn([BINARIES["pushgateway"], f"--web.listen-address=127.0.0.1:{self.gateway_port}"])
        self._spawn([BINARIES["node_exporter"], f"--web.listen-address=127.0.0.1:{self.exporter_port}",
                     f"--collector.textfile.directory={self.textfiles}", "--collector.disable-defaults",
                     "--collector.textfile"])
        config = os.path.join(self.work, "prometheus.yml")
        with open(config, "w") as handle:
            handle.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
                         f"  - job_name: pushgateway\n    honor_labels: true\n    static_configs:\n"
                         f"      - targets: ['127.0.0.1:{self.gateway_port}']\n"
                         f"  - job_name: node\n    static_configs:\n      - targets: ['127.0.0.1:{self.exporter_port}']\n")
        self._spawn([BINARIES["prometheus"], f"--config.file={config}",
                     f"--storage.tsdb.path={os.path.join(self.work, 'tsdb')}",
                     f"--web.listen-address=127.0.0.1:{self.prometheus_port}"])
        wait_ready(self.gateway + "/-/ready")
        wait_ready(self.exporter + "/metrics")
        wait_ready(self.prometheus + "/-/ready", 60)
        return self

    def _spawn(self, argv):
        log = open(os.path.join(self.work, os.path.basename(argv[0]) + ".log"), "w")
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.work))

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()

    def query(self, promql: str, within_s: float = 20.0, want=lambda result: bool(result)):
        """Prometheus's HTTP query API, as a dashboard asks it, until `want` holds or the time is up."""
        deadline = time.monotonic() + within_s
        result = []
        while time.monotonic() < deadline:
            url = f"{self.prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
            with urllib.request.urlopen(url, timeout=5) as answer:
                result = json.loads(answer.read())["data"]["result"]
            if want(result):
                return result
            time.sleep(0.5)
        return result

    def scrape(self, base: str) -> str:
        with urllib.request.urlopen(base + "/metrics", timeout=5) as answer:
            return answer.read().decode()


def servers_or_skip(tmp_path):
    missing = [b for b in BINARIES.values() if shutil.which(b) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (scripts/test.sh installs Debian's packages)")
    return Servers(str(tmp_path)).start()
