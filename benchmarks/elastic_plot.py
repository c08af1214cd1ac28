"""The elastic benchmark's plot (``benchmarks/plots/elastic.png``; matplotlib, the
optional ``bench`` extra): one panel per scenario (its first run), a row per stage-2
task, a dot each time a read_committed consumer saw that task's output advance; the
steps (from the disruption until the job settled) shaded; a task that moved in a step
is drawn red in that step. Without matplotlib nothing is drawn."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Timeline:
    """What one run's panel shows (times in s, unix)."""

    title: str
    advances: Mapping[int, Sequence[float]]  # task -> when its output advanced
    steps: Sequence[tuple[str, float, float, frozenset[int]]]  # name, start, end, moved


def draw(timelines: Sequence[Timeline], path: Path) -> bool:
    """Draw ``timelines`` into ``path``; False when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    if not timelines:
        return False
    fig, axes = plt.subplots(len(timelines), 1, figsize=(8, 2.6 * len(timelines)), squeeze=False)
    for ax, tl in zip(axes[:, 0], timelines, strict=True):
        t0 = tl.steps[0][1] - 10.0 if tl.steps else min(min(a) for a in tl.advances.values())
        for task, times in sorted(tl.advances.items()):
            xs = [t - t0 for t in times if t >= t0]
            red = [
                x
                for x in xs
                for _, s, e, moved in tl.steps
                if task in moved and s - t0 <= x <= e - t0
            ]
            ax.plot(xs, [task] * len(xs), "|", color="tab:blue", markersize=8)
            ax.plot(red, [task] * len(red), "|", color="tab:red", markersize=8)
        top = len(tl.advances)
        for i, (name, s, e, _) in enumerate(tl.steps):
            ax.axvspan(s - t0, e - t0, color="0.86" if i % 2 else "0.93", zorder=0)
            ax.text(s - t0 + 0.3, top - 0.1, name, fontsize=7, va="bottom")
        ax.set_ylim(-0.6, top + 0.7)
        ax.set_yticks(sorted(tl.advances))
        ax.set_ylabel("stage-2 task")
        ax.set_title(tl.title, fontsize=9)
    axes[-1, 0].set_xlabel("s (red: a task that moved in the shaded step)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
