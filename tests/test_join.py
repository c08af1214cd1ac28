"""Stream-table and windowed stream-stream joins: exact outputs, lateness, expiry,
and alignment of a table input held back while the stream catches up."""

from __future__ import annotations

import json
from typing import Any

from kstream.api import Topology
from kstream.plan import JobPlan, plan_job
from kstream.runtime import Barrier, InternalEvent, InternalRecord, SnapshotPoint, partition_for_key
from kstream.runtime.local import run_bounded
from tests.conftest import Kit


def _json(value: bytes | None) -> Any:
    assert value is not None
    return json.loads(value)


def table_job() -> JobPlan:
    t = Topology("tj")
    orders = t.source("orders").key_by(lambda o: o["customer"])
    customers = t.table("customers")
    orders.join_table(customers, lambda o, c: [o["id"], c["name"]]).to("enriched")
    return plan_job(t, "tj", {"orders": 1, "customers": 2})


def test_stream_table_join_uses_the_table_key_serde_for_co_partitioning() -> None:
    plan = table_job()
    assert plan.internal_topics[0].partitions == 2
    assert plan.internal_topics[0].key_serde.name == "str"
    customers: list[list] = [[], []]
    for i, (cid, name) in enumerate([("c1", "Ada"), ("c2", "Bob"), ("c3", "Cy")]):
        p = partition_for_key(cid.encode(), 2)
        customers[p].append((cid.encode(), json.dumps({"name": name}).encode(), 1, i))
    # c3 is deleted by a tombstone
    p3 = partition_for_key(b"c3", 2)
    customers[p3].append((b"c3", None, 2, 99))
    orders = [
        (None, json.dumps({"id": i, "customer": c}).encode(), 10 + i, i)
        for i, c in enumerate(["c1", "c2", "c3", "c9", "c1"])
    ]
    result = run_bounded(plan, {"orders": [orders], "customers": customers})
    got = sorted(_json(v) for _, v, _ in result.sinks["enriched"])
    assert got == [[0, "Ada"], [1, "Bob"], [4, "Ada"]]
    assert sum(m["join_unmatched"] for m in result.metrics.values()) == 2


def test_table_input_is_held_back_until_the_stream_barrier_arrives(kit: type[Kit]) -> None:
    plan = table_job()
    task = kit.task(plan, "stage1-0")
    topic = "tj.stage0.repartition"
    task.feed_source("customers", 0, [(b"c1", b'{"name":"Ada"}', 1, 0)], 0.0)
    task.trigger_checkpoint(5, 0, 0.0)
    assert task.paused_inputs() == frozenset({("customers", 0)})
    # Fetched before the pause took effect: buffered, not applied before the snapshot.
    task.feed_source("customers", 0, [(b"c1", b'{"name":"Eve"}', 2, 1)], 0.0)
    order = json.dumps({"id": 1, "customer": "c1"}).encode()
    task.feed_internal(topic, 0, [InternalRecord("stage0-0", 0, 0, b"c1", order, 5)], 0.0)
    assert kit.sink(task.drain(), "enriched") == [("c1", [1, "Ada"], 5)]
    task.feed_internal(topic, 0, [InternalEvent("stage0-0", 0, 1, Barrier(5, 0, 0))], 0.0)
    assert task.paused_inputs() == frozenset()
    out = task.drain()
    assert kit.trace(out) == ["snapshot:5", "event:enriched:Barrier"]
    assert isinstance(out[0], SnapshotPoint)
    assert out[0].positions == {("customers", 0): 1, (topic, 0): {"stage0-0": 2}}
    task.feed_internal(topic, 0, [InternalRecord("stage0-0", 0, 2, b"c1", order, 6)], 0.0)
    assert kit.sink(task.drain(), "enriched") == [("c1", [1, "Eve"], 6)]


def interval_job(allowed: int = 0) -> JobPlan:
    t = Topology("ij")
    orders = t.source("orders", keyed=True)
    payments = t.source("payments", keyed=True)
    orders.join(payments, lambda o, p: [o, p], within_ms=1000, allowed_lateness_ms=allowed).to(
        "paid"
    )
    return plan_job(t, "ij", {"orders": 1, "payments": 1})


def test_windowed_join_pairs_within_the_interval(kit: type[Kit]) -> None:
    task = kit.task(interval_job())
    task.feed_source("orders", 0, kit.records([("k1", "o1", 1000), ("k2", "o2", 5000)]), 0.0)
    assert kit.sink(task.drain(), "paid") == []
    task.feed_source(
        "payments",
        0,
        kit.records([("k1", "p3", 400), ("k1", "p1", 1500), ("k2", "p2", 7000), ("k1", "p6", 450)]),
        0.0,
    )
    # p6 comes after 7000: the watermark just before it is min(5000, 7000), so it is
    # late although the batch started at a lower watermark (per-record watermarks).
    assert kit.sink(task.drain(), "paid") == [
        ("k1", ["o1", "p3"], 1000),
        ("k1", ["o1", "p1"], 1500),
    ]
    assert task.watermark == 5000
    assert task.metrics["late_dropped"] == 1
    # Late: 3000 < watermark 5000. Expired: everything older than 5000 - 1000.
    task.feed_source("orders", 0, kit.records([("k1", "o3", 3000)], 2), 0.0)
    task.feed_source("payments", 0, kit.records([("k2", "p4", 5200), ("k1", "p5", 4100)], 4), 0)
    assert kit.sink(task.drain(), "paid") == [("k2", ["o2", "p4"], 5200)]
    assert task.metrics["late_dropped"] == 3
    assert list(task.late_counts().values()) == [(3, 0)]


def test_windowed_join_allowed_lateness_keeps_partners(kit: type[Kit]) -> None:
    task = kit.task(interval_job(allowed=3000))
    task.feed_source("orders", 0, kit.records([("k1", "o1", 1000), ("k2", "o2", 5000)]), 0.0)
    task.feed_source("payments", 0, kit.records([("k2", "p2", 7000)]), 0.0)
    task.feed_source("payments", 0, kit.records([("k1", "p3", 2000)], 1), 0.0)  # wm 5000
    assert kit.sink(task.drain(), "paid") == [("k1", ["o1", "p3"], 2000)]
    assert task.metrics["late_dropped"] == 0


def test_second_trigger_while_held_back_is_injected_after_the_buffered_records(
    kit: type[Kit],
) -> None:
    plan = table_job()
    task = kit.task(plan, "stage1-0")
    topic = "tj.stage0.repartition"
    task.feed_source("customers", 0, [(b"c1", b'{"name":"Ada"}', 1, 0)], 0.0)
    task.trigger_checkpoint(5, 0, 0.0)
    task.feed_source("customers", 0, [(b"c1", b'{"name":"Eve"}', 2, 1)], 0.0)
    task.trigger_checkpoint(6, 0, 0.0)
    task.feed_internal(topic, 0, [InternalEvent("stage0-0", 0, 0, Barrier(5, 0, 0))], 0.0)
    points = [o for o in task.drain() if isinstance(o, SnapshotPoint)]
    assert [(p.checkpoint_id, p.positions[("customers", 0)]) for p in points] == [(5, 1)]
    assert task.paused_inputs() == frozenset({("customers", 0)})  # now held by barrier 6
    task.feed_internal(topic, 0, [InternalEvent("stage0-0", 0, 1, Barrier(6, 0, 0))], 0.0)
    points = [o for o in task.drain() if isinstance(o, SnapshotPoint)]
    assert [(p.checkpoint_id, p.positions[("customers", 0)]) for p in points] == [(6, 2)]
    assert task.paused_inputs() == frozenset()


def test_records_delivered_again_by_the_consumer_are_processed_once(kit: type[Kit]) -> None:
    """After every broker restarted, a consumer whose fetch position was reset delivers
    records again that the task already processed: they are dropped, not counted twice
    (seen in the full-outage test on a three-broker cluster)."""
    plan = table_job()
    task = kit.task(plan, "stage1-0")
    topic = "tj.stage0.repartition"
    task.feed_source("customers", 0, [(b"c1", b'{"name":"Ada"}', 1, 0)], 0.0)
    order = json.dumps({"id": 1, "customer": "c1"}).encode()
    first = InternalRecord("stage0-0", 0, 0, b"c1", order, 5)
    task.feed_internal(topic, 0, [first], 0.0)
    # Delivered again from offset 0: customer offset 0 and the order at offset 0.
    task.feed_source(
        "customers", 0, [(b"c1", b'{"name":"Ada"}', 1, 0), (b"c1", b'{"name":"Eve"}', 2, 1)], 0.0
    )
    second = InternalRecord("stage0-0", 0, 1, b"c1", order, 6)
    task.feed_internal(topic, 0, [first, second], 0.0)
    assert kit.sink(task.drain(), "enriched") == [("c1", [1, "Ada"], 5), ("c1", [1, "Eve"], 6)]
    assert task.metrics["restored_skipped"] == 2
