"""The metric schema, as data: every metric clustercheck exports, its type, unit and labels. docs/metrics.md
documents the same table (a test compares them), and what a scrape returns follows it (a test scrapes).

Names, labels and units follow Prometheus's conventions: base units (bytes, seconds, FLOP/s), `_seconds`,
`_bytes`, `_per_second`, and labels whose values are bounded (a stage, a check id, a node, a device index, a
dtype, a collective, a message size of the sweep) — never a message or a path. A status is Nagios's value:
0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN.
"""

from __future__ import annotations

from typing import Dict, NamedTuple, Tuple


class Metric(NamedTuple):
    help: str
    labels: Tuple[str, ...]


NAGIOS_VALUE = {"OK": 0, "WARN": 1, "FAIL": 2, "UNKNOWN": 3}   # Status name -> Nagios's number

METRICS: Dict[str, Metric] = {
    "clustercheck_check_status": Metric(
        "Each check's status per node (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN); node is empty for a check of the "
        "whole cluster", ("stage", "check", "node")),
    "clustercheck_stage_status": Metric("Each stage's verdict (Nagios value)", ("stage",)),
    "clustercheck_verdict": Metric("The run's verdict (Nagios value)", ()),
    "clustercheck_run_timestamp_seconds": Metric("When the run ended, seconds since the epoch", ()),
    "clustercheck_run_duration_seconds": Metric("How long the run took", ()),
    "clustercheck_stage_duration_seconds": Metric("How long each stage took", ("stage",)),
    "clustercheck_nodes": Metric("Nodes in the run, by health: healthy or failed (a FAIL or UNKNOWN names it)",
                                 ("health",)),
    "clustercheck_device_flops": Metric("Matmul rate each device reached, FLOP/s", ("node", "device", "dtype")),
    "clustercheck_device_flops_peers_median": Metric(
        "The median rate of the device's peers (its model, the other devices of the run), FLOP/s",
        ("node", "device", "dtype")),
    "clustercheck_device_flops_expected": Metric("The published figure of the device's model, FLOP/s",
                                                 ("node", "device", "dtype")),
    "clustercheck_device_copy_bytes_per_second": Metric(
        "Copy rates each device reached (direction: d2d, h2d, d2h), bytes per second", ("node", "device", "direction")),
    "clustercheck_device_copy_peers_median_bytes_per_second": Metric(
        "The median copy rate of the device's peers, bytes per second", ("node", "device", "direction")),
    "clustercheck_storage_bytes_per_second": Metric(
        "What the node's rank slots moved together (phase: write, read, data), bytes per second", ("node", "phase")),
    "clustercheck_storage_peers_median_bytes_per_second": Metric(
        "The median of the other nodes' rates in the phase, bytes per second", ("node", "phase")),
    "clustercheck_bench_busbw_bytes_per_second": Metric(
        "Bus bandwidth of the sweep (nccl-tests' busbw), bytes per second", ("collective", "size_bytes")),
    "clustercheck_bench_busbw_expected_bytes_per_second": Metric(
        "The bus bandwidth all_reduce should reach (the published figure or the configured one), bytes per second",
        ()),
    "clustercheck_straggler_slowdown": Metric(
        "While the job trains (injob --watch): how much slower the job's steps are because of a rank (1.3 = 30% "
        "slower; 1 once it is no longer slow); node and rank empty for the whole job", ("node", "rank")),
    "clustercheck_push_timestamp_seconds": Metric("When clustercheck pushed these metrics", ()),
}
