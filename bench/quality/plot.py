"""The success-over-time figure: one panel per world, one line per arm (a moving average of the
per-task success, averaged over seeds). matplotlib is the optional ``bench`` extra."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

#: Tasks in the moving average of a plotted line.
MOVING_AVERAGE = 60

_COLOURS = {
    "none": "black",
    "add+keep": "tab:orange",
    "add+keep+archive": "tab:olive",
    "all-immediate": "tab:red",
    "all-evidence": "tab:blue",
    "nojudge": "tab:gray",
    "llm": "tab:purple",
}


def moving_average(xs: Sequence[float], window: int = MOVING_AVERAGE) -> list[float]:
    """Trailing mean over up to ``window`` points (shorter at the start)."""
    out, total = [], 0.0
    for i, x in enumerate(xs):
        total += x
        if i >= window:
            total -= xs[i - window]
        out.append(total / min(i + 1, window))
    return out


def plot(
    curves: Mapping[str, Mapping[str, Sequence[float]]], path: Path, title: str, final_window: float
) -> bool:
    """Write the PNG; False (and nothing written) when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    from matplotlib.lines import Line2D

    worlds = list(curves)
    cols = min(3, len(worlds))
    rows = math.ceil(len(worlds) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.8 * rows), squeeze=False, sharey=True)
    handles: dict[str, Line2D] = {}
    for ax, world in zip(axes.flat, worlds, strict=False):
        for arm, curve in curves[world].items():
            config, _, scoring = arm.partition("/")
            start = min(MOVING_AVERAGE, len(curve)) - 1  # full windows only: the first points are noise
            (line,) = ax.plot(
                range(start + 1, len(curve) + 1),
                moving_average(curve)[start:],
                color=_COLOURS.get(config, "tab:cyan"),
                linestyle="--" if scoring == "weighted" else "-",
                linewidth=1.3,
            )
            handles.setdefault(arm, line)
        n = max(len(c) for c in curves[world].values())
        ax.axvspan(n * (1 - final_window), n, color="0.92", zorder=0)
        ax.set_title(world, fontsize=10)
        ax.set_xlabel("task")
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(worlds) :]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel(f"success (moving average of {MOVING_AVERAGE})")
    fig.legend(
        list(handles.values()), list(handles), loc="lower center", ncol=min(6, len(handles)), fontsize=8
    )
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.05 + 0.035 * math.ceil(len(handles) / 6), 1, 0.96))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


__all__ = ["MOVING_AVERAGE", "moving_average", "plot"]
