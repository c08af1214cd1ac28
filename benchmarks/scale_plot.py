"""The partitions x workers curves as one PNG (matplotlib, the optional ``bench`` extra;
without it no plot is drawn). One panel per figure, x = partitions per topic (log), a
line per worker count, solid for the first run (``before``) and dashed for the next."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from pathlib import Path

from benchmarks.scale_measure import Point

_PANELS: list[tuple[str, Callable[[Point], float | None]]] = [
    ("records/s", lambda p: p.rate or None),
    (
        "checkpoint ms (median)",
        lambda p: statistics.median(p.duration_ms) if p.duration_ms else None,
    ),
    ("start → first checkpoint s", lambda p: p.first_checkpoint_s),
    ("barrier records per checkpoint", lambda p: p.barriers_per_checkpoint or None),
    ("threads per worker (max)", lambda p: p.threads or None),
    ("RSS MB per worker (max)", lambda p: p.rss_mb or None),
    ("open files per worker (max)", lambda p: p.open_files or None),
    ("control records per checkpoint interval (all)", lambda p: p.control_per_interval or None),
    ("kill -9 → first output s", lambda p: p.kill_to_output_s),
]
_LOG_Y = {
    "barrier records per checkpoint",
    "threads per worker (max)",
    "open files per worker (max)",
}
_STYLES = ["-", "--", ":", "-."]


def draw(points: Sequence[Point], labels: Sequence[str], where: Path) -> bool:
    """Draw ``points`` (runs in ``labels`` order) into ``where``; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    where.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(3, 3, figsize=(13, 10))
    workers = sorted({p.workers for p in points})
    colours = {w: f"C{i}" for i, w in enumerate(workers)}
    xs_all = sorted({p.partitions for p in points})
    for ax, (name, value) in zip(axes.flat, _PANELS, strict=True):
        for li, label in enumerate(labels):
            for w in workers:
                line = sorted((p for p in points if p.label == label and p.workers == w),
                              key=lambda p: p.partitions)  # fmt: skip
                xy = [
                    (p.partitions, v) for p in line if not p.failure and (v := value(p)) is not None
                ]
                failed = [p for p in line if p.failure]
                if not xy and not failed:
                    continue
                ax.plot([x for x, _ in xy], [y for _, y in xy], _STYLES[li % len(_STYLES)],
                        marker="o", color=colours[w], label=f"{label}, {w} worker(s)")  # fmt: skip
                for p in failed:  # a point that gave up: an x at its value then, else on the axis
                    v = value(p)
                    at = v if v is not None else (1 if name in _LOG_Y else 0)
                    ax.plot([p.partitions * (1 + 0.06 * w)], [at], "x", color=colours[w], ms=9)
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs_all, [str(x) for x in xs_all])
        ax.set_xlabel("partitions per topic")
        ax.set_title(name, fontsize=10)
        if name in _LOG_Y:
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0)
    handles, names = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=max(1, len(names)), fontsize=8)
    fig.suptitle("2-stage keyed window job, exactly-once, checkpoints every 5 s "
                 "(x: the point gave up, at its value then or on the axis; see the table)", fontsize=11)  # fmt: skip
    fig.tight_layout(rect=(0, 0.04, 1, 0.97))
    fig.savefig(where, dpi=90)
    plt.close(fig)
    return True
