"""Write-ahead buffer of the exactly-once sink: epoch states and the blob format (no broker)."""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kstream.config import Guarantee
from kstream.kafka.clients import Producer
from kstream.kafka.commits import CommitMarker, marker_partition
from kstream.kafka.exactly_once_sink import ExactlyOnceSink
from kstream.kafka.sink import AtLeastOnceSink, Sink
from kstream.names import sink_transactional_id
from kstream.sinkbuffer.blob import encode_blob
from kstream.sinkbuffer.blobdecode import decode_blob
from kstream.sinkbuffer.buffer import EpochBuffer
from kstream.sinkbuffer.epochs import (
    ColumnBatch,
    Epoch,
    EpochState,
    OutputRecord,
    SinkError,
    SinkStateError,
)
from tests.test_sink_blob import _alike_record, _contents, rec

# ---- epoch state machine


def test_epoch_moves_open_sealed_committed() -> None:
    e = Epoch()
    e.append(rec(1))
    e.seal(4)
    assert (e.state, e.checkpoint_id) == (EpochState.SEALED, 4)
    e.mark_committed()
    assert e.state is EpochState.COMMITTED


def test_epoch_refuses_illegal_transitions() -> None:
    e = Epoch()
    with pytest.raises(SinkStateError, match="open -> committed"):
        e.mark_committed()
    e.seal(1)
    with pytest.raises(SinkStateError, match="sealed -> sealed"):
        e.seal(2)
    with pytest.raises(SinkStateError, match="cannot add"):
        e.append(rec(1))
    e.mark_committed()
    with pytest.raises(SinkStateError, match="committed -> committed"):
        e.mark_committed()


def test_records_between_barriers_form_the_epoch() -> None:
    buf = EpochBuffer()
    buf.append(rec(1))
    buf.extend([rec(2), rec(3)])
    buf.seal(1)
    buf.append(rec(4))
    buf.seal(2)
    buf.append(rec(5))  # open epoch: not in any snapshot yet
    assert [(e.checkpoint_id, [r[2] for r in e.records]) for e in buf.sealed] == [
        (1, [b"k1", b"k2", b"k3"]),
        (2, [b"k4"]),
    ]
    assert [r[2] for r in buf.open.records] == [b"k5"]
    # the blob holds the sealed epochs only
    assert [(e.checkpoint_id, len(e.records)) for e in decode_blob(buf.blob())] == [(1, 3), (2, 1)]


def test_barrier_ids_must_increase() -> None:
    buf = EpochBuffer()
    buf.seal(5)
    with pytest.raises(SinkStateError, match="barrier 5 is not above"):
        buf.seal(5)
    with pytest.raises(SinkStateError, match="barrier 3 is not above"):
        buf.seal(3)


def test_completion_commits_epochs_at_or_below_and_subsumes_aborted_ones() -> None:
    buf = EpochBuffer()
    for cp in (1, 2, 3):
        buf.append(rec(cp))
        buf.seal(cp)
    due = buf.due(2)  # checkpoint 1 was aborted; completion of 2 subsumes it
    assert [e.checkpoint_id for e in due] == [1, 2]
    buf.committed(due, 2)
    assert [e.state for e in due] == [EpochState.COMMITTED, EpochState.COMMITTED]
    assert [e.checkpoint_id for e in buf.sealed] == [3]
    assert buf.last_committed == 2
    with pytest.raises(SinkStateError, match="barrier 2 is not above"):
        buf.seal(2)


def test_drop_through_marker() -> None:
    buf = EpochBuffer()
    for cp in (3, 4, 6):
        buf.extend([rec(cp), rec(cp + 100)])
        buf.seal(cp)
    assert buf.drop_through(4) == 4
    assert [e.checkpoint_id for e in buf.sealed] == [6]
    assert buf.last_committed == 4


# ---- names and markers


def test_transactional_id_and_marker_codec() -> None:
    assert sink_transactional_id("shop", "sink-3") == "shop.sink.sink-3"
    m = CommitMarker("sink-3", 12, 2)
    assert m.encode() == b'{"task":"sink-3","checkpoint":12,"attempt":2}'
    assert CommitMarker.decode(m.encode()) == m
    with pytest.raises(SinkError, match="malformed commit marker"):
        CommitMarker.decode(b'{"task":"x","checkpoint":"12","attempt":1}')
    with pytest.raises(SinkError, match="malformed commit marker"):
        CommitMarker.decode(b"not json")
    assert marker_partition("sink-3", 1) == 0
    assert marker_partition("sink-3", 8) == zlib.crc32(b"sink-3") % 8


def test_exactly_once_sink_refuses_to_commit_before_recover() -> None:
    from kstream.kafka.exactly_once_sink import ExactlyOnceSink

    sink = ExactlyOnceSink("shop", "sink-0", "127.0.0.1:1")  # no connection is made
    sink.write(rec(1))
    sink.on_barrier(1)
    with pytest.raises(SinkStateError, match="recover\\(\\) must run before committing"):
        sink.on_checkpoint_completed(1)
    assert sink.transactional_id == "shop.sink.sink-0"
    assert [e.checkpoint_id for e in decode_blob(sink.buffer_blob())] == [1]


# ---- column batches: chunks of an epoch


def batch(topic: str, *ids: int) -> ColumnBatch:
    """The records ``rec(i, topic)`` for ``ids`` as a column batch."""
    return ColumnBatch(
        topic,
        [f"k{i}".encode() for i in ids],
        [f"v{i}".encode() for i in ids],
        [1000 + i for i in ids],
    )


def _mixed_buffer() -> EpochBuffer:
    """Epoch 1: records, batches, records, a batch of another topic; epoch 2: batch, record."""
    buf = EpochBuffer()
    buf.append(rec(1))
    buf.append_columns(batch("out", 2, 3))
    buf.append_columns(batch("out", 4))
    buf.extend([rec(5), ("x", 2, None, b"v", None, [("h", b"1")])])
    buf.append_columns(batch("other", 6, 7))
    buf.seal(1)
    buf.append_columns(batch("out", 8))
    buf.append(rec(9))
    buf.seal(2)
    return buf


_MIXED: list[tuple[int, list[OutputRecord]]] = [
    (
        1,
        [
            rec(1),
            rec(2),
            rec(3),
            rec(4),
            rec(5),
            ("x", 2, None, b"v", None, [("h", b"1")]),
            rec(6, "other"),
            rec(7, "other"),
        ],
    ),
    (2, [rec(8), rec(9)]),
]


def test_column_batches_and_records_mix_in_write_order() -> None:
    buf = _mixed_buffer()
    assert _contents(buf.sealed) == _MIXED
    assert [e.size for e in buf.sealed] == [8, 2] == [len(e.records) for e in buf.sealed]
    # a record after records joins their chunk; a batch is a chunk of its own
    assert [type(c).__name__ for c in buf.sealed[0].chunks] == [
        "list",
        "ColumnBatch",
        "ColumnBatch",
        "list",
        "ColumnBatch",
    ]
    records = buf.sealed[0].records
    assert records[1] == rec(2) and records[-1] == rec(7, "other") and records[5][0] == "x"
    assert records[2:4] == [rec(3), rec(4)]
    with pytest.raises(IndexError):
        records[8]


def test_a_column_batch_is_kept_by_reference_and_empty_ones_are_dropped() -> None:
    e = Epoch()
    b = batch("out", 1, 2)
    e.append_columns(b)
    e.append_columns(ColumnBatch("out", [], [], []))
    assert e.chunks == [b] and isinstance(e.chunks[0], ColumnBatch)
    assert e.chunks[0].keys is b.keys and e.size == 2
    with pytest.raises(ValueError, match="2 keys, 1 values and 2 timestamps"):
        ColumnBatch("out", [b"a", b"b"], [b"v"], [1, 2])
    e.seal(1)
    with pytest.raises(SinkStateError, match="cannot add"):
        e.append_columns(batch("out", 3))


def test_mixed_chunks_round_trip_through_the_blob_unchanged() -> None:
    buf = _mixed_buffer()
    blob = buf.blob()
    assert _contents(decode_blob(blob)) == _MIXED
    # the format is that of the same records written one by one
    same = []
    for cp, records in _MIXED:
        e = Epoch(records=records)
        e.seal(cp)
        same.append(e)
    assert blob == encode_blob(same)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.lists(
            st.tuples(
                st.sampled_from(["a", "b"]),
                st.lists(
                    st.tuples(
                        st.sampled_from([None, b"", b"k"]),
                        st.sampled_from([None, b"v", b"vv"]),
                        st.sampled_from([0, 1, -(2**63)]),
                    ),
                    max_size=4,
                ),
            )
            | st.lists(_alike_record, min_size=1, max_size=3),
            max_size=4,
        ),
        max_size=3,
    )
)
def test_chunked_epochs_encode_like_their_records(epochs_chunks: list[list[Any]]) -> None:
    chunked, flat = [], []
    for cp, chunks in enumerate(epochs_chunks, 1):
        e = Epoch()
        for c in chunks:
            if isinstance(c, tuple):
                topic, rows = c
                e.append_columns(
                    ColumnBatch(
                        topic, [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]
                    )
                )
            else:
                e.extend(c)
        e.seal(cp)
        chunked.append(e)
        f = Epoch(records=list(e.records))
        f.seal(cp)
        flat.append(f)
    blob = encode_blob(chunked)
    assert blob == encode_blob(flat)
    assert _contents(decode_blob(blob)) == [(e.checkpoint_id, list(e.records)) for e in flat]


def test_a_blob_of_column_batches_decodes_to_a_column_batch() -> None:
    e = Epoch()
    e.append_columns(batch("out", 1, 2))
    e.append_columns(ColumnBatch("out", [None, b"k"], [b"v", None], [5, 5]))
    e.seal(3)
    (back,) = decode_blob(encode_blob([e]))
    assert [type(c) for c in back.chunks] == [ColumnBatch]
    assert back.records == list(e.records)
    # anything else a batch cannot hold decodes to records
    r = Epoch(records=[rec(1), ("out", 0, b"k", b"v", 1, None)])
    r.seal(4)
    (back,) = decode_blob(encode_blob([r]))
    assert [type(c) for c in back.chunks] == [list]


def test_counts_due_committed_and_drop_through_with_column_batches() -> None:
    buf = EpochBuffer()
    for cp in (3, 4, 6):
        buf.append_columns(batch("out", cp, cp + 100))
        buf.append(rec(cp + 200))
        buf.seal(cp)
    buf.seal(7)  # empty
    assert [e.size for e in buf.due(6)] == [3, 3, 3]
    assert not buf.sealed[-1].records and buf.sealed[0].records
    assert buf.drop_through(4) == 6
    assert [e.checkpoint_id for e in buf.sealed] == [6, 7]
    due = buf.due(7)
    buf.committed(due, 7)
    assert buf.sealed == [] and [e.state for e in due] == [EpochState.COMMITTED] * 2
    assert buf.last_committed == 7


# ---- publishing (a fake producer: no broker)


class FakeProducer:
    """Records what is produced; ``full`` makes that many produce calls raise BufferError."""

    def __init__(self, full: int = 0) -> None:
        self.sent: list[tuple[Any, ...]] = []
        self.polls: list[float] = []
        self.full = full
        self.transactions: list[str] = []

    def produce(self, topic: str, value: Any = None, key: Any = None, **kw: Any) -> None:
        if self.full:
            self.full -= 1
            raise BufferError("queue full")
        self.sent.append(
            (topic, kw.get("partition", -1), key, value, kw.get("timestamp", 0), kw.get("headers"))
        )

    def poll(self, timeout: float = 0) -> int:
        self.polls.append(timeout)
        return 0

    def list_topics(self, topic: str, timeout: float) -> Any:
        return SimpleNamespace(topics={topic: SimpleNamespace(error=None, partitions={0: None})})

    def begin_transaction(self) -> None:
        self.transactions.append("begin")

    def commit_transaction(self, timeout: float) -> None:
        self.transactions.append("commit")

    def flush(self, timeout: float = 0) -> int:
        return 0


def _as_produced(r: OutputRecord) -> tuple[Any, ...]:
    topic, partition, key, value, ts, headers = r
    return (topic, -1 if partition is None else partition, key, value, ts or 0, headers)


def _eos_sink(producer: FakeProducer) -> ExactlyOnceSink:
    sink = ExactlyOnceSink("shop", "sink-0", "127.0.0.1:1")  # no connection is made
    sink.transactions._producer, sink.attempt = producer, 1
    return sink


def test_exactly_once_publishes_chunks_in_epoch_and_write_order() -> None:
    p = FakeProducer(full=2)
    sink = _eos_sink(p)
    sink.write(rec(1))
    sink.write_columns("out", [b"k2", b"k3"], [b"v2", b"v3"], [1002, 1003])
    sink.write_batch([rec(5), ("x", 2, None, b"v", None, [("h", b"1")])])
    sink.on_barrier(1)
    sink.write_columns("out", [b"k8"], [b"v8"], [1008])
    sink.on_barrier(2)
    sink.write_columns("out", [b"k9"], [b"v9"], [1009])  # open epoch: stays
    assert sink.on_checkpoint_completed(2) == 6
    expected: list[OutputRecord] = [
        rec(1),
        rec(2),
        rec(3),
        rec(5),
        ("x", 2, None, b"v", None, [("h", b"1")]),
        rec(8),
    ]
    assert p.sent[:-1] == [_as_produced(r) for r in expected]
    assert p.sent[-1][0] == "shop.commits"  # the marker last, in the same transaction
    assert p.transactions == ["begin", "commit"]
    assert p.polls == [0.05, 0.05]  # a full queue is served and the record retried
    assert sink.buffer.sealed == [] and sink.buffer.open.size == 1
    assert sink.on_checkpoint_completed(2) == 0


def test_exactly_once_publishes_a_decoded_blob_like_the_buffer() -> None:
    first, again = FakeProducer(), FakeProducer()
    sink = _eos_sink(first)
    sink.buffer = _mixed_buffer()
    blob = sink.buffer_blob()
    assert sink.on_checkpoint_completed(2) == 10
    restored = _eos_sink(again)
    restored.buffer = EpochBuffer.from_blob(blob)
    assert restored.on_checkpoint_completed(2) == 10
    assert again.sent == first.sent
    assert first.sent[:-1] == [_as_produced(r) for _, rs in _MIXED for r in rs]


def test_publishing_serves_the_producer_every_1000_records_across_chunks() -> None:
    p = FakeProducer()
    sink = _eos_sink(p)
    for i in range(5):  # 5 batches of 500: polls after records 1000 and 2000
        ids = range(i * 500, (i + 1) * 500)
        sink.write_columns("out", [b"k"] * 500, [b"v"] * 500, list(ids))
    sink.on_barrier(1)
    assert sink.on_checkpoint_completed(1) == 2500
    assert p.polls == [0, 0]
    assert [s[4] for s in p.sent[:-1]] == list(range(2500))


def test_at_least_once_write_columns_produces_at_once() -> None:
    p = FakeProducer(full=1)
    sink = AtLeastOnceSink.__new__(AtLeastOnceSink)  # a fake producer instead of a client
    sink.task, sink.timeout, sink._producer = "sink-0", 1.0, cast(Producer, p)
    sink.failed, sink.first_error, sink.produced = 0, None, 0
    sink.write_columns("out", [b"k1", None], [b"v1", b"v2"], [1001, 7])
    sink.write(rec(3))
    assert p.sent == [
        ("out", -1, b"k1", b"v1", 1001, None),
        ("out", -1, None, b"v2", 7, None),
        _as_produced(rec(3)),
    ]
    assert sink.produced == 3
    assert p.polls == [0.05, 0]  # the retry after BufferError, then the batch's poll
    with pytest.raises(ValueError, match="1 keys, 2 values"):
        sink.write_columns("out", [b"k"], [b"v", b"w"], [1, 2])


def test_a_sink_without_write_columns_gets_records() -> None:
    class ListSink(Sink):
        guarantee = Guarantee.AT_LEAST_ONCE

        def __init__(self) -> None:
            self.got: list[OutputRecord] = []

        def write(self, record: OutputRecord) -> None:
            self.got.append(record)

        def write_batch(self, records: Iterable[OutputRecord]) -> None:
            self.got.extend(records)

        def on_barrier(self, checkpoint_id: int) -> None: ...

        def buffer_blob(self) -> None: ...

        def on_checkpoint_completed(self, checkpoint_id: int) -> int:
            return 0

        def recover(self, blob: bytes | None, attempt: int) -> int:
            return 0

        def close(self) -> None: ...

    s = ListSink()
    s.write_columns("out", [b"k1", b"k2"], [b"v1", b"v2"], [1001, 1002])
    assert s.got == [rec(1), rec(2)]


def test_a_marker_read_the_cluster_fails_is_the_sinks_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import kstream.kafka.exactly_once_sink as sink_module
    from kstream.kafka.clients import KafkaError, KafkaException
    from kstream.kafka.exactly_once_sink import ExactlyOnceSink
    from kstream.kafka.sink import SinkError

    def destroyed(*_: object) -> None:
        raise KafkaException(KafkaError(KafkaError._DESTROY_BROKER, "Broker handle destroyed"))

    monkeypatch.setattr(sink_module, "read_latest_marker", destroyed)
    sink = ExactlyOnceSink("shop", "sink-0", "127.0.0.1:1")  # no connection is made
    monkeypatch.setattr(sink.transactions, "marker_partitions", lambda: 1)
    with pytest.raises(SinkError, match="sink sink-0: reading its commit marker failed"):
        sink.read_marker()
