"""A worker's barriers and watermarks in one record per partition
(kstream.worker.eventsets): what a downstream task reads of each upstream task is what
it read when each task wrote its own events (no broker: the producer keeps what it is
given, offsets in that order)."""

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
from kstream.kafka.eventsets import MAX_SET_TASKS, decode_set, encode_set
from kstream.kafka.internal import EventKind, InternalRecordError, read_origin, seq_header
from kstream.kafka.internal_batch import decode_records
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


def _router(log: _Log, *, event_sets: bool = True) -> Router:
    dlq = DeadLetterWriter("app", "127.0.0.1:1", OnBadRecord.FAIL)
    return Router(cast(Any, log), dlq, {TOPIC: len(log.logs)}, event_sets=event_sets)


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
    router.write_sets()
    assert [len(p) for p in log.logs] == [1, 1, 1]
    for p in range(3):
        assert read_origin(log.logs[p][0][4]).event is EventKind.BARRIERS
        assert log.read(p) == [
            InternalEvent(f"s-{i}", 1, 0, Barrier(7, 1, 100 + i), router.sets.writer, 0)  # type: ignore[union-attr]
            for i in range(4)
        ]
    router.write_sets()  # nothing more to write
    assert [len(p) for p in log.logs] == [1, 1, 1]


def test_a_tasks_records_after_its_barrier_follow_the_set_and_others_need_not() -> None:
    log = _Log(1)
    router = _router(log)
    a, b = TaskRoute("s-0", 1), TaskRoute("s-1", 1)
    router.route(a, [_records(b"a1"), _barrier(3, 10)])
    router.route(b, [_records(b"b1")])  # before b's barrier: it may precede the set
    router.route(a, [_records(b"a2")])  # after a's barrier: the set goes first
    router.route(b, [_barrier(3, 11), _records(b"b2")])
    router.write_sets()
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
    router.write_sets()
    events = [(it.upstream, it.attempt, it.offset) for it in log.read(0)]
    assert events == [("s-0", 1, 0), ("s-1", 1, 1), ("s-2", 2, 2)]


def test_a_watermark_after_a_barrier_follows_the_set() -> None:
    log = _Log(2)
    router = _router(log)
    a = TaskRoute("s-0", 1)
    router.route(a, [_barrier(3, 10), OutputEvent(TOPIC, True, Watermark(20))])
    router.write_sets()
    assert [len(p) for p in log.logs] == [2, 2]  # the barrier set, then the watermark's
    for p in range(2):
        assert [type(it.event) for it in log.read(p) if isinstance(it, InternalEvent)] == [
            Barrier,
            Watermark,
        ]


def test_a_set_holds_at_most_the_tasks_one_record_can_carry() -> None:
    log = _Log(1)
    router = _router(log)
    n = MAX_SET_TASKS + 5
    for i in range(n):
        router.route(TaskRoute(f"s-{i}", 1), [_barrier(1, i)])
    router.write_sets()
    assert len(log.logs[0]) == 2
    assert [it.upstream for it in log.read(0)] == [f"s-{i}" for i in range(n)]


# ---- the property: each upstream task's items on each partition, as written per task ------

_STEP = st.tuples(
    st.integers(0, 3),  # the task
    st.sampled_from(["records", "barrier", "watermark", "write"]),
    st.lists(st.integers(0, 2), min_size=1, max_size=3),  # partitions of the records
)


def _run(steps: list[tuple[int, str, list[int]]], *, event_sets: bool) -> dict[Any, list[Any]]:
    log = _Log(3)
    router = _router(log, event_sets=event_sets)
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
            router.write_sets()
    router.write_sets()
    seen: dict[Any, list[Any]] = {}
    for p in range(3):
        for it in log.read(p):
            item = it.key if isinstance(it, InternalRecord) else it.event
            seen.setdefault((p, it.upstream), []).append(item)
    return {k: _as_read(v) for k, v in seen.items()}


def _as_read(items: list[Any]) -> list[Any]:
    """What a channel's items change: a watermark superseded before anything else
    came, or one equal to the last, changes nothing (a reader keeps the latest)."""
    out: list[Any] = []
    last: Watermark | None = None
    pending: Watermark | None = None
    for it in items:
        if isinstance(it, Watermark):
            pending = None if it == last else it
            continue
        if pending is not None:
            out.append(pending)
            last, pending = pending, None
        out.append(it)
    return out if pending is None else [*out, pending]


@settings(max_examples=400, deadline=None)
@given(st.lists(_STEP, max_size=40))
def test_each_writer_reads_as_if_it_wrote_its_own_events(
    steps: list[tuple[int, str, list[int]]],
) -> None:
    assert _run(steps, event_sets=True) == _run(steps, event_sets=False)


# ---- the record's validation ----------------------------------------------------------------


def _set_record(**body: Any) -> tuple[Any, ...]:
    headers, value = encode_set(["s-0", "s-1"], [Barrier(5, 1, 1), Barrier(5, 1, 2)], 1, "w1")
    if body:
        value = json.dumps({**json.loads(value), **body}).encode()
    return (None, value, 1, 0, [*headers, seq_header(0)])


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"tasks": ["s-0", "s-0"]}, "distinct task ids"),
        ({"timestamps": [1]}, "timestamps must be 2 integers"),
        ({"timestamps": [1, "2"]}, "timestamps must be 2 integers"),
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
        encode_set([], [], 1, "w")
    with pytest.raises(InternalRecordError):
        encode_set(["s-0"], [Barrier(1, 1, 1), Barrier(1, 1, 2)], 1, "w")
    with pytest.raises(InternalRecordError, match="one checkpoint"):
        encode_set(["s-0", "s-1"], [Barrier(1, 1, 1), Barrier(2, 1, 2)], 1, "w")
    with pytest.raises(InternalRecordError, match="not both"):
        mixed: Any = [Barrier(1, 1, 1), Watermark(2)]
        encode_set(["s-0", "s-1"], mixed, 1, "w")
    origin = read_origin(_set_record()[4])
    with pytest.raises(InternalRecordError, match=r"1\.\.524288 bytes"):
        decode_set(origin, b"x" * (512 * 1024 + 1))


def test_a_watermark_set_keeps_what_each_task_judged() -> None:
    marks = [Watermark(10), Watermark(20, 25), Watermark(30)]
    headers, value = encode_set(["s-0", "s-1", "s-2"], marks, 4, "w")
    items, bad = decode_records([(None, value, 1, 9, [*headers, seq_header(3)])])
    assert bad == []
    assert items == [InternalEvent(f"s-{i}", 4, 9, m, "w", 3) for i, m in enumerate(marks)]
    one, raw = encode_set(["s-0"], [Watermark(10)], 4, "w")
    plain = json.loads(raw)
    assert "judged" not in plain  # none judged ahead: the field is left out
    origin = read_origin([*one, seq_header(0)])
    with pytest.raises(InternalRecordError, match="judged must be 1 integers"):
        decode_set(origin, json.dumps({**plain, "judged": ["x"]}).encode())


# ---- watermarks --------------------------------------------------------------------------------


def _marks(log: _Log, p: int) -> list[tuple[str, Any]]:
    """Each item's task and its key (a record) or timestamp (a barrier or watermark)."""
    out: list[tuple[str, Any]] = []
    for it in log.read(p):
        if isinstance(it, InternalRecord):
            out.append((it.upstream, it.key))
        else:
            assert isinstance(it.event, Barrier | Watermark)
            out.append((it.upstream, it.event.timestamp))
    return out


def test_watermarks_of_tasks_that_write_nothing_share_one_record_per_partition() -> None:
    log = _Log(4)
    router = _router(log)
    for i in range(3):
        router.route(TaskRoute(f"s-{i}", 1), [OutputEvent(TOPIC, True, Watermark(100 + i))])
    assert log.logs == [[], [], [], []]
    router.write_sets()
    assert [len(p) for p in log.logs] == [1, 1, 1, 1]
    assert _marks(log, 3) == [("s-0", 100), ("s-1", 101), ("s-2", 102)]


def test_a_watermark_goes_alone_only_where_the_tasks_next_records_go() -> None:
    log = _Log(4)
    router = _router(log)
    a = TaskRoute("s-0", 1)
    router.route(a, [OutputEvent(TOPIC, True, Watermark(50)), _records(b"x", partition=2)])
    router.route(a, [_records(b"y", partition=2)])  # partition 2 has it already
    assert [len(p) for p in log.logs] == [0, 0, 3, 0]
    assert _marks(log, 2) == [("s-0", 50), ("s-0", b"x"), ("s-0", b"y")]
    router.write_sets()  # the other partitions get it in the set
    assert [_marks(log, p) for p in (0, 1, 3)] == [[("s-0", 50)]] * 3
    assert _marks(log, 2)[-1] == ("s-0", 50)  # again: a reader changes nothing


def test_records_on_every_partition_leave_no_set_to_write() -> None:
    # A job of few partitions: a batch reaches each, so each got the watermark before it.
    log = _Log(2)
    router = _router(log)
    a = TaskRoute("s-0", 1)
    batch = OutputBatch(TOPIC, True, [0, 1], [b"x", b"y"], [b"v", b"v"], [5, 5])
    router.route(a, [OutputEvent(TOPIC, True, Watermark(50)), batch])
    router.write_sets()
    assert router.sets is not None and router.sets.records == 0
    assert [_marks(log, p) for p in (0, 1)] == [
        [("s-0", 50), ("s-0", b"x")],
        [("s-0", 50), ("s-0", b"y")],
    ]


def test_a_barrier_follows_the_watermark_its_task_passed_before_it() -> None:
    log = _Log(2)
    router = _router(log)
    router.route(TaskRoute("s-0", 1), [OutputEvent(TOPIC, True, Watermark(50)), _barrier(1, 60)])
    router.route(TaskRoute("s-1", 1), [_barrier(1, 70), OutputEvent(TOPIC, True, Watermark(80))])
    router.write_sets()
    assert _marks(log, 0) == [("s-0", 50), ("s-0", 60), ("s-1", 70), ("s-1", 80)]


def test_a_restored_task_never_sends_the_attempt_befores_watermark_as_its_own() -> None:
    # A watermark of attempt 1 still waiting when the task is restored to attempt 2
    # (same task id) goes out in a set of attempt 1 (readers of attempt 2 drop it),
    # never on its own under attempt 2 before the restored task's records.
    log = _Log(2)
    router = _router(log)
    router.route(TaskRoute("s-0", 1), [OutputEvent(TOPIC, True, Watermark(900))])
    router.route(TaskRoute("s-0", 2), [_records(b"x", partition=0)])
    items = log.read(0)
    assert [(it.attempt, type(it).__name__) for it in items] == [
        (1, "InternalEvent"),
        (2, "InternalRecord"),
    ]
    assert [(it.attempt, type(it).__name__) for it in log.read(1)] == [(1, "InternalEvent")]
