"""Spend per user per 10-second tumbling window, with 30 s of allowed lateness.

Input ``purchases``: JSON values ``{"user": str, "amount": int, "ts": epoch_ms}``;
event time is the value's ``ts``. Per user, amounts are summed per ``[start, start +
10 s)`` window (aligned to the epoch, end exclusive).

Output ``user-spend``: key = user, value = JSON ``{"user", "start", "end", "spend",
"purchases"}``, emitted when the watermark (max ts - 5 s per partition, the minimum
over partitions) passes the window end. A window is kept 30 s longer: a purchase
that still lands in it makes it emit again with the updated totals; a purchase whose
window ended more than 30 s behind the watermark is late and dropped.

Exact (equal to ``expected_output`` of the on-time purchases) when no partition
runs more than 5 s out of order, and every late purchase is behind the watermark by
more than the allowed lateness when it arrives (then it never counts).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from kstream.api import Topology, Tumbling, WatermarkStrategy, WindowResult

SOURCE = "purchases"
SINK = "user-spend"
WINDOW_MS = 10_000
ALLOWED_LATENESS_MS = 30_000


def _init() -> dict[str, int]:
    return {"spend": 0, "purchases": 0}


def _add(acc: dict[str, int], purchase: dict[str, Any]) -> dict[str, int]:
    return {"spend": acc["spend"] + int(purchase["amount"]), "purchases": acc["purchases"] + 1}


def _merge(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {"spend": a["spend"] + b["spend"], "purchases": a["purchases"] + b["purchases"]}


def _row(r: WindowResult) -> dict[str, Any]:
    return {"user": r.key, "start": r.start, "end": r.end, **r.value}


topology = Topology("user_spend")
(
    topology.source(
        SOURCE,
        timestamp=lambda purchase, _kafka_ts: int(purchase["ts"]),
        watermark=WatermarkStrategy(max_out_of_orderness_ms=5_000, idle_timeout_s=30.0),
    )
    .key_by(lambda purchase: purchase["user"], key_serde="str")
    .window(Tumbling(WINDOW_MS), allowed_lateness_ms=ALLOWED_LATENESS_MS)
    .aggregate(_init, _add, _merge)
    .map(_row)
    .to(SINK)
)


def expected_output(
    input_records: Mapping[str, Iterable[tuple[Any, Any, int]]],
) -> list[dict[str, Any]]:
    """One row per (user, window) of ``{topic: [(key, value, timestamp_ms)]}``, sorted by
    (start, user). Pass only on-time purchases: late ones never count."""
    acc: dict[tuple[int, str], dict[str, int]] = defaultdict(_init)
    for _key, purchase, _ts in input_records.get(SOURCE, ()):
        t = int(purchase["ts"])
        start = t - t % WINDOW_MS
        acc[(start, purchase["user"])] = _add(acc[(start, purchase["user"])], purchase)
    return [
        {"user": user, "start": start, "end": start + WINDOW_MS, **totals}
        for (start, user), totals in sorted(acc.items())
    ]
