"""Reading existing topics' cleanup policies at start-up (``topic_conflicts``) while a
broker is down: a DescribeConfigs request that gets no answer is asked again after a
metadata request (the controller it waited for may be the broker that is down) instead of failing the worker with a traceback; when none answers
within the deadline, one line says so."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest

from kstream.kafka import clients
from kstream.kafka.clients import KafkaUnreachable, TopicSpec, topic_conflicts


class Entry:
    def __init__(self, value: str) -> None:
        self.value = value


class Admin:
    """Answers DescribeConfigs after ``silent`` requests that time out."""

    def __init__(self, silent: int) -> None:
        self.silent = silent
        self.requests = 0
        self.refreshed = 0

    def list_topics(self, timeout: float) -> None:
        self.refreshed += 1  # learns the current controller

    def describe_configs(self, resources: list[Any], request_timeout: float = 0) -> dict[Any, Any]:
        self.requests += 1
        out: dict[Any, Future[dict[str, Entry]]] = {}
        for r in resources:
            f: Future[dict[str, Entry]] = Future()
            if self.requests <= self.silent:
                f.set_exception(TimeoutError())
            else:
                f.set_result({"cleanup.policy": Entry("compact")})
            out[r] = f
        return out


SPEC = [TopicSpec("t", 1, {"cleanup.policy": "compact"})]


def test_a_request_no_broker_answered_is_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clients.time, "sleep", lambda _s: None)
    admin = Admin(silent=2)
    assert topic_conflicts(admin, SPEC, {"t": 1}) == []  # type: ignore[arg-type]
    assert (admin.requests, admin.refreshed) == (3, 2)


def test_no_answer_within_the_deadline_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    monkeypatch.setattr(clients.time, "sleep", lambda s: now.__setitem__(0, now[0] + s))
    monkeypatch.setattr(clients.time, "monotonic", lambda: now[0])
    with pytest.raises(KafkaUnreachable, match=r"cleanup\.policy of topic t could not be read"):
        topic_conflicts(Admin(silent=10**9), SPEC, {"t": 1})  # type: ignore[arg-type]
