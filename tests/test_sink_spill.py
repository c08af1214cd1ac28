"""The exactly-once sink buffer is bounded in memory: past its budget it spills to local
disk, reads the spill back for the commit, deletes it after, and the snapshot still
holds everything (no broker: a fake producer, a file checkpoint store)."""

from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import click
import pytest

from kstream.checkpointstorage.file import FileStore
from kstream.cli.options import ByteSize
from kstream.config import JobConfig
from kstream.kafka.exactly_once_sink import ExactlyOnceSink
from kstream.sinkbuffer.blobdecode import decode_blob
from kstream.sinkbuffer.budget import MemoryBudget
from kstream.sinkbuffer.buffer import EpochBuffer
from kstream.sinkbuffer.epochs import BlobFormatError, OutputRecord
from kstream.sinkbuffer.spill import SegmentedBlob, SpillDir
from kstream.snapshots.restore import read_blob
from kstream.snapshots.upload import SnapshotUploader, read_manifest
from kstream.state.rocksdb import RocksDBBackend
from tests.test_sink_buffer import FakeProducer, _as_produced

BATCH = 2_000  # records per write_columns, as a task's sink batch


def rec(i: int) -> OutputRecord:
    return ("out", None, b"key-%08d" % i, b'{"value": %d, "pad": "%s"}' % (i, b"x" * 40), i, None)


def write(sink: ExactlyOnceSink, start: int, n: int) -> None:
    """Records ``rec(start) .. rec(start + n - 1)`` in column batches of BATCH."""
    for lo in range(start, start + n, BATCH):
        ids = range(lo, min(lo + BATCH, start + n))
        rs = [rec(i) for i in ids]
        sink.write_columns("out", [r[2] for r in rs], [r[3] for r in rs], [r[4] or 0 for r in rs])


def spill_sink(tmp_path: Path, producer: FakeProducer, budget: int) -> ExactlyOnceSink:
    sink = ExactlyOnceSink(
        "shop", "sink-0", "127.0.0.1:1", spill_dir=tmp_path / "spill", memory_budget=budget
    )  # no connection is made
    sink.transactions._producer, sink.attempt = producer, 1
    return sink


def spill_files(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "spill").rglob("*.spill"))


def produced(ids: range) -> list[tuple[object, ...]]:
    return [_as_produced(rec(i)) for i in ids]


def test_output_past_the_budget_is_spilled_read_back_in_order_and_deleted(
    tmp_path: Path,
) -> None:
    p = FakeProducer()
    sink = spill_sink(tmp_path, p, budget=256 * 1024)
    write(sink, 0, 20_000)  # ~2.4 MB estimated: many times the budget
    buf = sink.buffer
    assert buf.spills >= 5 and buf.held <= 256 * 1024
    assert len(spill_files(tmp_path)) == 1  # one file per epoch
    assert buf.open.size == 20_000
    sink.on_barrier(1)
    write(sink, 20_000, 5_000)  # epoch 2 goes on while 1 waits for its checkpoint
    sink.on_barrier(2)
    write(sink, 25_000, 10)  # open epoch 3
    assert len(spill_files(tmp_path)) == 2
    assert sink.on_checkpoint_completed(1) == 20_000
    assert p.sent[:-1] == produced(range(20_000))
    assert p.sent[-1][0] == "shop.commits"
    assert len(spill_files(tmp_path)) == 1  # epoch 1's file is gone, epoch 2's stays
    assert sink.on_checkpoint_completed(2) == 5_000
    assert p.sent[20_001:-1] == produced(range(20_000, 25_000))
    assert spill_files(tmp_path) == []
    assert [r[2] for r in sink.buffer.open.records] == [rec(i)[2] for i in range(25_000, 25_010)]
    sink.close()
    assert list((tmp_path / "spill").iterdir()) == []


class CountingProducer(FakeProducer):
    """Counts what is produced without keeping it (a real producer hands it to librdkafka)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def produce(self, topic: str, value: object = None, key: object = None, **kw: object) -> None:
        self.count += 1


def test_memory_stays_near_the_budget_with_a_large_interval(tmp_path: Path) -> None:
    """200 k output records (~20 MB held in Python objects) in one interval with a 1 MiB
    budget: the traced peak stays a few budgets, not the interval's output."""

    def peak(sink: ExactlyOnceSink) -> int:
        tracemalloc.start()
        try:
            for lo in range(0, 200_000, BATCH):
                n = min(BATCH, 200_000 - lo)
                sink.write_columns(
                    "out",
                    [b"key-%08d" % i for i in range(lo, lo + n)],
                    [b"v" * 60] * n,
                    list(range(lo, lo + n)),
                )
            sink.on_barrier(1)
            blob = sink.snapshot_blob()
            if isinstance(blob, SegmentedBlob):
                blob.close()
            assert sink.on_checkpoint_completed(1) == 200_000
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    budget = 1024 * 1024
    bounded = peak(spill_sink(tmp_path, CountingProducer(), budget))
    unbounded = peak(spill_sink(tmp_path / "u", CountingProducer(), budget=1 << 40))
    assert unbounded > 15 * budget  # the interval's output, all in memory
    assert bounded < 6 * budget, (bounded, unbounded)


def test_snapshot_of_a_spilled_buffer_outlives_the_commit_and_restores_exactly(
    tmp_path: Path,
) -> None:
    first = FakeProducer()
    sink = spill_sink(tmp_path, first, budget=128 * 1024)
    write(sink, 0, 6_000)
    sink.on_barrier(1)
    write(sink, 6_000, 3_000)
    sink.on_barrier(2)  # checkpoint 1 was aborted: epochs 1 and 2 are both in snapshot 2
    write(sink, 9_000, 500)
    blob = sink.snapshot_blob()
    assert isinstance(blob, SegmentedBlob)
    assert sink.on_checkpoint_completed(2) == 9_000  # deletes the spill files ...
    assert spill_files(tmp_path) == []
    path = tmp_path / "blob"
    with open(path, "wb") as f:  # ... while the upload thread still writes the blob
        size = blob.write_to(f)
    blob.close()
    data = path.read_bytes()
    assert size == len(data) == blob.size and data[4] == 3
    epochs = decode_blob(data)
    assert [(e.checkpoint_id, e.size) for e in epochs] == [(1, 6_000), (2, 3_000)]
    again = FakeProducer()
    restored = spill_sink(tmp_path / "r", again, budget=128 * 1024)
    restored.buffer = restored._new_buffer(data)
    assert restored.on_checkpoint_completed(2) == 9_000
    assert again.sent == first.sent
    # a marker covering epoch 1 drops it; epoch 2 alone is published
    third = FakeProducer()
    dropped = spill_sink(tmp_path / "d", third, budget=128 * 1024)
    dropped.buffer = dropped._new_buffer(data)
    assert dropped.buffer.drop_through(1) == 6_000
    assert dropped.on_checkpoint_completed(2) == 3_000
    assert third.sent[:-1] == produced(range(6_000, 9_000))


def test_unspilled_buffers_keep_the_version_2_blob(tmp_path: Path) -> None:
    sink = spill_sink(tmp_path, FakeProducer(), budget=64 * 1024 * 1024)
    write(sink, 0, 1_000)
    sink.on_barrier(1)
    blob = sink.snapshot_blob()
    assert isinstance(blob, bytes) and blob[4] == 2
    assert spill_files(tmp_path) == [] and not (tmp_path / "spill").exists()


def test_a_corrupt_segmented_blob_is_refused(tmp_path: Path) -> None:
    sink = spill_sink(tmp_path, FakeProducer(), budget=64 * 1024)
    write(sink, 0, 4_000)
    sink.on_barrier(1)
    data = sink.buffer.blob()
    assert data[4] == 3 and len(decode_blob(data)) == 1
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x10
    with pytest.raises(BlobFormatError, match="checksum mismatch"):
        decode_blob(bytes(flipped))
    with pytest.raises(BlobFormatError):
        decode_blob(data[:-40] + data[-4:])


def test_the_uploader_writes_a_spilled_blob_into_the_snapshot(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store")
    backend = RocksDBBackend(tmp_path / "task")
    sink = spill_sink(tmp_path, FakeProducer(), budget=64 * 1024)
    write(sink, 0, 5_000)
    sink.on_barrier(1)
    blob = sink.snapshot_blob()
    assert isinstance(blob, SegmentedBlob)
    uploader = SnapshotUploader(store, "shop", "sink-0")
    handle = uploader.upload(backend.snapshot_sync(1), blobs={"sink": blob}).result(timeout=60)
    manifest = read_manifest(store, handle.manifest_path)
    data = read_blob(store, manifest, "sink", handle.manifest_path)
    assert manifest.blobs["sink"].size == len(data) == blob.size
    (epoch,) = EpochBuffer.from_blob(data).sealed
    assert list(epoch.records) == [rec(i) for i in range(5_000)]
    assert not list((tmp_path / "task" / "snapshots").glob(".blob-*"))  # temp file gone
    uploader.close()
    backend.close()
    sink.close()


def test_spill_dirs_of_dead_processes_are_removed(tmp_path: Path) -> None:
    root = tmp_path / "spill"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    stale = root / f"{dead.stdout.strip()}-abcd1234"
    mine = root / f"{os.getpid()}-0000aaaa"
    for d in (stale, mine):
        d.mkdir(parents=True)
        (d / "epoch-1.spill").write_bytes(b"x")
    SpillDir(root)
    assert not stale.exists() and mine.exists()


def test_budget_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="positive memory budget"):
        EpochBuffer(SpillDir(tmp_path), 0)


def test_the_budget_setting_takes_sizes() -> None:
    size = ByteSize()
    assert [size.convert(v, None, None) for v in ("65536", "512KiB", "64MiB", "1GiB")] == [
        65536,
        512 << 10,
        64 << 20,
        1 << 30,
    ]
    for bad in ("0", "12MB", "-1KiB", "lots"):
        with pytest.raises(click.BadParameter):
            size.convert(bad, None, None)
    assert JobConfig("app", "k:9092").sink_buffer_memory == 64 << 20


def test_the_sink_tasks_of_a_worker_share_one_budget(tmp_path: Path) -> None:
    """Four sink tasks sharing a 1 MiB budget: each holds under 1 MiB, together they pass
    it, so the growing ones spill; what they hold together stays under the budget, and every
    record is still published, in order, per task. Closing releases what they held."""
    shared = MemoryBudget(1024 * 1024)
    sinks = []
    for t in range(4):
        s = ExactlyOnceSink(
            "shop", f"sink-{t}", "127.0.0.1:1", spill_dir=tmp_path / f"spill-{t}",
            memory_budget=shared,
        )  # fmt: skip
        s.transactions._producer, s.attempt = FakeProducer(), 1
        sinks.append(s)
    peak = 0
    for lo in range(0, 4_000, BATCH):  # ~0.8 MB estimated per task: alone, none spills
        for s in sinks:
            write(s, lo, BATCH)
            peak = max(peak, shared.held)
    assert sum(s.buffer.spills > 0 for s in sinks) >= 2  # the growing ones spilled
    assert peak <= shared.limit, peak
    assert shared.held == sum(s.buffer.held for s in sinks) <= shared.limit
    for s in sinks:
        s.on_barrier(1)
        assert s.on_checkpoint_completed(1) == 4_000
        assert s.transactions._producer.sent[:-1] == produced(range(4_000))
    assert shared.held == 0  # committed epochs hold nothing
    write(sinks[0], 0, BATCH)
    assert shared.held > 0
    sinks[0].close()
    assert shared.held == 0


def test_alone_a_task_under_the_budget_does_not_spill(tmp_path: Path) -> None:
    shared = MemoryBudget(64 * 1024 * 1024)
    sink = ExactlyOnceSink(
        "shop", "sink-0", "127.0.0.1:1", spill_dir=tmp_path / "spill", memory_budget=shared
    )
    sink.transactions._producer, sink.attempt = FakeProducer(), 1
    write(sink, 0, 4_000)
    assert sink.buffer.spills == 0 and not spill_files(tmp_path)
    assert shared.held == sink.buffer.held > 0
