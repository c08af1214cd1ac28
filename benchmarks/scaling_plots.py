"""PNG plots of the scaling curves (matplotlib, the optional ``bench`` extra:
``pip install -e '.[bench]'``). Without matplotlib no plot is drawn and SCALING.md
says so; the tables are written either way."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from benchmarks.scaling_runs import Results


def draw(res: Results, where: Path) -> dict[str, str | None]:
    """Draw every curve that has points into ``where``; returns curve -> PNG file name."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return {}
    where.mkdir(parents=True, exist_ok=True)
    out: dict[str, str | None] = {}

    def save(name: str, fig: Any) -> None:
        fig.tight_layout()
        fig.savefig(where / f"{name}.png", dpi=110)
        plt.close(fig)
        out[name] = f"{name}.png"

    if res.keys:
        fig, ax = plt.subplots(figsize=(6.4, 4))
        ks = [r.keys for r in res.keys]
        ax.plot(ks, [r.rate for r in res.keys], "o-", label="records/s")
        ax.set_xscale("log")
        ax.set_xlabel("keys")
        ax.set_ylabel("records/s")
        ax.set_ylim(bottom=0)
        ax2 = ax.twinx()
        ax2.plot(ks, [r.peak_rss_mb for r in res.keys], "s--", color="tab:red", label="peak RSS MB")
        ax2.set_ylabel("peak RSS MB")
        ax2.set_ylim(bottom=0)
        ax.set_title("w2 throughput and peak RSS vs keys")
        _legend(ax, ax2)
        save("keys", fig)
    changed = [r for r in res.state if r.changed]
    if changed:
        fig, ax = plt.subplots(figsize=(6.4, 4))
        ks = [r.keys for r in changed]
        ax.plot(ks, [r.state_bytes / 1e6 for r in changed], "o-", label="state MB")
        med = [statistics.median(c.uploaded_bytes for c in r.changed) / 1e6 for r in changed]
        ax.plot(ks, med, "s-", label="uploaded MB per interval (median)")
        mean = [r.mean_share * r.state_bytes / 1e6 for r in changed]
        ax.plot(ks, mean, "v-", label="uploaded MB per interval (mean)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("keys in state")
        ax.set_ylabel("MB")
        ax2 = ax.twinx()
        ax2.plot(
            ks,
            [statistics.median(c.duration_ms for c in r.changed) for r in changed],
            "^--",
            color="tab:green",
            label="checkpoint ms (median)",
        )
        ax2.set_ylabel("checkpoint duration ms")
        ax2.set_ylim(bottom=0)
        ax.set_title("incremental checkpoints, 1 % of keys changed per interval")
        _legend(ax, ax2)
        save("checkpoint", fig)
    if res.state:
        fig, ax = plt.subplots(figsize=(6.4, 4))
        for wipe, label in ((True, "local state wiped"), (False, "local state kept")):
            rows = [r for r in res.state if r.wipe == wipe]
            if rows:
                ax.plot([r.keys for r in rows], [r.recovery_s for r in rows], "o-", label=label)
        ax.set_xscale("log")
        ax.set_xlabel("keys in state")
        ax.set_ylabel("kill -9 -> first output, s")
        ax.set_ylim(bottom=0)
        ax.set_title("recovery time vs state size")
        ax.legend()
        save("recovery", fig)
    if res.workers:
        fig, ax = plt.subplots(figsize=(5, 4))
        ax.bar([str(r.workers) for r in res.workers], [r.rate for r in res.workers])
        ax.set_xlabel("worker processes")
        ax.set_ylabel("records/s")
        ax.set_title("w2 throughput, 1 and 2 processes")
        save("workers", fig)
    if res.latency:
        fig, ax = plt.subplots(figsize=(6.4, 4))
        xs = [r.interval_s for r in res.latency]
        ax.plot(xs, [r.p50_ms for r in res.latency], "o-", label="p50")
        ax.plot(xs, [r.p99_ms for r in res.latency], "s-", label="p99")
        ax.plot(xs, [2000 * x for x in xs], ":", color="grey", label="2x interval (target for p99)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("checkpoint interval s")
        ax.set_ylabel("latency ms (input -> read_committed)")
        ax.set_title("end-to-end latency vs checkpoint interval")
        ax.legend()
        save("latency", fig)
    if res.outputs:
        fig, ax = plt.subplots(figsize=(6.4, 4))
        budgets = sorted({o.budget_mb for o in res.outputs if o.budget_mb is not None})
        for budget in [*budgets, None]:
            outs = [o for o in res.outputs if o.budget_mb == budget]
            label = (
                "unbounded (in memory)"
                if budget is None
                else f"sink buffer {budget:.0f} MiB (spills)"
            )
            if outs:
                ax.plot([o.output for o in outs], [o.peak_rss_mb for o in outs], "o-", label=label)
        ax.set_xlabel("output records in one checkpoint interval")
        ax.set_ylabel("peak RSS MB")
        ax.set_ylim(bottom=0)
        ax.set_title("peak RSS vs output per interval")
        ax.legend()
        save("rss", fig)
    return out


def _legend(ax: Any, ax2: Any) -> None:
    """One legend for a plot with a second y axis."""
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="best", fontsize=8)
