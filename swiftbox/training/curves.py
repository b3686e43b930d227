"""Figures from a finished run's log history: the loss curve PNG (matplotlib, Agg) and the first/last
values that go into the manifest's metrics."""
from __future__ import annotations

from pathlib import Path


def series(log_history: list[dict], key: str) -> list[tuple[int, float]]:
    return [(int(e["step"]), float(e[key])) for e in log_history if key in e and "step" in e]


def plot(log_history: list[dict], path: Path, keys=("loss",), title: str = "training") -> bool:
    """Write a PNG with one panel per key that has data; False when there is nothing to plot."""
    present = [k for k in keys if series(log_history, k)]
    if not present:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(present), figsize=(5 * len(present), 3.5), squeeze=False)
    for ax, key in zip(axes[0], present):
        steps, values = zip(*series(log_history, key))
        ax.plot(steps, values, marker="o", markersize=3)
        ax.set_xlabel("step")
        ax.set_ylabel(key)
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def first_last(log_history: list[dict], key: str, name: str) -> dict:
    points = series(log_history, key)
    if not points:
        return {}
    return {f"{name}_first": round(points[0][1], 6), f"{name}_last": round(points[-1][1], 6)}
