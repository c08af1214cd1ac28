"""An alert when a user has been inactive for 10 minutes of event time (event-time timers).

Input ``activity``: keyed by user (the Kafka key, ``str``), JSON values ``{"user":
str, "ts": epoch_ms, ...}``; event time is the value's ``ts``.

Output ``inactive-users``: key = user, value = JSON ``{"user", "last_seen",
"alert_at"}`` with timestamp ``alert_at``, once for every event time ``t`` of a user
after which the user did nothing for 10 minutes: no event with a time in ``(t, t +
10 min]``; ``alert_at = t + 10 min``. The alert is emitted when the watermark reaches
``alert_at``.

How: each event registers an event-time timer at ``ts + 10 min`` (one per user and
time) and records its time in a ``MapState``; the timer looks for activity in ``(t,
t + 10 min]`` and forgets times up to ``t``. Exact (equal to ``expected_output``)
when no partition runs more than 5 s out of order (no event arrives behind the
watermark, so every event before ``alert_at`` is in the map when the timer fires).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kstream.api import MapState, Topology, WatermarkStrategy

SOURCE = "activity"
SINK = "inactive-users"
INACTIVE_MS = 10 * 60 * 1000


class InactivityAlert:
    """Per user: ``seen`` maps event times to 0; a timer per time checks the gap after it."""

    def process(self, user: Any, event: Any, ts: int, state: Any, out: Any) -> None:
        state["seen"].put(ts, 0)
        state.register_event_timer(ts + INACTIVE_MS)

    def on_timer(self, user: Any, at: int, state: Any, out: Any) -> None:
        seen = state["seen"]
        last = at - INACTIVE_MS
        times = seen.keys()
        if not any(last < t <= at for t in times):
            out({"user": user, "last_seen": last, "alert_at": at})
        for t in times:
            if t <= last:
                seen.delete(t)


topology = Topology("inactivity")
(
    topology.source(
        SOURCE,
        keyed=True,
        timestamp=lambda event, _kafka_ts: int(event["ts"]),
        watermark=WatermarkStrategy(max_out_of_orderness_ms=5_000, idle_timeout_s=30.0),
    )
    .process(InactivityAlert, state={"seen": MapState()})
    .to(SINK)
)


def expected_output(
    input_records: Mapping[str, Iterable[tuple[Any, Any, int]]],
) -> list[dict[str, Any]]:
    """Every alert for ``{topic: [(key, value, timestamp_ms)]}``, by (user, alert_at)."""
    times: dict[Any, set[int]] = {}
    for key, event, _ts in input_records.get(SOURCE, ()):
        times.setdefault(key, set()).add(int(event["ts"]))
    out = []
    for user, ts in times.items():
        ordered = sorted(ts)
        for t, nxt in zip(ordered, [*ordered[1:], None], strict=True):
            if nxt is None or nxt > t + INACTIVE_MS:
                out.append({"user": user, "last_seen": t, "alert_at": t + INACTIVE_MS})
    return sorted(out, key=lambda r: (r["user"], r["alert_at"]))
