"""Global watermark alignment, the worker's part (pure; the coordinator's part and the
rules: :mod:`kstream.protocol.alignment`).

The worker reports its slowest watermark per aligned source topic
(:meth:`GlobalAlignment.report`) and keeps the coordinator's newest bound
(:meth:`GlobalAlignment.on_bound`), which the local aligner counts as one more slow
partition (:meth:`GlobalAlignment.floor`, ``WatermarkAligner.paused(..., floor=...)``):
the global bound is just another upper limit on the same hold mechanism. The floor is
the slowest of the *other* workers' reports: this worker's own partitions count as they
are now, not as its last report said.

Control-topic traffic stays bounded: at most one report per ``report_every``, and only
when it says something new — a topic's slowest moved by at least a ``STEP``-th of its
drift bound, a topic came or went, or the attempt changed — plus an unchanged report
every ``refresh_every`` while it names a topic (so the coordinator does not expire it).
A report that lags by less than a quarter of the drift only holds partitions a little
earlier than needed; it never lets one run further ahead. A worker with nothing to hold
back reports an empty map once, then stays silent. Reports go out only while the tasks
run (not during a restore).

A worker's first report in an attempt goes out even when empty (the coordinator waits
for every member's first report before its first bound of the attempt), and until that
first bound comes — at most ``first_bound`` — the worker holds its partitions after a
first batch, since the others may still be at the very beginning. A bound is of one
attempt (a restore forgets it) and is forgotten when the coordinator
has not repeated it for ``bound_timeout`` (a coordinator gone must not hold partitions
for good).
"""

from __future__ import annotations

from collections.abc import Mapping

from kstream.elements.events import MIN_TS
from kstream.protocol.messages import WatermarkBound, WatermarkReport

REPORT_EVERY_S = 0.2
REFRESH_S = 2.0  # well within the coordinator's heartbeat timeout (10 s by default)
BOUND_TIMEOUT_S = 10.0  # the coordinator repeats a bound every 2 s (REFRESH_S there)
FIRST_BOUND_S = 10.0  # held after a first batch until the attempt's first bound, at most
STEP = 4


class GlobalAlignment:
    """This worker's reports and the coordinator's bound; ``max_drift_ms`` per aligned
    source topic (empty: alignment is off, nothing is reported)."""

    def __init__(
        self,
        max_drift_ms: Mapping[str, int],
        *,
        report_every: float = REPORT_EVERY_S,
        refresh_every: float = REFRESH_S,
        bound_timeout: float = BOUND_TIMEOUT_S,
        first_bound: float = FIRST_BOUND_S,
    ) -> None:
        self.max_drift_ms = dict(max_drift_ms)
        self.report_every = report_every
        self.refresh_every = refresh_every
        self.bound_timeout = bound_timeout
        self.first_bound = first_bound
        self._sent: WatermarkReport | None = None
        self._sent_at = float("-inf")
        self._first_sent_at = float("-inf")  # this member's first report in its attempt
        self._bound: WatermarkBound | None = None
        self._bound_at = float("-inf")

    def on_bound(self, msg: WatermarkBound, now: float) -> None:
        """The coordinator published ``msg`` (read at ``now``)."""
        self._bound, self._bound_at = msg, now

    def floor(self, member: str, attempt: int, now: float) -> dict[str, int]:
        """The slowest watermark per topic over the other workers' reports, as the
        coordinator last said for ``attempt``; ``member``'s own report is left out (its
        partitions are compared as they are now). Before the attempt's first bound — for
        at most ``first_bound`` after this worker's first report in it — the others may
        still be at the very beginning: every aligned topic's floor is the lowest
        watermark (a partition is held after its first batch). Empty: no bound (alignment
        is off, or the coordinator does not publish one), a bound of another attempt, or
        one not repeated in time."""
        b = self._bound
        if b is None or b.attempt != attempt:
            sent = self._sent
            if (
                sent is not None
                and (sent.member, sent.attempt) == (member, attempt)
                and now - self._first_sent_at < self.first_bound
            ):
                return dict.fromkeys(self.max_drift_ms, MIN_TS)
            return {}
        if now - self._bound_at > self.bound_timeout:
            return {}
        out = {}
        for topic, wm in b.slowest.items():
            low = b.second.get(topic) if b.by.get(topic) == member else wm
            if low is not None:
                out[topic] = low
        return out

    def report(
        self, member: str, attempt: int, slowest: Mapping[str, int], now: float
    ) -> WatermarkReport | None:
        """The report to send now, if any: ``slowest`` is this worker's slowest watermark
        per aligned topic among the partitions that hold the others back."""
        if not self.max_drift_ms or now - self._sent_at < self.report_every:
            return None
        mine = {t: wm for t, wm in slowest.items() if t in self.max_drift_ms}
        last = self._sent
        if last is None or last.attempt != attempt or last.member != member:
            due = True  # the coordinator waits for every member's first report
            self._first_sent_at = now
        elif last.slowest.keys() != mine.keys():
            due = True
        else:
            moved = any(
                abs(wm - last.slowest[t]) >= max(1, self.max_drift_ms[t] // STEP)
                for t, wm in mine.items()
            )
            due = moved or (bool(mine) and now - self._sent_at >= self.refresh_every)
        if not due:
            return None
        self._sent, self._sent_at = WatermarkReport(member, attempt, mine), now
        return self._sent
