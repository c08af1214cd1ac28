"""Orders reconciled with payments: an outer windowed join with asymmetric bounds.

Inputs ``orders`` (JSON ``{"order_id": str, "amount": number, "ts": epoch_ms}``) and
``payments`` (JSON ``{"order_id": str, "paid": number, "ts": epoch_ms}``); event time
is the value's ``ts``; both are repartitioned by ``order_id``.

A payment belongs to an order when it comes 0 to 10 minutes *after* it
(``before_ms=0, after_ms=10 min``: ``order_ts <= payment_ts <= order_ts + 10 min``).
Output ``reconciliation``: key = order id, value = JSON

* ``{"order_id", "status": "paid", "amount", "paid", "order_ts", "payment_ts"}`` for
  every matching pair, as soon as the second of the two arrives;
* ``{"order_id", "status": "unpaid", "amount", "order_ts"}`` for an order no payment
  matched, once the watermark passes ``order_ts + 10 min``;
* ``{"order_id", "status": "unknown-payment", "paid", "payment_ts"}`` for a payment
  no order matched, once the watermark passes ``payment_ts``.

Exact (equal to ``expected_output``) when no partition runs more than 5 s out of
order (no record is late, so no match can come after an unmatched record was emitted).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kstream.api import Topology, WatermarkStrategy

ORDERS = "orders"
PAYMENTS = "payments"
SINK = "reconciliation"
PAY_WITHIN_MS = 10 * 60 * 1000

_watermark = WatermarkStrategy(max_out_of_orderness_ms=5_000, idle_timeout_s=30.0)


def _event_time(value: dict[str, Any], _kafka_ts: int) -> int:
    return int(value["ts"])


def _reconcile(order: dict[str, Any] | None, payment: dict[str, Any] | None) -> dict[str, Any]:
    if payment is None:
        assert order is not None
        return {
            "order_id": order["order_id"],
            "status": "unpaid",
            "amount": order["amount"],
            "order_ts": order["ts"],
        }
    if order is None:
        return {
            "order_id": payment["order_id"],
            "status": "unknown-payment",
            "paid": payment["paid"],
            "payment_ts": payment["ts"],
        }
    return {
        "order_id": order["order_id"],
        "status": "paid",
        "amount": order["amount"],
        "paid": payment["paid"],
        "order_ts": order["ts"],
        "payment_ts": payment["ts"],
    }


topology = Topology("payment_reconciliation")
_orders = topology.source(ORDERS, timestamp=_event_time, watermark=_watermark).key_by(
    lambda o: o["order_id"], key_serde="str"
)
_payments = topology.source(PAYMENTS, timestamp=_event_time, watermark=_watermark).key_by(
    lambda p: p["order_id"], key_serde="str"
)
_orders.join(_payments, _reconcile, before_ms=0, after_ms=PAY_WITHIN_MS, how="outer").to(SINK)


def expected_output(
    input_records: Mapping[str, Iterable[tuple[Any, Any, int]]],
) -> list[dict[str, Any]]:
    """Every output row for ``{topic: [(key, value, timestamp_ms)]}``, sorted canonically."""
    orders = [o for _k, o, _t in input_records.get(ORDERS, ())]
    payments = [p for _k, p, _t in input_records.get(PAYMENTS, ())]
    out = []
    matched_payments: set[int] = set()
    for o in orders:
        hits = [
            (i, p)
            for i, p in enumerate(payments)
            if p["order_id"] == o["order_id"] and o["ts"] <= p["ts"] <= o["ts"] + PAY_WITHIN_MS
        ]
        out += [_reconcile(o, p) for _i, p in hits] or [_reconcile(o, None)]
        matched_payments.update(i for i, _p in hits)
    out += [_reconcile(None, p) for i, p in enumerate(payments) if i not in matched_payments]
    return sorted(out, key=lambda r: sorted(r.items()))
