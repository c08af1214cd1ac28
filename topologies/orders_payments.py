"""Orders joined with their payments within 10 minutes (windowed stream-stream join).

Inputs ``orders`` (JSON ``{"order_id": str, "amount": number, "ts": epoch_ms}``) and
``payments`` (JSON ``{"order_id": str, "paid": number, "ts": epoch_ms}``); event time
is the value's ``ts``. Both are repartitioned by ``order_id`` into co-partitioned
internal topics.

Output ``paid-orders``: key = order id, value = JSON ``{"order_id", "amount",
"paid", "order_ts", "payment_ts"}`` for every (order, payment) pair with the same
order id and ``|order_ts - payment_ts| <= 10 min`` (inner join: unpaid orders and
unmatched payments produce nothing), timestamp ``max(order_ts, payment_ts)``,
emitted as soon as the second of the pair arrives. Exact (equal to
``expected_output``) when no partition runs more than 5 s out of order; a record
further behind the watermark is dropped as late.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kstream.api import Topology, WatermarkStrategy

ORDERS = "orders"
PAYMENTS = "payments"
SINK = "paid-orders"
WITHIN_MS = 10 * 60 * 1000

_watermark = WatermarkStrategy(max_out_of_orderness_ms=5_000, idle_timeout_s=30.0)


def _event_time(value: dict[str, Any], _kafka_ts: int) -> int:
    return int(value["ts"])


def _joined(order: dict[str, Any], payment: dict[str, Any]) -> dict[str, Any]:
    return {
        "order_id": order["order_id"],
        "amount": order["amount"],
        "paid": payment["paid"],
        "order_ts": order["ts"],
        "payment_ts": payment["ts"],
    }


topology = Topology("orders_payments")
_orders = topology.source(ORDERS, timestamp=_event_time, watermark=_watermark).key_by(
    lambda o: o["order_id"], key_serde="str"
)
_payments = topology.source(PAYMENTS, timestamp=_event_time, watermark=_watermark).key_by(
    lambda p: p["order_id"], key_serde="str"
)
_orders.join(_payments, _joined, within_ms=WITHIN_MS).to(SINK)


def expected_output(
    input_records: Mapping[str, Iterable[tuple[Any, Any, int]]],
) -> list[dict[str, Any]]:
    """Joined pairs for ``{topic: [(key, value, timestamp_ms)]}``, sorted by
    (order_id, order_ts, payment_ts)."""
    payments: dict[str, list[dict[str, Any]]] = {}
    for _k, p, _ts in input_records.get(PAYMENTS, ()):
        payments.setdefault(p["order_id"], []).append(p)
    out = [
        _joined(o, p)
        for _k, o, _ts in input_records.get(ORDERS, ())
        for p in payments.get(o["order_id"], ())
        if abs(o["ts"] - p["ts"]) <= WITHIN_MS
    ]
    return sorted(out, key=lambda r: (r["order_id"], r["order_ts"], r["payment_ts"]))
