"""Run a whole ``JobPlan`` in one process over in-memory bounded inputs.

Stage by stage, every task runs in bounded mode on a ``MemoryBackend``: user
topics are fed in batches then ended, repartition output is appended to in-memory
internal partitions (with the producing task id and offsets, as the worker would)
and read by the next stage. The processing-time clock is 0 throughout. Used by fast
tests, to compute expected outputs and by ``kstream.testing`` (users' unit tests); it
exercises the same ``Task`` code as the Kafka worker.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kstream.elements.records import (
    DeadLetter,
    InternalEvent,
    InternalRecord,
    OutputBatch,
    OutputEvent,
    SnapshotPoint,
    SourceRecord,
)
from kstream.plan.model import InputKind, JobPlan
from kstream.runtime.task import Task
from kstream.state.memory import MemoryBackend


@dataclass
class LocalResult:
    """Sink records per topic ``(key_bytes, value_bytes, timestamp)`` in emission order
    (tasks in partition order), dead letters, final snapshot points and metrics."""

    sinks: dict[str, list[tuple[bytes | None, bytes | None, int]]] = field(default_factory=dict)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    final_states: dict[str, SnapshotPoint] = field(default_factory=dict)
    backends: dict[str, MemoryBackend] = field(default_factory=dict)
    metrics: dict[str, dict[str, int]] = field(default_factory=dict)


def run_bounded(
    plan: JobPlan,
    inputs: Mapping[str, Sequence[Sequence[SourceRecord]]],
    *,
    batch_size: int = 256,
) -> LocalResult:
    """Run ``plan`` to completion; ``inputs[topic][partition]`` are the records of
    every user topic (missing partitions are empty)."""
    result = LocalResult()
    internal: dict[str, list[list[InternalRecord | InternalEvent]]] = {
        t.name: [[] for _ in range(t.partitions)] for t in plan.internal_topics
    }
    for stage in plan.stages:
        for spec in (t for t in plan.tasks if t.stage == stage.name):
            backend = MemoryBackend()
            task = Task(plan, spec, backend, bounded=True)
            task.tick(0.0, wall_ms=0)  # the processing-time clock: 0 throughout
            # Tables first so lookups see them, then streams, then internal topics.
            order = sorted(
                spec.inputs,
                key=lambda i: [InputKind.TABLE, InputKind.SOURCE, InputKind.INTERNAL].index(i.kind),
            )
            for inp in order:
                if inp.kind is InputKind.INTERNAL:
                    log = internal[inp.topic][inp.partition]
                    for i in range(0, len(log), batch_size):
                        task.feed_internal(inp.topic, inp.partition, log[i : i + batch_size], 0.0)
                else:
                    parts = inputs.get(inp.topic, ())
                    records = parts[inp.partition] if inp.partition < len(parts) else ()
                    for i in range(0, len(records), batch_size):
                        task.feed_source(inp.topic, inp.partition, records[i : i + batch_size], 0.0)
                    task.end_input(inp.topic, inp.partition, 0.0)
                _collect(task, internal, result)
            if not task.finished:
                raise RuntimeError(f"task {spec.task_id} did not finish: an input never ended")
            _collect(task, internal, result)
            result.backends[spec.task_id] = backend
            result.metrics[spec.task_id] = dict(task.metrics)
    return result


def _collect(
    task: Task,
    internal: dict[str, list[list[InternalRecord | InternalEvent]]],
    result: LocalResult,
) -> None:
    for item in task.drain():
        if isinstance(item, OutputBatch):
            if item.internal:
                assert item.partitions is not None
                logs = internal[item.topic]
                for p, k, v, t in zip(
                    item.partitions, item.keys, item.values, item.timestamps, strict=True
                ):
                    log = logs[p]
                    log.append(InternalRecord(task.task_id, task.attempt, len(log), k, v, t))
            else:
                result.sinks.setdefault(item.topic, []).extend(
                    zip(item.keys, item.values, item.timestamps, strict=True)
                )
        elif isinstance(item, OutputEvent):
            if item.internal:
                for log in internal[item.topic]:
                    log.append(InternalEvent(task.task_id, task.attempt, len(log), item.event))
        elif isinstance(item, DeadLetter):
            result.dead_letters.append(item)
        elif isinstance(item, SnapshotPoint) and item.final:
            result.final_states[task.task_id] = item
