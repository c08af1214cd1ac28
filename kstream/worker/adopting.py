"""Adopting tasks while the others run (cooperative assignment, docs/design.md §6.8):
the tasks of a worker that left or fell silent, whose partitions the group gave this one, are
restored from their snapshots in a completed checkpoint and run in the current attempt —
no other task of this worker stops, rolls back or waits."""

from __future__ import annotations

import logging

from kstream.checkpointstorage.base import StoreError
from kstream.checkpointstorage.metadata import task_manifests
from kstream.config import JobConfig
from kstream.kafka.clients import KafkaException, init_transactions, make_producer
from kstream.kafka.exactly_once_sink import ExactlyOnceSink
from kstream.logs import ctx
from kstream.sinkbuffer.epochs import SinkError
from kstream.snapshots.restore import CorruptSnapshotError, PublishedPastRestore
from kstream.worker.opening import open_runner, publish_restored, refuse_republishing
from kstream.worker.runner import TaskRunner
from kstream.worker.tasks import WorkerTasks

log = logging.getLogger(__name__)


FENCE_TIMEOUT_S = 30.0


def fence_producer(cfg: JobConfig, transactional_id: str) -> None:
    """Fence the transactional producer ``transactional_id`` (a silent worker's sinks'):
    the broker aborts the transaction it left open. A failure is logged: the adoption
    then waits for the broker to abort it (its transaction timeout)."""
    producer = make_producer(
        cfg.bootstrap_servers, transactional_id=transactional_id, extra=cfg.kafka
    )
    try:
        init_transactions(producer, FENCE_TIMEOUT_S)
        log.info("fenced %s (a silent worker's sinks)", transactional_id)
    except KafkaException as e:
        log.warning("could not fence %s: %s", transactional_id, e)
    finally:
        producer.flush(0)


def refuse_fresh(runner: TaskRunner) -> None:
    """PublishedPastRestore if an exactly-once sink of ``runner`` already published output
    (its commit marker): a task adopted afresh would process that output's input again."""
    for sink in runner.sinks.values():
        marker = sink.marker if isinstance(sink, ExactlyOnceSink) else None
        if marker is not None and isinstance(sink, ExactlyOnceSink):
            raise PublishedPastRestore(
                f"its exactly-once sink already published the output of checkpoint "
                f"{marker.checkpoint} (commit marker of attempt {marker.attempt}); starting "
                "it afresh would publish output twice",
                manifest_path="",
                object=sink.commits_topic,
                published=marker.checkpoint,
            )


def adopt(
    tasks: WorkerTasks,
    attempt: int,
    checkpoint_id: int | None,
    task_ids: frozenset[str],
    fence: tuple[str, ...] = (),
) -> dict[str, str]:
    """Build ``task_ids`` (those assigned here) from checkpoint ``checkpoint_id`` and run
    them in ``attempt``; their output the checkpoint buffered and nobody published goes
    out first (the commit markers say what did, once the silent owner's publication in
    flight is settled: ``fence`` names its sinks' transactional ids, whose open
    transaction a fence aborts at once, where the broker would wait out its timeout).
    ``checkpoint_id`` None: no checkpoint completed, they start afresh — refused for a
    task whose sink published anything (its commit marker: output of a checkpoint).
    Returns the tasks that could not be adopted, with the reason (reported failed: the
    coordinator restores the job)."""
    specs = [s for s in tasks.assigned() if s.task_id in task_ids]
    for transactional_id in fence:
        fence_producer(tasks.ctx.config, transactional_id)
    failed = {
        t: "its partitions are not assigned here" for t in task_ids - {s.task_id for s in specs}
    }
    for hook in tasks.before_restore:  # (standby copies of them leave their files alone)
        hook([s.task_id for s in specs])
    for spec in specs:
        tasks.remove(spec.task_id)  # (a stale runner: rebuilt from the checkpoint)
    tasks.source.pause({(i.topic, i.partition) for s in specs for i in s.inputs})
    try:
        markers = tasks.read_markers(specs)
        handles = (
            {}
            if checkpoint_id is None
            else task_manifests(tasks.ctx.store, tasks.ctx.config.app_id, checkpoint_id)
        )
    except (SinkError, StoreError) as e:
        return {**failed, **{s.task_id: f"adoption failed: {e}" for s in specs}}
    built = []
    for spec in specs:
        handle = handles.get(spec.task_id)
        try:
            runner = open_runner(tasks.ctx, spec, attempt, handle, markers)
        except (CorruptSnapshotError, StoreError, SinkError) as e:
            failed[spec.task_id] = f"adoption failed: {e}"
            continue
        try:
            refuse_republishing(runner, checkpoint_id, handle)
            if checkpoint_id is None:
                refuse_fresh(runner)
        except PublishedPastRestore as e:
            runner.close()
            failed[spec.task_id] = f"adoption failed: {e}"
            continue
        tasks.runners[spec.task_id] = runner
        built.append(runner)
    for task_id, error in publish_restored(tasks.ctx.transactions, built).items():
        tasks.remove(task_id)
        failed[task_id] = f"adoption failed (sink): {error}"
    adopted = [r for r in built if r.task_id in tasks.runners]
    for runner in adopted:
        runner.restored_as = (attempt, checkpoint_id)
        runner.running = True
    tasks.sync_pauses()
    for runner in adopted:
        tasks.seek_restored(runner)
    log.info(
        "attempt %d adopted %s from %s, the other tasks ran on: running %s",
        attempt,
        ", ".join(sorted(r.task_id for r in adopted)) or "nothing",
        "the start positions" if checkpoint_id is None else f"checkpoint {checkpoint_id}",
        sorted(t for t, r in tasks.runners.items() if r.running),
        extra=ctx(attempt=attempt),
    )
    return failed
