"""The checkpoint history as rows and tables: completed, failed and aborted checkpoints.

Shared by ``kstream checkpoints`` and ``kstream status``; pure (fed metadata and
history records, no I/O).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kstream.checkpointstorage.history import CheckpointFailure, CheckpointStatus
from kstream.checkpointstorage.metadata import CheckpointMetadata, TaskSnapshot
from kstream.metrics.labels import checkpoint_reason


def when(epoch: float) -> str:
    """ISO 8601 UTC with milliseconds."""
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds")


def human_bytes(n: float) -> str:
    """``1.5 MiB``-style sizes."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class HistoryRow:
    """One checkpoint of the history, completed or not."""

    checkpoint_id: int
    status: str
    attempt: int
    trigger_time: float
    end_time: float
    tasks: dict[str, TaskSnapshot]
    reason: str = ""
    missing: tuple[str, ...] = ()

    @classmethod
    def completed(cls, m: CheckpointMetadata) -> HistoryRow:
        return cls(
            m.checkpoint_id,
            CheckpointStatus.COMPLETED,
            m.attempt,
            m.trigger_time,
            m.complete_time,
            m.tasks,
        )

    @classmethod
    def ended(cls, f: CheckpointFailure) -> HistoryRow:
        return cls(
            f.checkpoint_id,
            f.status,
            f.attempt,
            f.trigger_time,
            f.end_time,
            f.tasks,
            f.reason,
            f.missing,
        )

    @property
    def duration_ms(self) -> float:
        return (self.end_time - self.trigger_time) * 1000.0

    @property
    def state_size(self) -> int:
        return sum(t.state_size for t in self.tasks.values())

    @property
    def uploaded_size(self) -> int:
        return sum(t.uploaded_size for t in self.tasks.values())

    @property
    def alignment_ms(self) -> float | None:
        """The longest alignment of any task (None: no task acknowledged)."""
        return max((t.alignment_ms for t in self.tasks.values()), default=None)

    @property
    def slowest(self) -> tuple[str, float] | None:
        """The task whose acknowledgement came last, and when (ms after the trigger)."""
        if not self.tasks:
            return None
        name, snap = max(self.tasks.items(), key=lambda kv: (kv[1].ack_delay_ms, kv[0]))
        return name, snap.ack_delay_ms

    def to_dict(self) -> dict[str, Any]:
        slowest = self.slowest
        return {
            "checkpoint_id": self.checkpoint_id,
            "status": self.status,
            "attempt": self.attempt,
            "trigger_time": self.trigger_time,
            "end_time": self.end_time,
            "duration_ms": round(self.duration_ms, 3),
            "state_size": self.state_size,
            "uploaded_size": self.uploaded_size,
            "alignment_ms": self.alignment_ms,
            "slowest_task": slowest[0] if slowest else None,
            "slowest_task_ack_ms": slowest[1] if slowest else None,
            "acknowledged": len(self.tasks),
            "missing": list(self.missing),
            "reason": self.reason,
            "reason_label": checkpoint_reason(self.reason) if self.reason else None,
        }


def history_rows(
    completed: list[CheckpointMetadata], ended: list[CheckpointFailure]
) -> list[HistoryRow]:
    """Completed, failed and aborted checkpoints in one list, ascending by id."""
    rows = [HistoryRow.completed(m) for m in completed]
    done = {m.checkpoint_id for m in completed}
    rows += [HistoryRow.ended(f) for f in ended if f.checkpoint_id not in done]
    return sorted(rows, key=lambda r: r.checkpoint_id)


def render_list(rows: list[HistoryRow]) -> list[str]:
    """The ``checkpoints list`` table."""
    out = [
        f"{'id':>6}  {'status':<9} {'ended (UTC)':<29} {'attempt':>7} {'duration':>10} "
        f"{'size':>10} {'uploaded':>10} {'alignment':>9}  slowest task / reason"
    ]
    for r in rows:
        align = "-" if r.alignment_ms is None else f"{r.alignment_ms:.0f}ms"
        slowest = r.slowest
        detail = r.reason or (f"{slowest[0]} ({slowest[1]:.0f}ms)" if slowest else "")
        size = human_bytes(r.state_size) if r.tasks else "-"
        uploaded = human_bytes(r.uploaded_size) if r.tasks else "-"
        out.append(
            f"{r.checkpoint_id:>6}  {r.status:<9} {when(r.end_time):<29} {r.attempt:>7} "
            f"{r.duration_ms:>8.0f}ms {size:>10} {uploaded:>10} {align:>9}  {detail}"
        )
    return out


def render_tasks(row: HistoryRow) -> list[str]:
    """Per-task statistics of one checkpoint (``show N --tasks``)."""
    out = [
        f"  {'task':<20} {'member':<28} {'alignment':>9} {'sync':>8} {'async':>9} "
        f"{'acked after':>11} {'state':>10} {'uploaded':>10}"
    ]
    for name, t in sorted(row.tasks.items()):
        out.append(
            f"  {name:<20} {(t.member or '?')[:28]:<28} {t.alignment_ms:>7.1f}ms "
            f"{t.sync_ms:>6.1f}ms {t.async_ms:>7.1f}ms {t.ack_delay_ms:>9.0f}ms "
            f"{human_bytes(t.state_size):>10} {human_bytes(t.uploaded_size):>10}"
        )
    for name in row.missing:
        out.append(f"  {name:<20} {'(no acknowledgement)':<28}")
    return out
