"""The stages preflight runs, in order (env, device, storage, net, bench, smoke), and the short bandwidth sweep it gives
bench."""

from __future__ import annotations

from typing import Optional

from clustercheck.ranks.runs import DEFAULT_RDZV_PORT
from clustercheck.stages.bench.options import BenchOptions
from clustercheck.stages.bench.stage import BenchStage
from clustercheck.stages.device.stage import DeviceStage
from clustercheck.stages.env.stage import EnvStage
from clustercheck.stages.net.stage import NetStage
from clustercheck.stages.smoke.stage import SmokeStage
from clustercheck.stages.storage.stage import StorageStage

STAGES = (EnvStage, DeviceStage, StorageStage, NetStage, BenchStage, SmokeStage)


STAGE_NAMES = tuple(cls.name for cls in STAGES)


def short_sweep(max_bytes: int = 16 * 2 ** 20, pairwise: str = "auto", timeout_s: float = 600.0,
                rdzv_port: int = DEFAULT_RDZV_PORT, config_path: Optional[str] = None) -> BenchOptions:
    """preflight's bench: pair rounds of 4 MiB, then all_reduce from 1 MiB (or less) to max_bytes."""
    return BenchOptions(collectives=("all_reduce",), min_bytes=min(2 ** 20, max_bytes), max_bytes=max_bytes,
                        step_factor=4, iters=5, warmup=2, pairwise=pairwise, pair_bytes=4 * 2 ** 20,
                        timeout_s=timeout_s, rdzv_port=rdzv_port, config_path=config_path)


