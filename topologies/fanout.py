"""One keyed stream read by five operators, and a window, a join and a table each read by two.

Inputs ``clicks`` (JSON ``{"user": str, "page": str, "t": ms}``), ``orders`` (JSON
``{"user": str, "item": str, "t": ms}``) — event time is the value's ``t``; both are
repartitioned by user — and the table ``profiles`` (key user, JSON ``{"name": str}``).

Outputs (key = user; exact whatever the partitioning, as long as each user's records
come in event-time order):

- ``click-counts``: each user's running click count, one update per click;
- ``click-pages``: each click's page;
- ``window-counts``: ``[user, start, count]`` per 1 s tumbling window of clicks;
- ``busy-windows``: ``[user, start]`` of those windows with 2 clicks or more;
- ``click-orders``: ``[page, item]`` for each click and order of one user at most 1 s apart;
- ``ordered-items``: the item of each of those pairs;
- ``named-clicks`` / ``named-orders``: ``[name, page]`` / ``[name, item]`` of each click /
  order whose user has a profile (read before the clicks and orders).

The clicks' repartition topic is read by one stage (count, map, window, join and table
join), as is the orders'; see ``kstream.plan.planner``.
"""

from __future__ import annotations

from typing import Any

from kstream.api import Topology, Tumbling

CLICKS = "clicks"
ORDERS = "orders"
PROFILES = "profiles"


def _t(value: dict[str, Any], _kafka_ts: int) -> int:
    return int(value["t"])


def _user(value: dict[str, Any]) -> str:
    return str(value["user"])


topology = Topology("fanout")
clicks = topology.source(CLICKS, timestamp=_t).key_by(_user, key_serde="str", name="clicks_by_user")
orders = topology.source(ORDERS, timestamp=_t).key_by(_user, key_serde="str", name="orders_by_user")
profiles = topology.table(PROFILES)

# After a key_by: a rolling count and a map read the same repartition topic.
clicks.count(name="click_count").to("click-counts")
clicks.map(lambda c: c["page"]).to("click-pages")

# After a window.
windowed = clicks.window(Tumbling(1000)).count()
windowed.map(lambda r: [r.key, r.start, r.value]).to("window-counts")
windowed.filter(lambda r: r.value >= 2).map(lambda r: [r.key, r.start]).to("busy-windows")

# After a join.
joined = clicks.join(orders, lambda c, o: [c["page"], o["item"]], within_ms=1000)
joined.to("click-orders")
joined.map(lambda pair: pair[1]).to("ordered-items")

# After a table.
clicks.join_table(profiles, lambda c, p: [p["name"], c["page"]]).to("named-clicks")
orders.join_table(profiles, lambda o, p: [p["name"], o["item"]]).to("named-orders")


_PROFILES = [("ann", {"name": "Ann"}, 0), ("bob", {"name": "Bob"}, 0)]
_CLICKS = [
    ("ann", {"user": "ann", "page": "home", "t": 100}, 100),
    ("bob", {"user": "bob", "page": "cart", "t": 200}, 200),
    ("ann", {"user": "ann", "page": "cart", "t": 900}, 900),
    ("carol", {"user": "carol", "page": "home", "t": 1200}, 1200),
    ("ann", {"user": "ann", "page": "pay", "t": 1500}, 1500),
]
_ORDERS = [
    ("ann", {"user": "ann", "item": "book", "t": 950}, 950),
    ("carol", {"user": "carol", "item": "cup", "t": 1300}, 1300),
    ("bob", {"user": "bob", "item": "pen", "t": 2500}, 2500),
]

#: Every sink's records (key, value), sorted, from ``SAMPLE``.
EXPECTED: dict[str, list[tuple[Any, Any]]] = {
    "click-counts": [("ann", 1), ("ann", 2), ("ann", 3), ("bob", 1), ("carol", 1)],
    "click-pages": [("ann", "cart"), ("ann", "home"), ("ann", "pay"), ("bob", "cart"),
                    ("carol", "home")],
    "window-counts": [("ann", ["ann", 0, 2]), ("ann", ["ann", 1000, 1]), ("bob", ["bob", 0, 1]),
                      ("carol", ["carol", 1000, 1])],
    "busy-windows": [("ann", ["ann", 0])],
    "click-orders": [("ann", ["cart", "book"]), ("ann", ["home", "book"]),
                     ("ann", ["pay", "book"]), ("carol", ["home", "cup"])],
    "ordered-items": [("ann", "book"), ("ann", "book"), ("ann", "book"), ("carol", "cup")],
    "named-clicks": [("ann", ["Ann", "cart"]), ("ann", ["Ann", "home"]), ("ann", ["Ann", "pay"]),
                     ("bob", ["Bob", "cart"])],
    "named-orders": [("ann", ["Ann", "book"]), ("bob", ["Bob", "pen"])],
}  # fmt: skip


#: Inputs ``(key, value, timestamp)`` per topic (``profiles`` read first).
SAMPLE = {PROFILES: _PROFILES, CLICKS: _CLICKS, ORDERS: _ORDERS}

__all__ = ["CLICKS", "EXPECTED", "ORDERS", "PROFILES", "SAMPLE", "topology"]
