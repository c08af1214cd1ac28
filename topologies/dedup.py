"""Deduplication within an hour of event time (a keyed process function with TTL state).

Input ``events``: keyed by event id (the Kafka key, ``str``), JSON values ``{"id":
str, "ts": epoch_ms, ...}``; event time is the value's ``ts``. The topic's
partitioning by key is trusted (no repartition), so every id is processed in the
order of its partition.

Output ``unique-events``: key = id, the record's value unchanged, timestamp = its
event time. Per id, a record is passed on unless a record of the same id was passed
on less than one hour of event time before or after it (``|ts - kept_ts| <
1 h``); a record passed on becomes the id's new reference. The reference is kept in
a ``ValueState`` whose TTL (1 h + the 5 s out-of-orderness bound, in event time)
deletes it once no record can be its duplicate any more.

Exact (equal to ``expected_output``) when no partition runs more than 5 s out of
order: a reference expires only when the watermark is past ``kept_ts + 1 h + 5 s``,
and every later record is then more than an hour after it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kstream.api import Topology, ValueState, WatermarkStrategy

SOURCE = "events"
SINK = "unique-events"
WINDOW_MS = 3_600_000
OUT_OF_ORDERNESS_MS = 5_000


def _dedup(key: Any, event: dict[str, Any], ts: int, state: Any, out: Any) -> None:
    kept = state["kept"]
    last = kept.get()
    if last is None or abs(ts - last) >= WINDOW_MS:
        kept.set(ts)
        out(event)


topology = Topology("dedup")
(
    topology.source(
        SOURCE,
        keyed=True,
        timestamp=lambda event, _kafka_ts: int(event["ts"]),
        watermark=WatermarkStrategy(
            max_out_of_orderness_ms=OUT_OF_ORDERNESS_MS, idle_timeout_s=30.0
        ),
    )
    .process(_dedup, state={"kept": ValueState(ttl_ms=WINDOW_MS + OUT_OF_ORDERNESS_MS)})
    .to(SINK)
)


def expected_output(
    input_records: Mapping[str, Iterable[tuple[Any, Any, int]]],
) -> list[dict[str, Any]]:
    """The values passed on, for ``{topic: [(key, value, timestamp_ms)]}`` in each key's
    processing order."""
    kept: dict[Any, int] = {}
    out = []
    for key, event, _ts in input_records.get(SOURCE, ()):
        ts = int(event["ts"])
        last = kept.get(key)
        if last is None or abs(ts - last) >= WINDOW_MS:
            kept[key] = ts
            out.append(event)
    return out
