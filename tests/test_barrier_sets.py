"""A worker's barriers in one record per partition (kstream.worker.barriersets): what a
downstream task reads of each upstream task is what it read when each task wrote its
own barriers (no broker: the producer keeps what it is given, offsets in that order)."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kstream.config import OnBadRecord
from kstream.elements.events import Barrier, Watermark
from kstream.elements.records import InternalEvent, InternalRecord, OutputBatch, OutputEvent
from kstream.kafka.dlq import DeadLetterWriter
from kstream.kafka.internal import (
    MAX_BARRIER_SET_TASKS,
    EventKind,
    InternalRecordError,
    decode_barrier_set,
    decode_records,
    encode_barrier_set,
    read_origin,
    seq_header,
)
from kstream.worker.routing import Router, TaskRoute

TOPIC = "app.s.repartition"


class _Log:
    """A producer whose partitions are logs: what it is given, offsets in that order."""

    def __init__(self, partitions: int) -> None:
        self.logs: list[list[tuple[Any, ...]]] = [[] for _ in range(partitions)]

    def produce(self, topic: str, value: Any = None, key: Any = None, **kw: Any) -> None:
        log = self.logs[kw["partition"]]
        log.append((key, value, kw.get("timestamp", 1), len(log), kw["headers"]))

    def poll(self, timeout: float) -> int:
        return 0

    def read(self, partition: int) -> list[InternalRecord | InternalEvent]:
        items, bad = decode_records(self.logs[partition])
        assert bad == []
        return items


def _router(log: _Log, *, barrier_sets: bool = True) -> Router:
    dlq = DeadLetterWriter("app", "127.0.0.1:1", OnBadRecord.FAIL)
    return Router(cast(Any, log), dlq, {TOPIC: len(log.logs)}, barrier_sets=barrier_sets)


def _barrier(n: int, ts: int) -> OutputEvent:
    return OutputEvent(TOPIC, True, Barrier(n, 1, ts))


def _records(*keys: bytes, partition: int = 0) -> OutputBatch:
    return OutputBatch(
        TOPIC, True, [partition] * len(keys), list(keys), [b"v"] * len(keys), [5] * len(keys)
    )


def test_the_tasks_triggered_together_share_one_record_per_partition() -> None:
    log = _Log(3)
    router = _router(log)
    routes = [TaskRoute(f"s-{i}", 1) for i in range(4)]
    for i, r in enumerate(routes):
        router.route(r, [_barrier(7, 100 + i)])
    assert log.logs == [[], [], []]  # collected, not written yet
    router.write_barriers()
    assert [len(p) for p in log.logs] == [1, 1, 1]
    for p in range(3):
        assert read_origin(log.logs[p][0][4]).event is EventKind.BARRIERS
        assert log.read(p) == [
            InternalEvent(f"s-{i}", 1, 0, Barrier(7, 1, 100 + i), router.barriers.writer, 0)  # type: ignore[union-attr]
            for i in range(4)
        ]
    router.write_barriers()  # nothing more to write
    assert [len(p) for p in log.logs] == [1, 1, 1]


def test_a_tasks_records_after_its_barrier_follow_the_set_and_others_need_not() -> None:
    log = _Log(1)
    router = _router(log)
    a, b = TaskRoute("s-0", 1), TaskRoute("s-1", 1)
    router.route(a, [_records(b"a1"), _barrier(3, 10)])
    router.route(b, [_records(b"b1")])  # before b's barrier: it may precede the set
    router.route(a, [_records(b"a2")])  # after a's barrier: the set goes first
    router.route(b, [_barrier(3, 11), _records(b"b2")])
    router.write_barriers()
    seen = [
        (it.upstream, it.key if isinstance(it, InternalRecord) else it.event) for it in log.read(0)
    ]
    assert seen == [
        ("s-0", b"a1"),
        ("s-1", b"b1"),
        ("s-0", Barrier(3, 1, 10)),  # the first set: a's alone
        ("s-0", b"a2"),
        ("s-1", Barrier(3, 1, 11)),  # b's set, written before b's next record
        ("s-1", b"b2"),
    ]


def test_a_set_is_written_before_another_checkpoint_or_attempt_joins_it() -> None:
    log = _Log(1)
    router = _router(log)
    router.route(TaskRoute("s-0", 1), [_barrier(3, 10)])
    router.route(TaskRoute("s-1", 1), [_barrier(4, 10)])  # another checkpoint
    router.route(TaskRoute("s-2", 2), [OutputEvent(TOPIC, True, Barrier(4, 2, 10))])
    router.write_barriers()
    events = [(it.upstream, it.attempt, it.offset) for it in log.read(0)]
    assert events == [("s-0", 1, 0), ("s-1", 1, 1), ("s-2", 2, 2)]


def test_a_watermark_after_a_barrier_follows_the_set() -> None:
    log = _Log(2)
    router = _router(log)
    a = TaskRoute("s-0", 1)
    router.route(a, [_barrier(3, 10), OutputEvent(TOPIC, True, Watermark(20))])
    for p in range(2):
        assert [type(it.event) for it in log.read(p) if isinstance(it, InternalEvent)] == [
            Barrier,
            Watermark,
        ]


def test_a_set_holds_at_most_the_tasks_one_record_can_carry() -> None:
    log = _Log(1)
    router = _router(log)
    n = MAX_BARRIER_SET_TASKS + 5
    for i in range(n):
        router.route(TaskRoute(f"s-{i}", 1), [_barrier(1, i)])
    router.write_barriers()
    assert len(log.logs[0]) == 2
    assert [it.upstream for it in log.read(0)] == [f"s-{i}" for i in range(n)]


# ---- the property: each upstream task's items on each partition, as written per task ------

_STEP = st.tuples(
    st.integers(0, 3),  # the task
    st.sampled_from(["records", "barrier", "watermark", "write"]),
    st.lists(st.integers(0, 2), min_size=1, max_size=3),  # partitions of the records
)


def _run(steps: list[tuple[int, str, list[int]]], *, barrier_sets: bool) -> dict[Any, list[Any]]:
    log = _Log(3)
    router = _router(log, barrier_sets=barrier_sets)
    routes = [TaskRoute(f"s-{i}", 1) for i in range(4)]
    passed = [0] * 4  # the last checkpoint each task passed
    n = 0
    for task, what, parts in steps:
        r = routes[task]
        if what == "records":
            n += 1
            keys: list[bytes | None] = [b"%d" % (n * 10 + j) for j in range(len(parts))]
            router.route(
                r, [OutputBatch(TOPIC, True, parts, keys, [b"v"] * len(parts), [5] * len(parts))]
            )
        elif what == "barrier":
            passed[task] += 1
            router.route(r, [_barrier(passed[task], 1000 + task)])
        elif what == "watermark":
            n += 1
            router.route(r, [OutputEvent(TOPIC, True, Watermark(n))])
        else:
            router.write_barriers()
    router.write_barriers()
    seen: dict[Any, list[Any]] = {}
    for p in range(3):
        for it in log.read(p):
            item = it.key if isinstance(it, InternalRecord) else it.event
            seen.setdefault((p, it.upstream), []).append(item)
    return seen


@settings(max_examples=300, deadline=None)
@given(st.lists(_STEP, max_size=40))
def test_each_writer_reads_as_if_it_wrote_its_own_barriers(
    steps: list[tuple[int, str, list[int]]],
) -> None:
    assert _run(steps, barrier_sets=True) == _run(steps, barrier_sets=False)


# ---- the record's validation ----------------------------------------------------------------


def _set_record(**body: Any) -> tuple[Any, ...]:
    headers, value = encode_barrier_set(["s-0", "s-1"], [1, 2], 5, 1, "w1")
    if body:
        value = json.dumps({**json.loads(value), **body}).encode()
    return (None, value, 1, 0, [*headers, seq_header(0)])


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"tasks": ["s-0", "s-0"]}, "distinct task ids"),
        ({"timestamps": [1]}, "distinct task ids and an integer timestamp"),
        ({"timestamps": [1, "2"]}, "integer timestamp"),
        ({"tasks": ["s-9", "s-1"]}, "disagrees with header"),
        ({"attempt": 2}, "attempt 2 disagrees"),
        ({"checkpoint_id": -1}, "checkpoint_id must be an integer >= 0"),
        ({"tasks": []}, "distinct task ids"),
    ],
)
def test_a_malformed_set_is_refused_with_its_reason(body: dict[str, Any], reason: str) -> None:
    items, bad = decode_records([_set_record(), _set_record(**body)])
    assert [it.upstream for it in items] == ["s-0", "s-1"]  # the good one
    assert len(bad) == 1 and bad[0][0] == 1 and reason in bad[0][1]


def test_an_encoder_refuses_what_a_reader_would() -> None:
    with pytest.raises(InternalRecordError):
        encode_barrier_set([], [], 1, 1, "w")
    with pytest.raises(InternalRecordError):
        encode_barrier_set(["s-0"], [1, 2], 1, 1, "w")
    origin = read_origin(_set_record()[4])
    with pytest.raises(InternalRecordError, match=r"1\.\.524288 bytes"):
        decode_barrier_set(origin, b"x" * (512 * 1024 + 1))
