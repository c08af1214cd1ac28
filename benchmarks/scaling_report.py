"""SCALING.md's tables and verdicts (``benchmarks/scaling.py`` writes it): each curve's
table and how it was measured, and the verdicts on the targets the curves measure.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

from benchmarks.scaling_runs import Results

if TYPE_CHECKING:
    from benchmarks.scaling import Sizes


# ------------------------------------------------------------------ report


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(str(c) for c in row) + " |" for row in rows),
    ]


def report(
    res: Results, sizes: Sizes, header: list[str], plots: dict[str, str | None]
) -> list[str]:
    def plot(name: str) -> list[str]:
        p = plots.get(name)
        return (
            [f"![{name}](plots/{p})", ""] if p else ["(no plot: matplotlib is not installed)", ""]
        )

    lines = [*header]
    lines += ["## w2 throughput vs keys", ""]
    lines += [
        "Workload 2 (keyed tumbling-window count, RocksDB, exactly-once, checkpoints every "
        "1 s, one process), `max(keys, "
        f"{sizes.keys_min_records:,})` records drawn uniformly from the keys, a window half "
        "the input's event-time span (the first window's state holds about every key and "
        "fires mid-run, its results go through the exactly-once sink). Peak RSS is the "
        "process's.",
        "",
    ]
    lines += _table(
        ["keys", "records", "window s", "records/s", "s", "CPU s", "peak RSS MB", "output records"],
        [[f"{r.keys:,}", f"{r.records:,}", f"{r.window_ms / 1000:.0f}", f"{r.rate:,.0f}",
          f"{r.seconds:.1f}", f"{r.cpu_s:.1f}", f"{r.peak_rss_mb:.0f}", f"{r.output:,}"]
         for r in res.keys],
    )  # fmt: skip
    lines += ["", *plot("keys")]
    lines += ["## Checkpoint duration and uploaded bytes vs state size (1 % of keys changed)", ""]
    lines += [
        "Workload 4's recovery job (one record per key, all in one 1-hour window, checkpoints "
        "every 1 s into a `file://` store, 4 tasks with a RocksDB each). Once a checkpoint "
        "covers the input and one more with nothing changed completed, "
        f"{sizes.changed_intervals} intervals in a row change 1 % of the keys each (every "
        "100th key, another 1 % each time: one more record each); each waits until a "
        "checkpoint covers its change. An interval's upload: everything its checkpoints "
        "uploaded (incremental: the SST files the store does not hold yet, and the sink "
        "blob); its duration: trigger to the last acknowledgement, the longest of its "
        "checkpoints. Share = upload / the state of the checkpoint that covered it. Mean = "
        "all intervals' uploads over their states: the steady cost, compactions included.",
        "",
    ]
    changed = [r for r in res.state if r.changed]

    def pct(x: float) -> str:
        return f"{100 * x:.1f} %"

    lines += _table(
        ["keys", "state MB", "intervals", "share: first", "median", "max", "mean",
         "checkpoint ms: median", "max", "nothing changed"],
        [[f"{r.keys:,}", f"{r.state_bytes / 1e6:.1f}", len(r.changed), pct(r.shares()[0]),
          pct(statistics.median(r.shares())), pct(max(r.shares())), pct(r.mean_share),
          f"{statistics.median(c.duration_ms for c in r.changed):.0f}",
          f"{max(c.duration_ms for c in r.changed):.0f}", f"{r.idle_duration_ms:.0f}"]
         for r in changed],
    )  # fmt: skip
    if changed:
        lines += ["", "Upload share of each interval, in order:", ""]
        lines += [f"- {r.keys:,} keys: " + ", ".join(pct(x) for x in r.shares()) for r in changed]
        lines += [
            "",
            "Only new files are uploaded (the store is content-addressed: a file it holds "
            "is never sent again), and a worker's checkpoint is a delta snapshot (docs/decisions.md, "
            "Design decisions): an interval uploads one zlib-compressed file of the entries "
            "it changed. The share is over the state without delta files. Every so often a "
            "snapshot is full (after 60 deltas, past max(8 MiB, half the last full snapshot) "
            "of deltas, or when cache flushes wrote more than a write cache's worth to "
            "RocksDB): it uploads the SST files RocksDB wrote since the last full one "
            "(universal compaction, kstream/state/rocksdb_options.py). Before delta "
            "snapshots (2026-12-01 12:00 and earlier) every checkpoint flushed the changes "
            "into a new sorted run, and compactions re-uploaded parts of the state: a mean "
            "of 2.5 % / 9.6 % at 100 k / 1 M keys over 10 intervals (benchmarks/PROFILE.md).",
        ]
    lines += ["", *plot("checkpoint")]
    lines += ["## Recovery time vs state size", ""]
    lines += [
        "kill -9 → first output readable with read_committed (`benchmarks/recovery.py`: the "
        "restart restores the state, a probe closes the window, every key's result is "
        "published). Local state wiped (restored from the checkpoint store) or kept "
        "(task-local recovery). Restored = window results read back (must equal keys). "
        "The first output is visible when the first checkpoint after the restart "
        "completes; a firing runs in slices and a barrier is taken between two of them "
        "(docs/operations.md, Stopping), so that checkpoint publishes the results fired so far: the "
        "time is restoring the state, replaying to the probe and the first slices, not "
        "the whole firing (every key's result is read back after). Failovers: the "
        "coordinator's failovers during the restart (its log); a worker loop blocked "
        "longer than the heartbeat "
        "timeout (10 s) by one firing is declared lost, and the restore starts again.",
        "",
    ]
    lines += _table(
        ["keys", "local state", "kill → first output s", "restored", "failovers", "build s",
         "restart peak RSS MB"],
        [[f"{r.keys:,}", "wiped" if r.wipe else "kept", f"{r.recovery_s:.2f}",
          f"{r.restored:,}/{r.keys:,}", r.failovers, f"{r.build_s:.1f}",
          f"{r.restart_peak_rss_mb:.0f}"]
         for r in res.state],
    )  # fmt: skip
    lines += ["", *plot("recovery")]
    lines += ["## Throughput with 1 and 2 worker processes", ""]
    lines += [
        f"Workload 2 (60 s windows, exactly-once, checkpoints every 1 s), {sizes.worker_records:,} "
        f"records over {sizes.worker_keys:,} keys, 4 partitions, `kstream worker` processes "
        "electing their coordinator. records/s from the completed checkpoints' input offsets "
        "over their completion times (from the first past 5 % of the input to the one covering "
        "it: start-up and group joins excluded). CPU s and peak RSS summed over the processes.",
        "",
    ]
    lines += _table(
        ["worker processes", "records/s", "s", "CPU s", "peak RSS MB (sum)", "output records"],
        [[r.workers, f"{r.rate:,.0f}", f"{r.seconds:.1f}", f"{r.cpu_s:.1f}",
          f"{r.peak_rss_mb:.0f}", f"{r.output:,}"] for r in res.workers],
    )  # fmt: skip
    lines += ["", *plot("workers")]
    lines += ["## End-to-end latency vs checkpoint interval", ""]
    lines += [
        "Workload 1's stateless job, exactly-once, one process, fed live records at a steady "
        "rate, each stamped with the wall clock when produced; latency = when a read_committed "
        "consumer sees its output - that stamp (one host, one clock). Medians of "
        f"{sizes.latency_runs} run(s) per interval, the intervals' runs interleaved (every "
        "run's p99 in the last column), after a warm-up run of the same job for "
        f"{sizes.latency_warmup_s:g} s that is not reported (the curves' broker was just "
        "started, and its JVM compiles its hot paths during the first tens of seconds of "
        "traffic).",
        "",
    ]
    lines += _table(
        ["checkpoint interval s", "records/s in", "records", "p50 ms", "p99 ms", "max ms",
         "p99 / interval", "p99 of each run ms"],
        [[f"{r.interval_s:g}", r.rate, f"{r.records:,}", f"{r.p50_ms:.0f}", f"{r.p99_ms:.0f}",
          f"{r.max_ms:.0f}", f"{r.p99_ms / 1000 / r.interval_s:.2f}",
          " / ".join(f"{p:.0f}" for p in r.p99_runs)] for r in res.latency],
    )  # fmt: skip
    lines += ["", *plot("latency")]
    lines += ["## Peak RSS vs output per interval", ""]
    lines += [
        "N input records (workload 1's JSON input, about 100 bytes each) forwarded unchanged "
        "by one process with 4 tasks to an exactly-once sink, checkpoints every hour: the "
        "only checkpoint is the graceful stop's, so all N output records are buffered and "
        "published in one checkpoint interval. Past its budget (`--sink-buffer-memory`, "
        "default 64 MiB per worker process, shared by its sink tasks) the buffer spills to "
        "local disk; 'unbounded' keeps everything in memory (the behaviour without the "
        "bound). Peak RSS is the whole process's: the Kafka clients' queues, the input "
        "batches and the interpreter come on top of the buffer. Peak RSS vs keys: the first "
        "table.",
        "",
    ]
    lines += _table(
        ["output records in one interval", "sink buffer budget", "peak RSS MB", "s", "published"],
        [[f"{r.output:,}", "unbounded" if r.budget_mb is None else f"{r.budget_mb:.0f} MiB",
          f"{r.peak_rss_mb:.0f}", f"{r.seconds:.1f}", f"{r.published:,}"] for r in res.outputs],
    )  # fmt: skip
    lines += ["", *plot("rss")]
    lines += ["## Targets (issue 19)", "", *target_lines(res), ""]
    if res.failures:
        lines += ["## Not measured", "", *(f"- {f}" for f in res.failures), ""]
    return lines


def target_lines(res: Results) -> list[str]:
    """The verdicts on the targets these curves measure."""
    rows: list[list[str]] = []
    for r in (r for r in res.state if r.changed):
        med, mean = statistics.median(r.shares()), r.mean_share
        rows.append([f"incremental checkpoint after 1 % of keys changed uploads <= 5 % of the "
                     f"state ({r.keys:,} keys): a typical interval (median)",
                     f"{100 * med:.1f} %", "met" if med <= 0.05 else "MISSED"])  # fmt: skip
        rows.append([f"... ({r.keys:,} keys): every interval on average, compactions included "
                     f"(mean; max {100 * max(r.shares()):.1f} %)",
                     f"{100 * mean:.1f} %", "met" if mean <= 0.05 else "MISSED"])  # fmt: skip
    for lat in res.latency:
        ratio = lat.p99_ms / 1000 / lat.interval_s
        rows.append([f"p99 latency <= 2x the checkpoint interval ({lat.interval_s:g} s)",
                     f"{ratio:.2f}x ({lat.p99_ms:.0f} ms)", "met" if ratio <= 2 else "MISSED"])  # fmt: skip
    bounded = [o for o in res.outputs if o.budget_mb is not None]
    unbounded = {o.output: o for o in res.outputs if o.budget_mb is None}
    if len(bounded) >= 2:
        lo, hi = min(bounded, key=lambda o: o.output), max(bounded, key=lambda o: o.output)
        grew = hi.peak_rss_mb - lo.peak_rss_mb
        free = unbounded.get(hi.output)
        versus = f"; unbounded {free.peak_rss_mb:.0f} MB" if free else ""
        rows.append([f"sink buffer bounded: peak RSS with a {lo.budget_mb:.0f} MiB budget does "
                     "not grow (by less than 64 MB) with "
                     f"the output of one interval ({lo.output:,} -> {hi.output:,} records)",
                     f"{lo.peak_rss_mb:.0f} -> {hi.peak_rss_mb:.0f} MB{versus}",
                     "met" if grew < 64 else "MISSED"])  # fmt: skip
    return _table(["target", "measured", "verdict"], rows) if rows else ["(nothing measured)"]
