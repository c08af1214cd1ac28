"""What a crash-test run observed (:mod:`integration.e2e.harness` runs it): the
sources' end offsets and whether a checkpoint covers them, the run's statistics from
the control topic, the store and the logs, and the sink's output compared, as a
multiset, with the expected output.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from integration.edge_tools import Read, read_all
from kstream.checkpointstorage.base import StoreError
from kstream.checkpointstorage.metadata import CheckpointMetadata, read_metadata
from kstream.kafka.clients import make_consumer, watermark_offsets
from kstream.protocol.messages import (
    AcknowledgeCheckpoint,
    AcknowledgeCheckpoints,
    Restore,
    Resume,
    TriggerCheckpoint,
)

if TYPE_CHECKING:
    from integration.e2e.harness import ControlLog, JobUnderTest


# ---- observation and statistics --------------------------------------------------------------


def source_ends(bootstrap: str, topics: Mapping[str, int]) -> dict[tuple[str, int], int]:
    """High watermark of every partition of ``topics`` ({topic: partitions})."""
    c = make_consumer(bootstrap, "e2e-ends", read_committed=False)
    try:
        return {
            (t, p): watermark_offsets(c, t, p, 10.0)[1]  # retried while a leader moves
            for t, n in topics.items()
            for p in range(n)
        }
    finally:
        c.close()


def covers(meta: CheckpointMetadata, ends: Mapping[tuple[str, int], int]) -> bool:
    """Whether checkpoint ``meta``'s source positions are at the end of every source partition."""
    pos: dict[tuple[str, int], int] = {}
    for t in meta.tasks.values():
        for k, v in t.offsets.items():
            topic, _, part = k.rpartition(":")
            if isinstance(v, int):
                pos[(topic, int(part))] = v
    return all(pos.get(tp, -1) >= end for tp, end in ends.items())


def summary(values: Sequence[float]) -> str:
    if not values:
        return "n/a"
    return f"median {statistics.median(values):.1f} ms, max {max(values):.1f} ms (n={len(values)})"


@dataclass
class RunReport:
    """What a crash-test run observed; printed at the end of each test."""

    kills: int
    restores: int
    resumes: int
    checkpoints_completed: int
    durations_ms: list[float]
    alignment_ms: list[float]
    restore_ms: list[float]
    kill_to_resume_s: list[float]

    def lines(self) -> Iterator[str]:
        yield (
            f"kills={self.kills} restores={self.restores} resumes={self.resumes} "
            f"checkpoints_completed={self.checkpoints_completed}"
        )
        yield f"checkpoint duration (trigger -> all acks): {summary(self.durations_ms)}"
        yield f"alignment time per task ack: {summary(self.alignment_ms)}"
        yield f"task restore time (worker logs 'restored checkpoint N in X ms'): {summary(self.restore_ms)}"
        kr = [x * 1000 for x in self.kill_to_resume_s]
        yield f"kill -> next Resume: {summary(kr)}"


def report(job: JobUnderTest, control: ControlLog) -> RunReport:
    """Statistics from the control topic, the store's metadata and the worker logs."""
    store = job.store()
    completed = control.completed_ids()
    durations = []
    for n in completed:
        try:
            durations.append(read_metadata(store, job.app, n).duration_ms)
        except StoreError as e:  # reported, not fatal: the statistics are best effort
            print(f"[e2e] metadata of checkpoint {n} unreadable: {e}")
    alignment = [m.snapshot.alignment_ms for _t, m in control.of(AcknowledgeCheckpoint)] + [
        s.alignment_ms for _t, m in control.of(AcknowledgeCheckpoints) for s in m.snapshots.values()
    ]
    restore_ms = []
    for p in job.procs:
        for ln in p.lines_with("restored checkpoint"):
            try:
                restore_ms.append(float(ln.split(" in ", 1)[1].split(" ms", 1)[0]))
            except (IndexError, ValueError):
                continue
    resumes = [t for t, _m in control.of(Resume)]
    k2r = []
    for t, _role, _why in job.kills:
        after = [r for r in resumes if r > t]
        if after:
            k2r.append(min(after) - t)
    return RunReport(
        kills=len(job.kills),
        restores=len(control.of(Restore)),
        resumes=len(resumes),
        checkpoints_completed=len(completed),
        durations_ms=durations,
        alignment_ms=alignment,
        restore_ms=restore_ms,
        kill_to_resume_s=k2r,
    )


def latest_trigger_time(control: ControlLog) -> float:
    ts = [t for t, _m in control.of(TriggerCheckpoint)]
    return max(ts, default=0.0)


def read_sink(bootstrap: str, topic: str) -> list[Read]:
    """Every committed record of ``topic`` (read_committed, to the high watermark)."""
    return read_all(bootstrap, topic, read_committed=True, timeout=60.0)


def decode_json_values(records: Sequence[Read]) -> list[str]:
    """Canonical JSON strings of the values (multiset-comparable)."""
    return [json.dumps(json.loads(r.value), sort_keys=True) for r in records if r.value is not None]


def canonical(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    return [json.dumps(r, sort_keys=True) for r in rows]


@dataclass(frozen=True)
class Comparison:
    """Multiset comparison of actual output with the expected output."""

    expected: int
    actual: int
    lost: Counter[str]
    duplicated: Counter[str]  # extra copies of expected records
    unexpected: Counter[str]  # records not expected at all

    @classmethod
    def of(cls, expected: Sequence[str], actual: Sequence[str]) -> Comparison:
        e, a = Counter(expected), Counter(actual)
        lost = e - a
        extra = a - e
        dup = Counter({k: n for k, n in extra.items() if k in e})
        unexpected = Counter({k: n for k, n in extra.items() if k not in e})
        return cls(len(expected), len(actual), lost, dup, unexpected)

    def describe(self) -> str:
        return (
            f"expected {self.expected} records, got {self.actual}: "
            f"lost {sum(self.lost.values())}, duplicated {sum(self.duplicated.values())}, "
            f"unexpected {sum(self.unexpected.values())}; "
            f"first lost {list(self.lost)[:3]}, first duplicated {list(self.duplicated)[:3]}, "
            f"first unexpected {list(self.unexpected)[:3]}"
        )
