"""Building a task's runner: from a checkpoint's manifest (``open_runner``: download or
reuse the files, open RocksDB, recover the sinks), or, for a task that held right after
its snapshot of the checkpoint being restored, from what it has (``carry_on``: a
hand-over's task that stays, docs/design.md §6.6); what a restore checks of the built
runners and publishes for them (``refuse_republishing``, ``publish_restored``)."""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Iterable, Mapping

from kstream.config import Guarantee
from kstream.elements.records import Position
from kstream.kafka.commits import CommitMarker
from kstream.kafka.exactly_once_sink import NOT_READ, ExactlyOnceSink
from kstream.kafka.sink import AtLeastOnceSink, Sink
from kstream.kafka.worker_transactions import (
    SinkCommit,
    WorkerTransactions,
    committable_offsets,
    committing,
)
from kstream.logs import ctx as ctx_log
from kstream.plan import OutputKind, TaskSpec
from kstream.sinkbuffer.epochs import SinkError
from kstream.snapshots.restore import PublishedPastRestore, read_blob, restore_state
from kstream.state.rocksdb import RocksDBBackend
from kstream.worker.routing import TaskRoute
from kstream.worker.runner import (
    SINK_BLOB,
    SINK_SPILL_DIR,
    TP,
    RunnerContext,
    TaskRunner,
    decode_positions,
)

log = logging.getLogger(__name__)


def sink_guarantees(ctx: RunnerContext, spec: TaskSpec) -> dict[str, Guarantee]:
    """The guarantee of each sink topic of task ``spec``."""
    return {
        o.topic: ctx.sink_guarantee or o.guarantee or Guarantee.EXACTLY_ONCE
        for o in spec.outputs
        if o.kind is OutputKind.SINK
    }


def open_runner(
    ctx: RunnerContext,
    spec: TaskSpec,
    attempt: int,
    handle: str | None,
    markers: Mapping[str, CommitMarker | None] | None = None,
) -> TaskRunner:
    """Task ``spec`` at ``attempt`` with the state of the manifest ``handle`` (None: empty,
    start positions). A checkpoint restore may fall back to an older retained one.
    ``markers``: the commit markers the worker read for the tasks it restores (after
    their inputs' offsets were stable), instead of a read per task."""
    cfg = ctx.config
    local = ctx.state_root / spec.task_id
    positions: dict[TP, Position] = {}
    watermarks: dict[tuple[str, int, str], int] | None = None  # None: kept in the state
    blob: bytes | None = None
    t0 = time.perf_counter()
    downloaded: int | None = None  # None: started at the start positions
    if handle is None:
        shutil.rmtree(local, ignore_errors=True)  # start positions: empty state
        backend = RocksDBBackend(local, resources=ctx.state_resources)
    else:
        # One global restore point: a task never falls back by itself; the
        # coordinator restores every task from one older checkpoint instead.
        backend, manifest, rstats = restore_state(
            ctx.store,
            handle,
            local,
            transfers=ctx.transfers.transfers(),
            resources=ctx.state_resources,
        )
        positions = decode_positions(manifest.positions)
        if manifest.watermarks is not None:
            watermarks = {
                (str(t), int(p), str(up)): int(wm) for t, p, up, wm in manifest.watermarks
            }
        if manifest.app_id != cfg.app_id:
            # Another app's state (blue/green): its sinks' buffered output is that app's
            # to publish (`kstream savepoint --stop` waits for it), never this one's.
            log.info("task %s starts from app %s's state", spec.task_id, manifest.app_id)
        elif SINK_BLOB in manifest.blobs:
            blob = read_blob(ctx.store, manifest, SINK_BLOB, handle)
        downloaded = rstats.bytes_downloaded
        log.info(
            "task %s restored %s %d in %.0f ms (%s)",
            spec.task_id,
            "final state" if cfg.bounded else "checkpoint",
            manifest.checkpoint_id,
            (time.perf_counter() - t0) * 1000,
            rstats,
            extra=ctx_log(attempt=attempt, task=spec.task_id, checkpoint=manifest.checkpoint_id),
        )
    route = TaskRoute(spec.task_id, attempt)
    route.sink_topics = sink_guarantees(ctx, spec)
    if Guarantee.EXACTLY_ONCE in route.sink_topics.values():
        inputs = sorted((i.topic, i.partition) for i in spec.inputs)
        wait = ctx.wait_stable
        route.sinks[Guarantee.EXACTLY_ONCE] = ExactlyOnceSink(
            cfg.app_id,
            spec.task_id,
            cfg.bootstrap_servers,
            producer_config=cfg.kafka,
            spill_dir=local / SINK_SPILL_DIR,
            memory_budget=ctx.sink_memory,
            transactions=ctx.transactions,
            inputs=committable_offsets((tp, positions.get(tp)) for tp in inputs),
            wait_stable=None if wait is None else (lambda: wait(inputs)),
            marker=NOT_READ if markers is None else markers.get(spec.task_id, NOT_READ),
        )
    if Guarantee.AT_LEAST_ONCE in route.sink_topics.values():
        # The worker's one producer (its internal topics'), not one per task.
        route.sinks[Guarantee.AT_LEAST_ONCE] = AtLeastOnceSink(
            spec.task_id, producer=ctx.router.producer
        )
    for s in route.sinks.values():
        # Fence zombies of this sink task (or wait for a previous owner's publication in
        # flight), read its marker; a sink of its own publishes what the restored
        # snapshot buffered but never committed, a worker's leaves it to the worker's
        # one publication after the restore (docs/design.md §7).
        s.recover(blob if s.guarantee is Guarantee.EXACTLY_ONCE else None, attempt)
    ctx.metrics.restored(time.perf_counter() - t0, downloaded)
    return TaskRunner(ctx, spec, attempt, backend, route, positions, watermarks)


def carry_on(
    runner: TaskRunner, attempt: int, markers: Mapping[str, CommitMarker | None] | None
) -> TaskRunner:
    """``runner``, held after its snapshot of the checkpoint restored now, at
    ``attempt``: what a restore of that snapshot builds, from what it has — the
    same backend, sink buffers and positions — with no download, no checksum and no
    reopen (a hand-over's task that stays, docs/design.md §6.6). ``runner`` is
    done with (not closed: its backend and sinks go on in the new one)."""
    point = runner.hold_point
    assert point is not None and runner.holding
    runner.uploader.close(wait=True)
    route = TaskRoute(runner.task_id, attempt)
    route.sink_topics, route.sinks = runner.route.sink_topics, runner.route.sinks
    for s in route.sinks.values():
        if isinstance(s, ExactlyOnceSink):
            # (as open_runner's: the inputs at the snapshot, the offsets a publication of
            # its restored epochs holds)
            s.inputs = committable_offsets(
                (tp, point.positions.get(tp)) for tp in sorted(runner.inputs())
            )
    recover_in_place(runner.task_id, route.sinks.values(), attempt, markers)
    return TaskRunner(
        runner.ctx, runner.spec, attempt, runner.backend, route, point.positions, point.watermarks
    )


def recover_in_place(
    task_id: str,
    sinks: Iterable[Sink],
    attempt: int,
    markers: Mapping[str, CommitMarker | None] | None,
) -> None:
    """Recover sinks whose buffers are the restored snapshot's already (a task carried
    on, or kept from a restore of the same checkpoint): the markers say what another
    restore meanwhile may have published (dropped here, as a restore drops it)."""
    for s in sinks:
        if isinstance(s, ExactlyOnceSink):
            read = NOT_READ if markers is None else markers.get(task_id, NOT_READ)
            s.recover(None, attempt, keep=True, marker=read)
        else:
            s.recover(None, attempt)


def refuse_republishing(runner: TaskRunner, checkpoint_id: int | None, handle: str | None) -> None:
    """PublishedPastRestore if an exactly-once sink of ``runner``, restored to
    ``checkpoint_id``, already published the output of a newer checkpoint (its commit
    marker, read by the sink's recover, is above ``checkpoint_id``): processing from
    this checkpoint's positions would produce that output again, in epochs no marker
    covers — published twice. Happens only when a job falls back past a newer
    completed checkpoint (one that cannot be restored); a job that starts from a
    checkpoint or savepoint imports it under a new id, above every marker."""
    if checkpoint_id is None:
        return
    for sink in runner.sinks.values():
        if not isinstance(sink, ExactlyOnceSink):
            continue
        marker = sink.marker
        if marker is not None and marker.checkpoint > checkpoint_id:
            raise PublishedPastRestore(
                f"its exactly-once sink already published the output of checkpoint "
                f"{marker.checkpoint} (commit marker of attempt {marker.attempt}); "
                f"restoring checkpoint {checkpoint_id} would publish output twice",
                manifest_path=handle or "",
                object=sink.commits_topic,
                published=marker.checkpoint,
            )


def publish_restored(
    transactions: WorkerTransactions | None, runners: Iterable[TaskRunner]
) -> dict[str, SinkError]:
    """Publish, in one transaction, what the restored exactly-once sinks of ``runners``
    buffered and their markers say is not out (a crash between a completion and its
    publication); returns the tasks whose publication failed (fenced or not). Sinks with
    a producer of their own (``transactions`` None) did it in their recover."""
    if transactions is None:
        return {}
    commits: list[SinkCommit] = []
    offsets: dict[TP, int] = {}
    for r in runners:
        for s in r.sinks.values():
            if isinstance(s, ExactlyOnceSink) and s.pending is not None:
                commit = s.due(s.pending)
                if commit is not None:
                    commits.append(commit)
                    offsets.update(s.inputs)
    if not commits:
        return {}
    try:
        n = transactions.run(commits, offsets, committing(commits))
    except SinkError as e:
        return {c.task: e for c in commits}
    log.info("published %d buffered records of %d restored task(s)", n, len(commits))
    return {}
