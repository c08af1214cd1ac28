"""Page views per minute, updated live (a tumbling window with ``emit="update"``).

Input ``page-views``: keyed by page (the Kafka key, ``str``), JSON values ``{"page":
str, "ts": epoch_ms}``; event time is the value's ``ts``.

Output ``live-page-views``: key = page, value = JSON ``{"page", "start", "end",
"views"}`` for ``[start, start + 60 s)`` windows — one record per view, carrying the
window's count including that view (as Kafka Streams emits without suppression and
Quix's ``.current()``), timestamp ``end - 1``; nothing more when the window closes.
A consumer keeps the latest record per (page, start).

Exact (equal to ``expected_output`` as a multiset) when no partition runs more than
5 s out of order: a window with ``n`` views emits the counts ``1..n``, in whatever
order its views arrive.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from kstream.api import Topology, Tumbling, WatermarkStrategy, WindowResult

SOURCE = "page-views"
SINK = "live-page-views"
WINDOW_MS = 60_000


def _row(r: WindowResult) -> dict[str, Any]:
    return {"page": r.key, "start": r.start, "end": r.end, "views": r.value}


topology = Topology("live_page_views")
(
    topology.source(
        SOURCE,
        keyed=True,
        timestamp=lambda view, _kafka_ts: int(view["ts"]),
        watermark=WatermarkStrategy(max_out_of_orderness_ms=5_000, idle_timeout_s=30.0),
    )
    .window(Tumbling(WINDOW_MS), emit="update")
    .count()
    .map(_row)
    .to(SINK)
)


def expected_output(
    input_records: Mapping[str, Iterable[tuple[Any, Any, int]]],
) -> list[dict[str, Any]]:
    """Every update for ``{topic: [(key, value, timestamp_ms)]}``, by (page, start, views)."""
    views: Counter[tuple[str, int]] = Counter()
    for page, view, _ts in input_records.get(SOURCE, ()):
        ts = int(view["ts"])
        views[(page, ts - ts % WINDOW_MS)] += 1
    return [
        {"page": page, "start": start, "end": start + WINDOW_MS, "views": n}
        for (page, start), total in sorted(views.items())
        for n in range(1, total + 1)
    ]
