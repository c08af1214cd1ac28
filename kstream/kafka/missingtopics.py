"""Subscribed topics the source consumer reported as unknown, waited for up to a grace.

librdkafka reports "Subscribed topic not available" (UNKNOWN_TOPIC_OR_PART) when a
metadata response lacks a subscribed topic. While a partition leader fails over
in a replicated cluster a broker can answer metadata without a topic that does
exist (seen after kill -9 of a leader in ``integration/test_production_kafka.py``),
so the report alone is not fatal. A topic really deleted, or never created, stays
missing: the report starts a watch, the consumer looks the topics up every
``interval`` seconds, a lookup that finds them all ends the watch, and a topic
missing from every answered lookup for ``grace`` seconds is fatal. Lookups nobody
answers (all brokers down) neither end the watch nor count toward the grace: an
outage is the reachability monitor's to report.

A pure state machine fed a clock (fast tests: ``tests/test_missing_topics.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection

__all__ = ["MISSING_TOPIC_GRACE_S", "MissingTopics"]

MISSING_TOPIC_GRACE_S = 30.0
CHECK_INTERVAL_S = 1.0


class MissingTopics:
    """The watch over subscribed topics reported unknown (see the module docstring)."""

    def __init__(
        self,
        grace: float = MISSING_TOPIC_GRACE_S,
        interval: float = CHECK_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.grace = grace
        self.interval = interval
        self._clock = clock
        self._watching = False
        self._next_check = 0.0
        self._missing_since: float | None = None

    @property
    def watching(self) -> bool:
        """A report came and no answered lookup has found every topic since."""
        return self._watching

    def reported(self) -> bool:
        """The consumer reported a subscribed topic unknown; True if this starts a watch."""
        if self._watching:
            return False
        self._watching = True
        self._next_check = self._clock()
        return True

    def due(self) -> bool:
        """A lookup is wanted now."""
        return self._watching and self._clock() >= self._next_check

    def looked_up(self, missing: Collection[str] | None) -> str | None:
        """Feed a lookup's answer: the subscribed topics it lacks, or None if unanswered.

        Returns the reason to fail when a topic has been missing for the grace,
        else None.
        """
        now = self._clock()
        self._next_check = now + self.interval
        if missing is None:
            return None
        if not missing:
            self._watching = False
            self._missing_since = None
            return None
        if self._missing_since is None:
            self._missing_since = now
        if now - self._missing_since >= self.grace:
            return (
                f"subscribed topics {sorted(missing)} do not exist "
                f"(missing for {now - self._missing_since:.0f} s)"
            )
        return None
