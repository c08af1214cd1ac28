"""Reading existing topics' cleanup.policy at start-up survives a broker that is down.

Seen in integration/test_cluster_chaos.py: a worker restarted while one of three
brokers was killed died at start-up with a bare ``TimeoutError`` traceback, because
the DescribeConfigs request it sent to the controller librdkafka knew (the killed
broker) never completed within the 30 s it waited ("Timed out waiting for
controller" once bounded). Each ask now ends after ``request_timeout`` and is asked
again, after a metadata request, until the deadline.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import pytest

from kstream.kafka.clients import KafkaUnreachable, _cleanup_policies


@dataclass
class _Entry:
    value: str


class _Admin:
    """describe_configs: the first ask never completes (its broker is down), later ones
    answer ``compact``."""

    def __init__(self) -> None:
        self.asks: list[float | None] = []
        self.refreshed = 0

    def list_topics(self, timeout: float) -> None:
        self.refreshed += 1

    def describe_configs(self, resources: list[Any], request_timeout: float | None = None
                         ) -> dict[Any, Future[dict[str, _Entry]]]:  # fmt: skip
        self.asks.append(request_timeout)
        out: dict[Any, Future[dict[str, _Entry]]] = {}
        for r in resources:
            f: Future[dict[str, _Entry]] = Future()
            if len(self.asks) > 1:
                f.set_result({"cleanup.policy": _Entry("compact")})
            out[r] = f
        return out


def test_an_ask_that_never_completes_is_asked_again() -> None:
    admin = _Admin()
    got = _cleanup_policies(admin, ["app.control"], timeout=10.0, request_timeout=0.05)  # type: ignore[arg-type]
    assert got == {"app.control": frozenset({"compact"})}
    assert admin.asks == [0.05, 0.05]
    assert admin.refreshed == 1  # librdkafka learns the controller anew


def test_past_the_deadline_the_outage_is_one_clear_error() -> None:
    class _Never(_Admin):
        def describe_configs(self, resources: list[Any], request_timeout: float | None = None
                             ) -> dict[Any, Future[dict[str, _Entry]]]:  # fmt: skip
            self.asks.append(request_timeout)
            return {r: Future() for r in resources}

    with pytest.raises(
        KafkaUnreachable, match=r"cleanup.policy of topic app.control could not be read within 0.1s"
    ):
        _cleanup_policies(_Never(), ["app.control"], timeout=0.1, request_timeout=0.05)  # type: ignore[arg-type]
