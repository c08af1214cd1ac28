"""Clickstream sessionization with session windows (30 minutes of inactivity).

Input ``clicks``: JSON values ``{"user": str, "page": str, "ts": epoch_ms}``; event
time is the value's ``ts``. Per user, clicks at most 30 min apart belong to one
session ``[first ts, last ts + 30 min)``: a click at ``t`` joins a session whose last
click is ``>= t - 30 min`` and ``<= t + 30 min`` (sessions that touch merge).

Output ``sessions``: key = user, value = JSON ``{"user", "start", "end", "clicks",
"pages"}`` where ``pages`` is the sorted list of distinct pages, emitted when the
watermark (max ts - 10 s per partition) passes the session end, or at the end of a
bounded run. Exact (equal to ``expected_output``) when no partition runs more than
10 s out of order; later clicks that cannot join an open session are dropped as late.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from kstream.api import Session, Topology, WatermarkStrategy, WindowResult

SOURCE = "clicks"
SINK = "sessions"
GAP_MS = 30 * 60 * 1000


def _init() -> dict[str, Any]:
    return {"clicks": 0, "pages": []}


def _add(acc: dict[str, Any], click: dict[str, Any]) -> dict[str, Any]:
    return {"clicks": acc["clicks"] + 1, "pages": sorted({*acc["pages"], click["page"]})}


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    return {"clicks": a["clicks"] + b["clicks"], "pages": sorted({*a["pages"], *b["pages"]})}


def _row(r: WindowResult) -> dict[str, Any]:
    return {"user": r.key, "start": r.start, "end": r.end, **r.value}


topology = Topology("sessionization")
(
    topology.source(
        SOURCE,
        timestamp=lambda click, _kafka_ts: int(click["ts"]),
        watermark=WatermarkStrategy(max_out_of_orderness_ms=10_000, idle_timeout_s=30.0),
    )
    .key_by(lambda click: click["user"], key_serde="str")
    .window(Session(GAP_MS))
    .aggregate(_init, _add, _merge)
    .map(_row)
    .to(SINK)
)


def expected_output(
    input_records: Mapping[str, Iterable[tuple[Any, Any, int]]],
) -> list[dict[str, Any]]:
    """Sessions for ``{topic: [(key, value, timestamp_ms)]}``, sorted by (user, start)."""
    by_user: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for _key, click, _ts in input_records.get(SOURCE, ()):
        by_user[click["user"]].append(click)
    out = []
    for user, clicks in sorted(by_user.items()):
        clicks.sort(key=lambda c: c["ts"])
        current: list[dict[str, Any]] = []
        for c in clicks:
            if current and c["ts"] - current[-1]["ts"] > GAP_MS:
                out.append(_session(user, current))
                current = []
            current.append(c)
        out.append(_session(user, current))
    return out


def _session(user: str, clicks: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "user": user,
        "start": clicks[0]["ts"],
        "end": clicks[-1]["ts"] + GAP_MS,
        "clicks": len(clicks),
        "pages": sorted({c["page"] for c in clicks}),
    }
