"""``kstream status``: a running job in one picture, built from the control topic and the store.

Pure: :func:`build_status` takes what was read (the folded control topic, the
checkpoint history, restart records, source end offsets) and the time; it renders
as text (:meth:`JobStatus.render`) or JSON (:meth:`JobStatus.to_dict`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kstream.checkpointstorage.history import RestartRecord
from kstream.checkpointstorage.metadata import CheckpointMetadata
from kstream.metrics.labels import restart_cause
from kstream.monitor.history import HistoryRow, render_list, when
from kstream.monitor.view import ControlView, Event
from kstream.names import is_repartition_topic, member_client_id

RECENT_CHECKPOINTS = 5
RECENT_EVENTS = 10
WORKER_GONE_AFTER_S = 60.0  # a member silent this long is no longer listed
WORKER_SILENT_AFTER_S = 5.0  # workers heartbeat every second: silent for 5 s is notable


@dataclass(frozen=True)
class LagRow:
    """A source partition: its end offset and the position of the latest completed checkpoint."""

    topic: str
    partition: int
    checkpoint_offset: int | None
    end_offset: int

    @property
    def lag(self) -> int:
        """Records after the latest completed checkpoint (all of them without one)."""
        return max(0, self.end_offset - (self.checkpoint_offset or 0))


def committed_source_positions(
    app_id: str, committed: dict[tuple[str, int], int]
) -> dict[tuple[str, int], int]:
    """The group's committed offsets of source partitions (checkpointing off: the only
    record of progress; the internal repartition topics are left out)."""
    return {tp: o for tp, o in committed.items() if not is_repartition_topic(app_id, tp[0])}


def source_positions(meta: CheckpointMetadata | None) -> dict[tuple[str, int], int]:
    """Source-partition offsets of a completed checkpoint (internal topics, which record a
    position per upstream task, are left out)."""
    out: dict[tuple[str, int], int] = {}
    if meta is None:
        return out
    for snap in meta.tasks.values():
        for key, pos in snap.offsets.items():
            if isinstance(pos, int) and not isinstance(pos, bool):
                topic, _, part = key.rpartition(":")
                out[(topic, int(part))] = pos
    return out


@dataclass(frozen=True)
class WorkerRow:
    member: str
    tasks: tuple[str, ...]
    owns: tuple[str, ...]
    generation: int
    last_seen_s: float


@dataclass(frozen=True)
class JobStatus:
    """Everything ``kstream status`` shows."""

    app_id: str
    now: float
    phase: str
    attempt: int
    restore_checkpoint: int | None
    coordinator_seen_s: float | None
    coordinator_last: str
    workers: list[WorkerRow]
    tasks_ready: int
    checkpoints: list[HistoryRow]
    in_flight: list[tuple[int, float, int]]  # (id, age s, tasks acknowledged)
    events: list[Event]
    lag: list[LagRow]
    lag_basis: str = "checkpoint"  # checkpoint | committed (checkpointing off)
    stopped: tuple[float, str] | None = None  # when stopped: (when, why)

    def to_dict(self) -> dict[str, Any]:
        return {
            "app_id": self.app_id,
            "time": self.now,
            "phase": self.phase,
            "stopped": None
            if self.stopped is None
            else {"time": self.stopped[0], "reason": self.stopped[1]},
            "attempt": self.attempt,
            "restore_checkpoint": self.restore_checkpoint,
            "coordinator": {
                "last_seen_s": self.coordinator_seen_s,
                "last_action": self.coordinator_last,
            },
            "workers": [
                {
                    "member": w.member,
                    "name": member_client_id(w.member),
                    "tasks": list(w.tasks),
                    "owns": list(w.owns),
                    "generation": w.generation,
                    "last_heartbeat_s": round(w.last_seen_s, 3),
                }
                for w in self.workers
            ],
            "tasks_ready": self.tasks_ready,
            "checkpoints": [r.to_dict() for r in self.checkpoints],
            "in_flight": [
                {"checkpoint_id": n, "age_s": round(age, 3), "acknowledged": acked}
                for n, age, acked in self.in_flight
            ],
            "events": [
                {
                    "time": e.time,
                    "kind": e.kind,
                    "cause": e.cause,
                    "attempt": e.attempt,
                    "task": e.task,
                    "reason": e.reason,
                }
                for e in self.events
            ],
            "lag": [
                {
                    "topic": r.topic,
                    "partition": r.partition,
                    "checkpoint_offset": r.checkpoint_offset,
                    "end_offset": r.end_offset,
                    "lag": r.lag,
                }
                for r in self.lag
            ],
            "total_lag": sum(r.lag for r in self.lag),
            "lag_basis": self.lag_basis,
        }

    def render(self) -> list[str]:
        out = [f"app {self.app_id}: {self.phase}, attempt {self.attempt}   ({when(self.now)})"]
        if self.stopped is not None:
            out.append(f"  stopped {when(self.stopped[0])}: {self.stopped[1]}")
        if self.phase == "restoring":
            out.append(
                f"  restoring to checkpoint {self.restore_checkpoint}: "
                f"{self.tasks_ready} task(s) ready"
            )
        seen = (
            "never seen"
            if self.coordinator_seen_s is None
            else f"{self.coordinator_last}, {self.coordinator_seen_s:.1f}s ago"
        )
        out += ["", f"coordinator  {seen}", "", f"workers ({len(self.workers)})"]
        for w in self.workers:
            tasks = ", ".join(w.tasks) or "none"
            note = "" if set(w.tasks) == set(w.owns) else f" (owns {', '.join(w.owns) or 'none'})"
            seen = (
                f"silent: no heartbeat for {w.last_seen_s:.1f}s"
                if w.last_seen_s > WORKER_SILENT_AFTER_S
                else f"heartbeat {w.last_seen_s:.1f}s ago"
            )
            out.append(f"  {_member(w.member):<40} {tasks}{note}   {seen}")
        out += ["", "checkpoints"]
        for n, age, acked in self.in_flight:
            out.append(f"  {n:>6}  in flight for {age:.1f}s, {acked} task(s) acknowledged")
        if self.checkpoints:
            out += [f"  {line}" for line in render_list(self.checkpoints)]
        elif not self.in_flight:
            out.append("  none yet")
        out += ["", "recent failures and restarts"]
        for e in self.events:
            where = " ".join(
                x
                for x in (
                    f"attempt {e.attempt}" if e.attempt is not None else "",
                    f"task {e.task}" if e.task else "",
                )
                if x
            )
            kind = f"{e.kind} ({e.cause})" if e.cause else e.kind
            out.append(f"  {when(e.time)}  {kind:<19} {where:<22} {e.reason}")
        if not self.events:
            out.append("  none")
        committed = self.lag_basis == "committed"
        basis = "the group's committed offsets" if committed else "the latest completed checkpoint"
        out += ["", f"source lag (records after {basis})"]
        if not self.lag:
            out.append("  unknown: no completed checkpoint and no committed offset yet")
        for r in self.lag:
            pos = "-" if r.checkpoint_offset is None else str(r.checkpoint_offset)
            out.append(
                f"  {r.topic}[{r.partition}]".ljust(32)
                + f" {'committed' if committed else 'checkpoint'} {pos:>10}  "
                + f"end {r.end_offset:>10}  lag {r.lag:>10}"
            )
        if self.lag:
            out.append(f"  total lag {sum(r.lag for r in self.lag)}")
        return out


def build_status(
    app_id: str,
    view: ControlView,
    checkpoints: list[HistoryRow],
    restarts: list[RestartRecord],
    lag: list[LagRow],
    now: float,
    lag_basis: str = "checkpoint",
) -> JobStatus:
    """The status of ``app_id`` at ``now`` from what was read."""
    workers = [
        WorkerRow(
            m.member,
            m.tasks,
            tuple(sorted(t for t, o in view.owners.items() if o == m.member)),
            m.generation,
            now - m.last_seen,
        )
        for m in sorted(view.members.values(), key=lambda m: m.member)
        if now - m.last_seen <= WORKER_GONE_AFTER_S
    ]
    # Restarts: the store's records say why; the control topic only that one happened.
    reasons = {r.attempt: r for r in restarts}
    events = []
    for e in view.events:
        rec = reasons.get(e.attempt) if e.kind == "restore" and e.attempt is not None else None
        if rec is not None:
            e = Event(
                e.time,
                "restore",
                f"to checkpoint {rec.checkpoint_id}: {rec.reason}",
                e.attempt,
                cause=restart_cause(rec.reason),
            )
        events.append(e)
    in_flight = [
        (n, now - ts, len(view.acks.get(n, ()))) for n, ts in sorted(view.in_flight.items())
    ]
    return JobStatus(
        app_id=app_id,
        now=now,
        phase=view.phase,
        attempt=view.attempt,
        restore_checkpoint=view.restore_checkpoint,
        coordinator_seen_s=None if view.coordinator_seen is None else now - view.coordinator_seen,
        coordinator_last=view.coordinator_last,
        workers=workers,
        tasks_ready=len(view.ready),
        checkpoints=checkpoints[-RECENT_CHECKPOINTS:],
        in_flight=in_flight,
        events=sorted(events, key=lambda e: e.time)[-RECENT_EVENTS:],
        lag=sorted(lag, key=lambda r: (r.topic, r.partition)),
        lag_basis=lag_basis,
        stopped=None if view.stopped_at is None else (view.stopped_at, view.stopped_reason),
    )


def _member(member: str) -> str:
    """``host:pid (member id)`` for a group member named by its worker's client id."""
    name = member_client_id(member)
    return member if name == member else f"{name} ({member})"
