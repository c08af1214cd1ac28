"""A candidate that stops leaves the election group at once, elected or not.

With librdkafka 2.16, a cooperative-sticky member that holds no partition sends no
LeaveGroup from ``close()``: the group keeps it until its session times out, and the
next election waits for it (9.2 s in a rolling restart, benchmarks/ELASTIC.md).
``kstream.hosting.election.leave`` unsubscribes first. The sessions here are 45 s, so
a member the group kept would still be there long after the deadlines below.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from kstream.hosting.election import ELECTION_HEARTBEAT_MS, leave
from kstream.kafka.clients import TopicSpec, ensure_topics, make_consumer

SESSION_MS = 45_000
DEADLINE_S = 20.0  # well inside the session: only a LeaveGroup removes a member by then


class Candidate:
    """A member of the group, polling in a thread, noting what it was assigned."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.consumer = make_consumer(
            bootstrap,
            group,
            extra={
                "session.timeout.ms": SESSION_MS,
                "heartbeat.interval.ms": ELECTION_HEARTBEAT_MS,
                "partition.assignment.strategy": "cooperative-sticky",
            },
        )
        self.owns = False
        self._stop = threading.Event()
        self.consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked)
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _assigned(self, _c: Any, parts: list[Any]) -> None:
        self.owns = self.owns or bool(parts)

    def _revoked(self, _c: Any, parts: list[Any]) -> None:
        self.owns = self.owns and not parts

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.consumer.poll(0.1)

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def stop(self) -> None:
        """Stop polling and leave the group as a stopping candidate does."""
        self._stop.set()
        self._thread.join()
        leave(self.consumer)


def _members(admin: AdminClient, group: str) -> int:
    desc = admin.describe_consumer_groups([group])[group].result(timeout=10)
    return len(desc.members)


def _wait(cond: Callable[[], bool], what: str, timeout: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.1)  # polling the group's state, with a deadline


@pytest.fixture
def candidates(
    kafka_bootstrap: str, kafka_admin: AdminClient, unique_name: Callable[[str], str]
) -> Iterator[tuple[str, list[Candidate]]]:
    topic, group = unique_name("election"), unique_name("candidates")
    ensure_topics(kafka_admin, [TopicSpec(topic, 1)])
    members = [Candidate(kafka_bootstrap, group, topic) for _ in range(3)]
    yield group, members
    for m in members:
        if not m.stopped:
            m.stop()


def test_a_stopping_candidate_leaves_the_group_at_once_elected_or_not(
    kafka_admin: AdminClient, candidates: tuple[str, list[Candidate]]
) -> None:
    group, members = candidates
    _wait(lambda: sum(m.owns for m in members) == 1, "one candidate elected", 60.0)
    _wait(lambda: _members(kafka_admin, group) == 3, "all three in the group")
    owner = next(m for m in members if m.owns)
    idle, last = (m for m in members if m is not owner)

    idle.stop()  # holds no partition: close() alone would leave it in the group
    _wait(lambda: _members(kafka_admin, group) == 2, "the idle candidate gone")

    owner.stop()
    _wait(lambda: last.owns, "the last candidate elected")
    assert _members(kafka_admin, group) == 1
