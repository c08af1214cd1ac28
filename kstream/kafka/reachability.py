"""Whether this process reaches the Kafka brokers: one log line per change, a bounded outage.

Broker failures are ordinary events (docs/design.md §12): while the brokers cannot be
reached, control sends, acknowledgements and heartbeats are retried with backoff
(:class:`Backoff`) and the process stays up. :class:`Reachability` remembers since
when nothing got through, logs exactly one line when that starts and one when it
ends, and turns an outage longer than the job's bound (``--max-outage``) into
:class:`BrokerOutage` — the job's failure, with the reason.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class BrokerOutage(RuntimeError):
    """The brokers stayed unreachable for longer than the job's bound."""


class Reachability:
    """Up or down since when, as this process sees the brokers. Not thread-safe.

    ``failed(error)`` when a request could not get through for a reason that
    retrying can cure (no broker answers, a send timed out); ``ok()`` when one
    got through. ``check()`` raises BrokerOutage once the outage is longer than
    ``max_outage`` seconds.
    """

    def __init__(self, max_outage: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_outage = max_outage
        self._clock = clock
        self.down_since: float | None = None
        self.last_error = ""
        self.outages = 0  # how many outages began (for tests and stats)

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def down_for(self) -> float:
        """Seconds since the current outage began (0 when the brokers are reachable)."""
        return 0.0 if self.down_since is None else self._clock() - self.down_since

    def failed(self, error: str) -> None:
        """A request did not get through (retrying may cure it)."""
        self.last_error = error
        if self.down_since is None:
            self.down_since = self._clock()
            self.outages += 1
            log.warning(
                "Kafka unreachable (%s); retrying with backoff, the job fails if this lasts "
                "over %gs (--max-outage)",
                error,
                self.max_outage,
            )

    def ok(self) -> None:
        """A request got through: the brokers are reachable."""
        if self.down_since is not None:
            log.warning("Kafka reachable again after %.1fs", self._clock() - self.down_since)
            self.down_since = None

    def check(self) -> None:
        """Raise BrokerOutage if the current outage is longer than the bound."""
        if self.down_since is not None and self.down_for() > self.max_outage:
            raise BrokerOutage(
                f"Kafka unreachable for {self.down_for():.0f}s, longer than --max-outage "
                f"{self.max_outage:g}s (last error: {self.last_error})"
            )


class Backoff:
    """Exponential delays with jitter: ``initial``, doubling, at most ``maximum`` seconds."""

    def __init__(
        self,
        initial: float = 0.1,
        maximum: float = 5.0,
        *,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.initial = initial
        self.maximum = maximum
        self._rand = rand
        self._next = initial

    def next(self) -> float:
        """The next delay (between 80 % and 100 % of the current step, so peers spread)."""
        step = self._next
        self._next = min(self.maximum, self._next * 2)
        return step * (0.8 + 0.2 * self._rand())

    def reset(self) -> None:
        self._next = self.initial
