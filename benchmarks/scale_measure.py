"""The pure part of the partitions x workers curves (``benchmarks/scale_curves.py``,
issue 41 item 1): reading what the harness collected — Prometheus text, ``/proc``
status files, control-topic records, repartition-topic stream events — into the
figures of one point, and the rows of its Markdown table. No broker, no process:
``benchmarks/tests/test_scale_measure.py`` feeds it made-up inputs.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

# ------------------------------------------------------------------ worker processes


def records_in(metrics_text: str, topic: str) -> int:
    """The sum of ``kstream_records_in_total`` over the tasks reading ``topic``, from a
    worker's Prometheus exposition ``metrics_text`` (0 when the family is absent)."""
    total = 0.0
    for line in metrics_text.splitlines():
        if not line.startswith("kstream_records_in_total{"):
            continue
        labels, _, value = line.rpartition(" ")
        if f'topic="{topic}"' in labels:
            total += float(value)
    return int(total)


@dataclass(frozen=True)
class ProcSample:
    threads: int
    open_files: int
    rss_mb: float


def proc_sample(status_text: str, open_files: int) -> ProcSample:
    """Threads and RSS from the text of ``/proc/<pid>/status``; ``open_files`` counted
    by the caller (the entries of ``/proc/<pid>/fd``)."""
    fields = dict(line.split(":", 1) for line in status_text.splitlines() if ":" in line)
    rss_kb = int(fields.get("VmRSS", "0 kB").split()[0])
    return ProcSample(int(fields["Threads"].strip()), open_files, rss_kb / 1024.0)


def peak(samples: Iterable[ProcSample]) -> ProcSample:
    """The largest of each figure over ``samples`` (each may come from another sample)."""
    s = list(samples)
    if not s:
        return ProcSample(0, 0, 0.0)
    return ProcSample(
        max(x.threads for x in s), max(x.open_files for x in s), max(x.rss_mb for x in s)
    )


def read_rate(samples: Sequence[tuple[float, int]]) -> tuple[float, int]:
    """``(records/s, records read)`` from ``(time, records read so far)`` samples of the
    source stage: everything read over the time from the last sample with none read to
    the first sample holding the final count (replays after a rollback are read again
    and count). ``(0.0, n)`` when the reading did not span two samples."""
    if not samples:
        return 0.0, 0
    final = samples[-1][1]
    start = max((t for t, n in samples if n == 0), default=samples[0][0])
    end = next(t for t, n in samples if n == final)
    if final == 0 or end <= start:
        return 0.0, final
    return final / (end - start), final


# ------------------------------------------------------------------ the control topic


@dataclass(frozen=True)
class ControlRecord:
    """One control-topic record: its Kafka timestamp (ms) and its JSON body."""

    ts_ms: int
    body: dict[str, Any]

    @staticmethod
    def parse(ts_ms: int, value: bytes | None) -> ControlRecord:
        try:
            body = json.loads(value or b"{}")
        except (UnicodeDecodeError, json.JSONDecodeError):
            body = {}
        return ControlRecord(ts_ms, body if isinstance(body, dict) else {})

    @property
    def type(self) -> str:
        return str(self.body.get("type", "?"))

    @property
    def checkpoint_id(self) -> int | None:
        cid = self.body.get("checkpoint_id")
        return cid if isinstance(cid, int) else None


@dataclass(frozen=True)
class ControlStats:
    completed: list[int]  # checkpoint ids completed, in order
    first_complete_ms: int | None  # Kafka timestamp of the first CheckpointCompleted
    durations_ms: list[float]  # trigger (its timestamp field) -> CheckpointCompleted record
    per_checkpoint: list[int]  # records naming each completed checkpoint (trigger, acks, ...)
    per_interval: float  # every record between the first and the last completion / checkpoints
    aborted: int  # CheckpointAborted records
    by_type: dict[str, int] = field(default_factory=dict)


def control_stats(records: Sequence[ControlRecord]) -> ControlStats:
    """What the control topic says about the checkpoints (records in offset order)."""
    triggers: dict[int, int] = {}
    done: dict[int, int] = {}
    naming: Counter[int] = Counter()
    for r in records:
        cid = r.checkpoint_id
        if cid is not None:
            naming[cid] += 1
        if r.type == "TriggerCheckpoint" and cid is not None:
            triggers.setdefault(cid, int(r.body.get("timestamp", r.ts_ms)))
        elif r.type == "CheckpointCompleted" and cid is not None:
            done.setdefault(cid, r.ts_ms)
    completed = sorted(done, key=done.__getitem__)
    durations = [float(done[c] - triggers[c]) for c in completed if c in triggers]
    per_interval = 0.0
    if len(completed) >= 2:
        lo, hi = done[completed[0]], done[completed[-1]]
        between = sum(1 for r in records if lo < r.ts_ms <= hi)
        per_interval = between / (len(completed) - 1)
    return ControlStats(
        completed=completed,
        first_complete_ms=done[completed[0]] if completed else None,
        durations_ms=durations,
        per_checkpoint=[naming[c] for c in completed],
        per_interval=per_interval,
        aborted=sum(1 for r in records if r.type == "CheckpointAborted"),
        by_type=dict(Counter(r.type for r in records)),
    )


# ------------------------------------------------------------------ repartition topics


def barriers_per_checkpoint(
    events: Iterable[tuple[str, bytes | None]], checkpoints: Iterable[int], scale: float = 1.0
) -> list[int]:
    """Barrier records per checkpoint in ``checkpoints``, from the ``(ks.event header,
    value)`` of the stream events read off a repartition topic; ``scale``: the topic's
    partitions over the partitions read (every upstream task writes each barrier to
    every partition, so each partition holds the same number). A worker's barrier set
    (``barriers``: one record for several tasks' barriers) counts as one record."""
    count: Counter[int] = Counter()
    for kind, value in events:
        if kind not in ("barrier", "barriers"):
            continue
        try:
            cid = json.loads(value or b"{}").get("checkpoint_id")
        except (UnicodeDecodeError, json.JSONDecodeError, AttributeError):
            continue
        if isinstance(cid, int):
            count[cid] += 1
    return [round(count[c] * scale) for c in checkpoints]


# ------------------------------------------------------------------ one point and its table


@dataclass
class Point:
    """One (partitions, workers) point; ``failure`` says what happened when it has no
    figures (or only some): it is a row of the table all the same."""

    label: str  # "before", "after", ...
    partitions: int
    workers: int
    records: int
    tasks: int = 0
    rate: float = 0.0  # records read per second by the source stage
    read: int = 0  # records the source stage read (> records: replays after rollbacks)
    covered_s: float = 0.0  # start -> the checkpoint covering the input completed
    first_checkpoint_s: float | None = None  # start -> first CheckpointCompleted
    checkpoints: int = 0
    aborted: int = 0
    duration_ms: list[float] = field(default_factory=list)
    control_per_checkpoint: float = 0.0  # median records naming a checkpoint
    control_per_interval: float = 0.0
    barriers_per_checkpoint: float = 0.0  # median
    threads: int = 0  # the largest per worker
    open_files: int = 0
    rss_mb: float = 0.0
    # the same, read once the input was covered and the checkpoints completed (after the
    # start, when the first worker to join may hold every task): 0 when not measured
    end_threads: int = 0
    end_open_files: int = 0
    end_rss_mb: float = 0.0
    kill_to_output_s: float | None = None
    exact: str = ""  # "yes", or what differs
    failure: str = ""
    seconds: float = 0.0  # the point's wall time
    load: float = 0.0  # the machine's load average (1 min) at the point's start

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @staticmethod
    def from_json(line: str) -> Point:
        return Point(**json.loads(line))


HEAD = (
    "| partitions | workers | tasks | records/s | s to cover | first checkpoint s | "
    "checkpoint ms (median / max) | control records per checkpoint (naming it / all) | "
    "barrier records per checkpoint | threads / open files / RSS MB per worker (max) | "
    "kill -9 → first output s | exact | note |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
)


def _n(x: float) -> str:
    return f"{x:,.0f}".replace(",", " ")


def row(p: Point) -> str:
    """The Markdown row of ``p``; a point without figures shows what happened."""
    dash = "-"
    ms = p.duration_ms
    cells = [
        str(p.partitions),
        str(p.workers),
        _n(p.tasks) if p.tasks else dash,
        _n(p.rate) if p.rate else dash,
        f"{p.covered_s:.1f}" if p.covered_s else dash,
        f"{p.first_checkpoint_s:.1f}" if p.first_checkpoint_s is not None else dash,
        f"{statistics.median(ms):.0f} / {max(ms):.0f}" if ms else dash,
        (
            f"{p.control_per_checkpoint:.0f} / {p.control_per_interval:.0f}"
            if p.checkpoints
            else dash
        ),
        _n(p.barriers_per_checkpoint) if p.checkpoints else dash,
        (f"{p.threads} / {p.open_files} / {p.rss_mb:.0f}" if p.threads else dash)
        + (
            f" (at the end: {p.end_threads} / {p.end_open_files} / {p.end_rss_mb:.0f})"
            if p.end_threads
            else ""
        ),
        f"{p.kill_to_output_s:.1f}" if p.kill_to_output_s is not None else dash,
        p.exact or dash,
    ]
    notes = []
    if p.read > p.records:
        notes.append(f"{_n(p.read - p.records)} records read again after rollbacks")
    if p.aborted:
        notes.append(f"{p.aborted} checkpoint(s) aborted")
    if p.failure:
        notes.append(p.failure + (f"; {_n(p.read)} records read by then" if p.read else ""))
    return "| " + " | ".join([*cells, "; ".join(notes) or ""]) + " |"


def table(points: Sequence[Point]) -> str:
    """The Markdown table of ``points``, by partitions then workers."""
    ordered = sorted(points, key=lambda p: (p.partitions, p.workers))
    return HEAD + "\n".join(row(p) for p in ordered) + "\n"


def latest(points: Sequence[Point]) -> list[Point]:
    """The last point of each (label, partitions, workers): a re-run replaces a point."""
    last: dict[tuple[str, int, int], Point] = {}
    for p in points:
        last[(p.label, p.partitions, p.workers)] = p
    return list(last.values())
