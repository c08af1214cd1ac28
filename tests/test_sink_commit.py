"""SinkCommitter: a completion of all the worker's tasks is ONE transaction, opened and
filled on the caller's thread; its commit runs on another thread while the caller goes
on, and is collected later (kstream.worker.sinkcommit). Runners and the worker's
transactions are stand-ins; the real transactions: tests/test_worker_transactions.py."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, cast

import pytest

from kstream.kafka.commits import CommitMarker
from kstream.kafka.sink import SinkError, SinkFencedError
from kstream.kafka.worker_transactions import Publication, SinkCommit, WorkerTransactions
from kstream.sinkbuffer.epochs import SinkStateError
from kstream.worker.runner import TaskRunner
from kstream.worker.sinkcommit import SinkCommitter

TP = tuple[str, int]


class Transactions:
    """What the committer uses of WorkerTransactions: ``open`` (noted, or ``open_error``)
    and a commit that runs ``commit`` on the commit thread."""

    def __init__(
        self, commit: Callable[[], None] = lambda: None, open_error: Exception | None = None
    ) -> None:
        self.opened: list[tuple[list[str], dict[TP, int]]] = []
        self._commit = commit
        self.open_error = open_error
        self.committed_on: list[threading.Thread] = []

    def open(self, commits: list[SinkCommit], offsets: Mapping[TP, int], what: str) -> Any:
        if self.open_error is not None:
            raise self.open_error
        self.opened.append(([c.task for c in commits], dict(offsets)))
        return Publication(cast(WorkerTransactions, self), commits, what)

    def commit(self, what: str, offsets: Any = None, metadata: Any = None) -> None:
        self.committed_on.append(threading.current_thread())
        self._commit()


class Runner:
    """What the committer uses of a TaskRunner: ``due_sink_commits``."""

    def __init__(self, task_id: str, records: int, offsets: dict[TP, int]) -> None:
        self.task_id = task_id
        self.records = records
        self.offsets = offsets
        self.dropped_on: list[threading.Thread] = []  # where its epochs were dropped

    def due_sink_commits(self, checkpoint_id: int) -> tuple[list[SinkCommit], dict[TP, int]]:
        if not self.records:
            return [], self.offsets

        def drop(_epochs: object, _n: int) -> None:
            self.dropped_on.append(threading.current_thread())

        marker = CommitMarker(self.task_id, checkpoint_id, 1)
        return [SinkCommit(self.task_id, marker, [], self.records, drop)], self.offsets


def assert_set(event: threading.Event) -> None:
    assert event.wait(10)


def runners(*rs: Runner) -> list[TaskRunner]:
    return cast(list[TaskRunner], list(rs))


def test_one_transaction_carries_every_task_with_its_offsets() -> None:
    txn = Transactions()
    a = Runner("a", 3, {("in", 0): 10})
    b = Runner("b", 0, {("in", 1): 5})  # nothing due: not in the transaction
    c = Runner("c", 2, {("rep", 3): 7})
    committer = SinkCommitter(cast(WorkerTransactions, txn))
    assert committer.start(runners(a, b, c), 4) == {}
    assert committer.collect(wait=True) == {}
    assert txn.opened == [(["a", "c"], {("in", 0): 10, ("rep", 3): 7})]
    here = threading.current_thread()
    assert a.dropped_on == [here] and c.dropped_on == [here] and b.dropped_on == []
    assert txn.committed_on and txn.committed_on[0] is not here  # the commit ran elsewhere
    committer.close()


def test_nothing_due_opens_no_transaction() -> None:
    txn = Transactions()
    committer = SinkCommitter(cast(WorkerTransactions, txn))
    assert committer.start(runners(Runner("a", 0, {})), 4) == {}
    assert not committer.busy and txn.opened == []


def test_the_caller_goes_on_while_the_commit_runs_and_collects_it_later() -> None:
    release = threading.Event()
    txn = Transactions(commit=lambda: assert_set(release))
    a = Runner("a", 1, {("in", 0): 1})
    committer = SinkCommitter(cast(WorkerTransactions, txn))
    assert committer.start(runners(a), 7) == {}  # returns at once
    assert committer.busy and committer.collect(wait=False) == {}  # not finished: nothing
    assert a.dropped_on == []
    with pytest.raises(RuntimeError, match="not collected"):
        committer.start(runners(a), 8)
    release.set()
    assert committer.collect(wait=True) == {}
    assert not committer.busy and a.dropped_on == [threading.current_thread()]
    committer.close()


@pytest.mark.parametrize(
    "failure",
    [SinkFencedError("the group moved their inputs"), SinkError("the transaction failed")],
)
def test_a_failed_commit_is_every_one_of_its_tasks_outcome(failure: SinkError) -> None:
    def fails() -> None:
        raise failure

    a, b = Runner("a", 1, {("in", 0): 1}), Runner("b", 2, {("in", 1): 1})
    committer = SinkCommitter(cast(WorkerTransactions, Transactions(commit=fails)))
    assert committer.start(runners(a, b), 9) == {}
    assert committer.collect(wait=True) == {"a": failure, "b": failure}  # reported
    assert a.dropped_on == [] and b.dropped_on == []  # the epochs stay sealed
    committer.close()


def test_a_transaction_that_cannot_open_is_its_tasks_outcome() -> None:
    refused = SinkFencedError("UNKNOWN_MEMBER_ID")
    committer = SinkCommitter(cast(WorkerTransactions, Transactions(open_error=refused)))
    got = committer.start(runners(Runner("a", 1, {}), Runner("b", 1, {})), 4)
    assert got == {"a": refused, "b": refused} and not committer.busy


def test_a_bug_is_raised_not_reported() -> None:
    def broken() -> None:
        raise SinkStateError("commit before recover")

    committer = SinkCommitter(cast(WorkerTransactions, Transactions(commit=broken)))
    committer.start(runners(Runner("a", 1, {})), 3)
    with pytest.raises(SinkStateError, match="commit before recover"):
        committer.collect(wait=True)
    opening = SinkCommitter(cast(WorkerTransactions, Transactions(open_error=KeyError("bug"))))
    with pytest.raises(KeyError):
        opening.start(runners(Runner("a", 1, {})), 3)
    committer.close()
