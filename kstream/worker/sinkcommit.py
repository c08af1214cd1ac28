"""Publishing a completed checkpoint's exactly-once output on every task of a worker.

A worker publishes a completion in ONE transaction of its one producer
(:mod:`kstream.kafka.worker_transactions`): every task's due epochs and marker, and the
tasks' input offsets as the group's (what fences a worker that lost its tasks). The
transaction is opened and filled on the processing thread (tasks in order), then its
commit — adding the offsets (a round trip to the group coordinator), a flush and an
EndTxn round trip — runs on another thread (the client releases
the GIL while it waits) while the processing thread goes on: new output goes into the
sinks' buffers, not to the producer. The processing thread collects the finished
commit (``collect``: the epochs dropped from the buffers, or the tasks' failure) once
per loop iteration, and waits for it before a sink is used for anything but buffering:
the next completion's publication, a restore, a stop, the worker's exit. Until it is
collected, the snapshots still hold the epochs; a restore from them reads the tasks'
markers and does not publish them twice.

A publication that fails is every one of its tasks' outcome, not raised: fenced (the
group moved their inputs to a new owner: the worker stops them) or failed (e.g. a
record over the producer's ``message.max.bytes``, a transaction the broker aborted: the
tasks fail and the job restores the checkpoint, and the restored sinks' publication
carries the epochs again).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from typing import TypeGuard

from kstream.kafka.sink import SinkError
from kstream.kafka.worker_transactions import (
    Publication,
    SinkCommit,
    WorkerTransactions,
    committing,
)
from kstream.sinkbuffer.epochs import SinkStateError
from kstream.worker.runner import TP, TaskRunner


class SinkCommitter:
    """Publishes the sinks of a worker's tasks, one completed checkpoint at a time."""

    def __init__(self, transactions: WorkerTransactions) -> None:
        self.transactions = transactions
        self._pool: ThreadPoolExecutor | None = None
        # The publication started and not collected, with its commit.
        self._running: list[tuple[Publication, Future[None]]] = []

    @property
    def busy(self) -> bool:
        """Whether a publication was started and not collected."""
        return bool(self._running)

    def start(self, runners: Sequence[TaskRunner], checkpoint_id: int) -> dict[str, SinkError]:
        """Open the transaction publishing ``checkpoint_id`` for ``runners`` (the tasks
        this worker owns in the group now) on this thread and start its commit; returns
        the tasks whose publication could not be opened (``SinkFencedError``: the group
        no longer counts this worker as their owner, or another ``SinkError``). The
        previous publication must be collected first. Any other error is raised."""
        if self._running:
            raise RuntimeError("the previous checkpoint's commits were not collected")
        commits: list[SinkCommit] = []
        offsets: dict[TP, int] = {}
        for r in runners:
            due, offs = r.due_sink_commits(checkpoint_id)
            if due:
                commits += due
                offsets.update(offs)
        if not commits:
            return {}
        try:
            publication = self.transactions.open(commits, offsets, committing(commits))
        except SinkError as e:
            if not _reported(e):
                raise
            return {c.task: e for c in commits}
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="sink-commit")
        self._running.append((publication, self._pool.submit(publication.publish)))
        return {}

    def collect(self, *, wait: bool) -> dict[str, SinkError]:
        """The publication, once it finished (``wait``: waits for it): published, it
        drops its epochs here; returns its tasks when it was fenced or failed (their
        epochs stay sealed: a restore publishes them). Any other error (a bug) is
        raised."""
        running = self._running
        if not running:
            return {}
        if wait:
            wait_for([f for _, f in running])
        elif not all(f.done() for _, f in running):
            return {}
        self._running = []
        outcomes: dict[str, SinkError] = {}
        for publication, f in running:
            e = f.exception()
            if e is None:
                publication.published()
            elif _reported(e):
                outcomes.update((task, e) for task in publication.tasks)
            else:
                raise e
        return outcomes

    def close(self) -> None:
        """Stop the commit thread (after the commit running, uncollected)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def _reported(e: BaseException | None) -> TypeGuard[SinkError]:
    """Whether a commit's error is the tasks' outcome (a publication that could not
    commit) rather than a bug in the caller, which is raised."""
    return isinstance(e, SinkError) and not isinstance(e, SinkStateError)
