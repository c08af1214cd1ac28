"""Global watermark alignment, the coordinator's part (pure; Flink's FLIP-182 aligns
through its coordinator the same way).

A worker aligns the partitions it reads itself (:mod:`kstream.runtime.watermark_alignment`);
across workers it needs the slowest watermark of the partitions the others read. Each
worker reports, per aligned source topic, the watermark of its slowest partition that
holds the others back (:class:`~kstream.protocol.messages.WatermarkReport`: a partition
with records left to read; a quiet or ended one holds no one back, so a topic where a
worker has none is absent from its report). The coordinator keeps the newest report of
each worker and publishes the minimum per topic over them
(:class:`~kstream.protocol.messages.WatermarkBound`); a worker holds a partition more
than the topic's ``max_drift_ms`` ahead of it, exactly as one more slow local partition
would (the aligned maximum is that minimum plus ``max_drift_ms``). The bound names whose
report is the slowest and the slowest of the others': the slowest worker compares with
the others' reports and its own partitions as they are now, not with its own report —
which lags by a report's round trip and would hold the slowest worker itself back, so
a catch-up would advance by at most the drift bound per round trip.

At the start of an attempt every worker holds its partitions after a first batch until
the attempt's first bound comes (the others may still be at the very beginning), and
the coordinator publishes that first bound once every member that owns a task reported
(at most ``wait_for_all`` after the first report), so no worker races through its
backlog before the others were heard of.

What keeps a job from stalling on a worker that stopped reporting:

* a report is of one attempt: a failover (a new attempt) forgets every report, and the
  resumed workers report again (a worker ignores a bound of another attempt);
* a report older than ``timeout`` (the coordinator's heartbeat timeout) is ignored: a
  dead worker's last report expires; a live worker repeats an unchanged report well
  within it (:mod:`kstream.worker.global_alignment`);
* the bound is published when it changes (at most every ``publish_every``) and repeated
  every ``refresh_every`` while it names any topic; a worker forgets a bound not repeated
  for a while (a coordinator gone), so an old bound never holds partitions for good.

A stale report is never more than its worker's real slowest (watermarks only advance
within an attempt), so a stale bound holds more, never less: the slowest partition of
all is never held once the reports have caught up, and the job always progresses.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from kstream.protocol.messages import WatermarkBound, WatermarkReport

log = logging.getLogger(__name__)

PUBLISH_EVERY_S = 0.2
"""A changed bound is published at most this often (one transaction each)."""
REFRESH_S = 2.0
"""An unchanged bound that names any topic is published again this often."""
WAIT_FOR_ALL_S = 8.0
"""The first bound of an attempt waits for a report of every member that owns a task, at
most this long after the attempt's first report (workers hold their partitions after a
first batch until a bound comes, at most 10 s: ``kstream.worker.global_alignment``)."""


class GlobalWatermarks:
    """The workers' newest reports and the bound published from them."""

    def __init__(
        self,
        *,
        timeout: float,
        publish_every: float = PUBLISH_EVERY_S,
        refresh_every: float = REFRESH_S,
        wait_for_all: float = WAIT_FOR_ALL_S,
    ) -> None:
        self.timeout = timeout
        self.publish_every = publish_every
        self.refresh_every = refresh_every
        self.wait_for_all = wait_for_all
        self._first_report = float("inf")  # when the attempt's first report came
        self.attempt: int | None = None  # the attempt the reports are of
        self.reports: dict[str, tuple[float, dict[str, int]]] = {}  # member -> (seen, slowest)
        self.ignored = 0  # reports of another attempt
        self._published: WatermarkBound | None = None
        self._published_at = float("-inf")

    def report(self, msg: WatermarkReport, attempt: int, now: float) -> None:
        """A worker's report, received at ``now`` while the job runs ``attempt``."""
        self._attempt(attempt)
        if msg.attempt != attempt:
            self.ignored += 1
            return
        self.reports[msg.member] = (now, dict(msg.slowest))
        self._first_report = min(self._first_report, now)

    def bound(self, attempt: int) -> WatermarkBound:
        """Per topic, the minimum over the reports kept, whose it is, and the minimum over
        the other members' reports (a worker compares its partitions with the others')."""
        slowest: dict[str, int] = {}
        by: dict[str, str] = {}
        second: dict[str, int] = {}
        for member, (_seen, reported) in sorted(self.reports.items()):
            for topic, wm in reported.items():
                low = slowest.get(topic)
                if low is None or wm < low:
                    if low is not None:
                        second[topic] = low
                    slowest[topic], by[topic] = wm, member
                else:
                    second[topic] = min(wm, second.get(topic, wm))
        return WatermarkBound(attempt, slowest, by, second)

    def tick(
        self, attempt: int, now: float, members: Collection[str] = ()
    ) -> WatermarkBound | None:
        """The bound to publish now, if any (expired reports dropped first). The first of
        an attempt waits until each of ``members`` (those that own tasks) reported, or
        ``wait_for_all`` passed: one published before would let the partitions of the
        first to report run ahead of those not heard of yet."""
        self._attempt(attempt)
        if self._first_report == float("inf"):
            return None  # nobody reported in this attempt yet
        waiting = self._published is None and now - self._first_report < self.wait_for_all
        if waiting and not set(members) <= self.reports.keys():
            return None
        for member, (seen, slowest) in list(self.reports.items()):
            if now - seen > self.timeout:
                del self.reports[member]
                if slowest:
                    log.info(
                        "watermark alignment: the report of worker %s expired (none for "
                        "%.1fs); it holds no one back",
                        member,
                        now - seen,
                    )
        bound = self.bound(attempt)
        since = now - self._published_at
        if bound == self._published:
            if not bound.slowest or since < self.refresh_every:
                return None
        elif since < self.publish_every:
            return None
        self._published, self._published_at = bound, now
        return bound

    def _attempt(self, attempt: int) -> None:
        if attempt != self.attempt:
            self.attempt = attempt
            self.reports.clear()
            self._published, self._published_at = None, float("-inf")
            self._first_report = float("inf")
