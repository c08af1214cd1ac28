"""Running spend per user without windows (a rolling aggregation to a compacted topic).

Input ``purchases``: JSON values ``{"user": str, "amount": int, "ts": epoch_ms}``;
a value ``{"user": str, "close": true, ...}`` closes the user's account.

Output ``user-totals`` (created compacted): key = user, value = JSON ``{"spend",
"purchases"}`` — the user's totals since the account was last closed — or a
tombstone when it is closed. Updates are emitted once per checkpoint for each user
whose totals changed (``emit="checkpoint"``), so the topic carries one upsert per
user and checkpoint interval, not one per purchase. Read back with
``topology.table("user-totals")``.

Exact: after compaction (the latest record per key) the topic equals
``expected_output``, whatever the checkpoint timing — provided each user's purchases
and closes come from one input partition (their order is then kept).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kstream.api import Topology

SOURCE = "purchases"
SINK = "user-totals"


def _init() -> dict[str, int]:
    return {"spend": 0, "purchases": 0}


def _add(acc: dict[str, int], purchase: dict[str, Any]) -> dict[str, int] | None:
    if purchase.get("close"):
        return None  # deletes the user's totals: a tombstone downstream
    return {"spend": acc["spend"] + int(purchase["amount"]), "purchases": acc["purchases"] + 1}


topology = Topology("running_totals")
(
    topology.source(SOURCE)
    .key_by(lambda purchase: purchase["user"], key_serde="str")
    .aggregate(_init, _add, emit="checkpoint")
    .to(SINK, key_serde="str", compacted=True)
)


def expected_output(
    input_records: Mapping[str, Iterable[tuple[Any, Any, int]]],
) -> dict[str, dict[str, int] | None]:
    """The compacted topic: the latest value per user (``None``: a tombstone)."""
    table: dict[str, dict[str, int] | None] = {}
    for _key, purchase, _ts in input_records.get(SOURCE, ()):
        current = table.get(purchase["user"])
        table[purchase["user"]] = _add(current or _init(), purchase)
    return table
