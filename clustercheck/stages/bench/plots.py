"""PNG plots for the bench report: bus bandwidth against size, and the pairwise heat map."""

from __future__ import annotations

import os
from typing import List

from clustercheck.stages.bench.facts import BenchFacts


def save_plots(facts: BenchFacts, stem: str) -> List[str]:
    """Write <stem>-busbw.png and <stem>-pairs.png; returns the file names written (none without matplotlib)."""
    try:
        import matplotlib   # optional (the train extra): no plots without it
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt   # after use("Agg")
    except ImportError:
        return []
    written = []
    if facts.figures.by_collective:
        fig, ax = plt.subplots(figsize=(7, 4))
        for name, coll_rows in facts.figures.by_collective.items():
            for placement in ("out_of_place", "in_place"):
                points = [(r["size"], r[placement]["busbw"]) for r in coll_rows if r.get(placement)]
                if points:
                    ax.plot(*zip(*points), marker="o", label=f"{name} {placement.replace('_', '-')}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("bus bandwidth (GB/s)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = f"{stem}-busbw.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(os.path.basename(path))
    speeds = facts.figures.pairs.get("matrix")
    if speeds:
        names = [n.name for n in facts.nodes]
        grid = [[speeds.get((a, b), speeds.get((b, a), float("nan"))) if a != b else float("nan") for b in names]
                for a in names]
        fig, ax = plt.subplots(figsize=(1.2 + 0.5 * len(names), 1 + 0.5 * len(names)))
        image = ax.imshow(grid, cmap="viridis")
        ax.set_xticks(range(len(names)), names, rotation=90, fontsize=7)
        ax.set_yticks(range(len(names)), names, fontsize=7)
        fig.colorbar(image, ax=ax, label="GB/s")
        ax.set_title("pairwise exchange")
        fig.tight_layout()
        path = f"{stem}-pairs.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(os.path.basename(path))
    return written
