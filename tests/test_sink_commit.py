"""SinkCommitter: every task's transaction is opened first, then the commits run together
on other threads while the caller goes on; it collects them later (kstream.worker.sinkcommit).
Runners are stand-ins returning commits."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import cast

import pytest

from kstream.kafka.exactly_once_sink import SinkCommit
from kstream.kafka.sink import SinkError, SinkFencedError
from kstream.sinkbuffer.epochs import SinkStateError
from kstream.worker.runner import TaskRunner
from kstream.worker.sinkcommit import SinkCommitter


class Commit:
    """What the committer uses of a SinkCommit: ``publish`` runs ``call`` (on a commit
    thread), ``published`` notes the thread that collected it."""

    def __init__(self, call: Callable[[], int]) -> None:
        self.call = call
        self.collected_on: threading.Thread | None = None

    def publish(self) -> None:
        self.call()

    def published(self) -> int:
        self.collected_on = threading.current_thread()
        return 1


class Runner:
    """What the committer uses of a TaskRunner: its id and ``begin_commit_sinks``."""

    def __init__(
        self,
        task_id: str,
        commits: list[Callable[[], int]],
        begin_error: Exception | None = None,
    ) -> None:
        self.task_id = task_id
        self.commits = [Commit(c) for c in commits]
        self.begin_error = begin_error
        self.begun: list[int] = []

    def begin_commit_sinks(self, checkpoint_id: int) -> list[SinkCommit]:
        self.begun.append(checkpoint_id)
        if self.begin_error is not None:
            raise self.begin_error
        return cast(list[SinkCommit], list(self.commits))


def publishing(done: list[str], name: str) -> Callable[[], int]:
    """A commit that notes ``name`` in ``done`` when it runs."""

    def publish() -> int:
        done.append(name)
        return 1

    return publish


def commit(committer: SinkCommitter, runners: list[Runner], n: int) -> dict[str, SinkError]:
    """Start the commits of ``runners`` for ``n`` and collect them, waiting: the tasks
    fenced or failed."""
    outcomes = committer.start(cast(list[TaskRunner], runners), n)
    outcomes.update(committer.collect(wait=True))
    return outcomes


def test_the_caller_goes_on_while_the_commits_run_and_collects_them_later() -> None:
    release = threading.Event()

    def held() -> int:
        assert release.wait(10)
        return 1

    a, b = Runner("a", [held]), Runner("b", [held])
    committer = SinkCommitter()
    assert committer.start(cast(list[TaskRunner], [a, b]), 7) == {}  # returns at once
    assert committer.busy and committer.collect(wait=False) == {}  # not finished: nothing
    assert all(c.collected_on is None for r in (a, b) for c in r.commits)
    with pytest.raises(RuntimeError, match="not collected"):
        committer.start(cast(list[TaskRunner], [a, b]), 8)
    release.set()
    assert committer.collect(wait=True) == {}
    assert not committer.busy
    here = threading.current_thread()
    assert all(c.collected_on is here for r in (a, b) for c in r.commits)  # epochs dropped here
    committer.close()


def test_the_commits_of_all_tasks_wait_together() -> None:
    both = threading.Barrier(3, timeout=10)  # two commits and the check below

    def waits_for_the_other() -> int:
        both.wait()  # only returns when the other task's commit runs at the same time
        return 1

    a, b = Runner("a", [waits_for_the_other]), Runner("b", [waits_for_the_other])
    committer = SinkCommitter()
    results: list[dict[str, SinkError]] = []
    t = threading.Thread(target=lambda: results.append(commit(committer, [a, b], 7)))
    t.start()
    both.wait()
    t.join(10)
    committer.close()
    assert results == [{}]
    assert a.begun == [7] and b.begun == [7]


def test_fenced_tasks_are_reported_and_the_others_commit() -> None:
    done: list[str] = []

    def fenced() -> int:
        raise SinkFencedError("a newer owner")

    runners = [
        Runner("a", [publishing(done, "a1")], begin_error=SinkFencedError("fenced when opening")),
        Runner("b", [publishing(done, "b1"), fenced]),
        Runner("c", [publishing(done, "c1"), publishing(done, "c2")]),
    ]
    got = commit(SinkCommitter(), runners, 5)
    assert sorted(got) == ["a", "b"]
    assert str(got["a"]) == "fenced when opening"
    assert sorted(done) == ["b1", "c1", "c2"]  # a's commit never ran: it was not opened


def test_a_failed_commit_is_its_tasks_outcome_once_every_commit_finished() -> None:
    raised = threading.Event()
    finished: list[str] = []
    failure = SinkError("the transaction failed")

    def fails() -> int:
        raised.set()
        raise failure

    def slow() -> int:
        assert raised.wait(10)
        finished.append("b")
        return 1

    committer = SinkCommitter()
    a, b = Runner("a", [fails]), Runner("b", [slow])
    assert committer.start(cast(list[TaskRunner], [a, b]), 9) == {}
    assert committer.collect(wait=True) == {"a": failure}  # reported, not raised
    assert finished == ["b"] and not committer.busy


def test_a_failure_opening_a_task_finishes_the_commits_opened_before_it() -> None:
    done: list[str] = []

    a = Runner("a", [publishing(done, "a1"), publishing(done, "a2")])
    b = Runner("b", [], begin_error=SinkError("opening the transaction failed"))
    c = Runner("c", [publishing(done, "c1")])
    committer = SinkCommitter()
    got = committer.start(cast(list[TaskRunner], [a, b, c]), 4)
    assert {k: str(e) for k, e in got.items()} == {"b": "opening the transaction failed"}
    assert not committer.busy  # a's commits were collected before start returned
    assert sorted(done) == ["a1", "a2"]
    assert c.begun == []  # as when the tasks were committed one after the other


def test_a_bug_is_raised_not_reported() -> None:
    def broken() -> int:
        raise SinkStateError("commit before recover")

    with pytest.raises(SinkStateError, match="commit before recover"):
        commit(SinkCommitter(), [Runner("a", [broken])], 3)
    with pytest.raises(KeyError):
        commit(SinkCommitter(), [Runner("a", [], begin_error=KeyError("bug"))], 3)
