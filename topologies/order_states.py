"""A per-order state machine with a payment deadline (process function, value state,
event-time timers registered and deleted).

Input ``order-events``: keyed by order id (the Kafka key, ``str``), JSON values
``{"order_id": str, "event": "created" | "paid" | "shipped", "ts": epoch_ms}``; event
time is the value's ``ts``. Each order's events are processed in the order of its
partition.

Output ``order-status``: key = order id, value = JSON ``{"order_id", "status", "ts"}``
with timestamp ``ts``, one per input event and one per expiry:

* ``created`` (only for an order not seen yet): status ``created``; the payment
  deadline is ``ts + 30 min`` (an event-time timer).
* ``paid``: ``paid`` if the order is ``created`` and ``ts`` is before the deadline
  (the timer is deleted); else ``rejected``.
* ``shipped``: ``shipped`` if the order is ``paid``; else ``rejected``.
* anything else, or ``created`` for a known order: ``rejected``.
* the deadline timer: ``expired`` (at the deadline) when the order is still ``created``.

Exact (equal to ``expected_output``) when no partition runs more than 5 s out of
order: a payment before the deadline then always arrives before the watermark
reaches the deadline, so the outcome does not depend on when the timer fires.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kstream.api import Topology, ValueState, WatermarkStrategy

SOURCE = "order-events"
SINK = "order-status"
PAYMENT_DEADLINE_MS = 30 * 60 * 1000


def _next(order: dict[str, Any] | None, event: str, ts: int) -> dict[str, Any] | None:
    """The order's next state after ``event`` at ``ts``; ``None`` rejects the event."""
    status = None if order is None else order["status"]
    if event == "created" and status is None:
        return {"status": "created", "deadline": ts + PAYMENT_DEADLINE_MS}
    if event == "paid" and status == "created" and order and ts < order["deadline"]:
        return {"status": "paid", "deadline": order["deadline"]}
    if event == "shipped" and status == "paid" and order:
        return {"status": "shipped", "deadline": order["deadline"]}
    return None


def _row(order_id: Any, status: str, ts: int) -> dict[str, Any]:
    return {"order_id": order_id, "status": status, "ts": ts}


class OrderStates:
    def process(self, order_id: Any, event: Any, ts: int, state: Any, out: Any) -> None:
        current = state["order"]
        before = current.get()
        after = _next(before, event["event"], ts)
        if after is None:
            out(_row(order_id, "rejected", ts))
            return
        current.set(after)
        if after["status"] == "created":
            state.register_event_timer(after["deadline"])
        elif after["status"] == "paid":
            state.delete_event_timer(after["deadline"])
        out(_row(order_id, after["status"], ts))

    def on_timer(self, order_id: Any, at: int, state: Any, out: Any) -> None:
        current = state["order"]
        order = current.get()
        if order is not None and order["status"] == "created":
            current.set({"status": "expired", "deadline": order["deadline"]})
            out(_row(order_id, "expired", at))


topology = Topology("order_states")
(
    topology.source(
        SOURCE,
        keyed=True,
        timestamp=lambda event, _kafka_ts: int(event["ts"]),
        watermark=WatermarkStrategy(max_out_of_orderness_ms=5_000, idle_timeout_s=30.0),
    )
    .process(OrderStates, state={"order": ValueState()})
    .to(SINK)
)


def expected_output(
    input_records: Mapping[str, Iterable[tuple[Any, Any, int]]],
) -> list[dict[str, Any]]:
    """Every status row for ``{topic: [(key, value, timestamp_ms)]}`` (each key's
    events in processing order), by (order_id, ts, status); expiries included."""
    orders: dict[Any, dict[str, Any]] = {}
    out = []
    for key, event, _ts in input_records.get(SOURCE, ()):
        ts = int(event["ts"])
        after = _next(orders.get(key), event["event"], ts)
        if after is None:
            out.append(_row(key, "rejected", ts))
            continue
        orders[key] = after
        out.append(_row(key, after["status"], ts))
    for key, order in orders.items():
        if order["status"] == "created":  # never paid in time: the deadline fires
            out.append(_row(key, "expired", order["deadline"]))
    return sorted(out, key=lambda r: (r["order_id"], r["ts"], r["status"]))
