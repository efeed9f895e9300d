#!/usr/bin/env bash
# Installs everything the tests need (system packages included) and runs them.
#   sudo ./scripts/test.sh            # all tests; the sandbox ones need root
#   ./scripts/test.sh -k inventory    # extra arguments go to pytest
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else "$@"; fi; }

# The sandbox cluster: sshd in network namespaces, veth, tc, iptables; iperf3 for the bench baseline;
# pdsh, which DeepSpeed's multi-node launcher needs on the launch node (env warns without it);
# slurm-wlm and munge for the sandbox's real Slurm (sandbox up --slurm; the Slurm tests); sshfs for the sandbox's
# network filesystem (sandbox up --storage; the storage tests); Prometheus, its Pushgateway and node_exporter,
# which the metrics tests start on loopback and query (never a double of them).
if command -v apt-get >/dev/null; then
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        openssh-server openssh-client iproute2 iptables iperf3 util-linux procps pdsh slurm-wlm munge sshfs \
        prometheus prometheus-pushgateway prometheus-node-exporter >/dev/null
fi

PY=${PYTHON:-python3}
# torch first, pinned to the CPU wheel this machine carries (an unpinned torch pulls a multi-GB
# CUDA build); deepspeed's build imports torch, hence --no-build-isolation.
"$PY" -m pip install -q "torch==2.13.0"
"$PY" -m pip install -q --no-build-isolation deepspeed
"$PY" -m pip install -q -e ".[test,train]"

# What the tests run on this host, checked here rather than found missing later: slurm-wlm gives
# salloc, sbatch, srun, slurmctld and slurmd, munge gives munged, the test extra gives py-spy
# (installed beside the interpreter). Without apt-get the Slurm tests skip and say why.
PY_SPY="$(dirname "$("$PY" -c 'import sys; print(sys.executable)')")/py-spy"
[ -x "$PY_SPY" ] || { echo "scripts/test.sh: py-spy was not installed beside $PY" >&2; exit 1; }
if command -v apt-get >/dev/null; then
    for tool in salloc sbatch srun slurmctld slurmd munged pdsh sshfs prometheus prometheus-pushgateway \
            prometheus-node-exporter; do
        command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] || {
            echo "scripts/test.sh: $tool is missing after apt-get install" >&2; exit 1; }
    done
fi

# Two workers (pytest-xdist): every sandbox test on one of them, one after the other (conftest.py puts them in
# one group: one cluster of namespaces at a time), the unit tests beside them on the other; WORKERS=0 runs all
# in this process. The suite's wall time on this 2-core machine: docs/performance.md.
exec "$PY" -m pytest -q -p no:cacheprovider --durations=15 -n "${WORKERS:-2}" --dist loadgroup "$@"
