"""Delta snapshots: each restores to exactly its state; the upload is the interval's changes."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kstream.checkpointstorage.file import FileStore
from kstream.snapshots.restore import CorruptSnapshotError, restore_backend
from kstream.snapshots.upload import SnapshotUploader, read_manifest
from kstream.state.base import TableSpec
from kstream.state.delta import (
    OP_DELETE,
    OP_PUT,
    SPLIT,
    DeltaError,
    DeltaPolicy,
    DeltaWriter,
    compress,
    decompress,
    read_delta,
    read_delta_blocks,
)
from kstream.state.rocksdb import RocksDBBackend
from tests.test_state_snapshot import APP, SPECS, TASK, contents


def key_of(k: int) -> tuple[str, int]:
    return (f"k{k % 7}", k)


op = st.one_of(
    st.tuples(st.just("put"), st.integers(0, 2), st.integers(0, 30), st.integers(-300, 300)),
    st.tuples(st.just("delete"), st.integers(0, 2), st.integers(0, 30), st.just(0)),
    st.tuples(st.just("merge"), st.integers(0, 2), st.integers(0, 30), st.integers(1, 5)),
    st.tuples(st.just("range"), st.integers(0, 2), st.integers(0, 30), st.integers(0, 12)),
    st.tuples(st.just("scan"), st.integers(0, 2), st.just(0), st.just(0)),
    st.tuples(st.just("snapshot"), st.just(0), st.just(0), st.just(0)),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ops=st.lists(op, max_size=120),
    cache=st.sampled_from([1, 4, 1000]),
    background=st.booleans(),
    max_files=st.sampled_from([1, 3, 1000]),
    min_bytes=st.sampled_from([0, 300, 1 << 20]),
)
@example(  # a cache flush between two snapshots: RocksDB changed, the delta must say so
    ops=[("snapshot", 0, 0, 0), ("put", 0, 3, 5), ("scan", 0, 0, 0)],
    cache=1000, background=False, max_files=1000, min_bytes=1 << 20,
)  # fmt: skip
@example(  # a range deletion over entries an earlier delta holds and the cache still has
    ops=[("snapshot", 0, 0, 0), ("put", 0, 3, 5), ("snapshot", 0, 0, 0), ("range", 0, 0, 12)],
    cache=1000, background=True, max_files=1000, min_bytes=1 << 20,
)  # fmt: skip
def test_every_delta_snapshot_restores_to_exactly_its_contents(
    tmp_path_factory: pytest.TempPathFactory,
    ops: list[tuple[str, int, int, int]],
    cache: int,
    background: bool,
    max_files: int,
    min_bytes: int,
) -> None:
    """Writes, deletions, range deletions, cache flushes (a scan, a full cache) and
    snapshots in any order; full snapshots and deltas mixed as the policy says. The
    state a snapshot holds is the model's at ``snapshot_sync`` (no scan before it: the
    write cache is not empty), and every read in between returns the model's value."""
    root = tmp_path_factory.mktemp("run")
    store = FileStore(root / "store")
    policy = DeltaPolicy(max_files=max_files, min_bytes=min_bytes, ratio=0.0)
    backend = RocksDBBackend(root / "task", cache_entries=cache, deltas=policy)
    uploader = SnapshotUploader(store, APP, TASK)
    model: list[dict[Any, Any]] = [{} for _ in SPECS]
    taken: list[dict[str, list[tuple[Any, Any]]]] = []
    futures = []
    for kind, ti, k, v in [*ops, ("snapshot", 0, 0, 0)]:
        table = backend.table(SPECS[ti])
        key = key_of(k)
        value: Any = v if ti == 0 else ([v] if ti == 1 else bytes([v % 256]))
        if kind == "put":
            table.put(key, value)
            model[ti][key] = value
        elif kind == "delete":
            table.delete(key)
            model[ti].pop(key, None)
        elif kind == "merge":
            old = table.get(key)
            assert old == model[ti].get(key)
            table.put(key, value if old is None else old + value)
            model[ti][key] = table.get(key)
        elif kind == "range":
            lo, hi = key_of(k), key_of(k + v)
            table.delete_range(lo, hi)
            for mk in [mk for mk in model[ti] if lo <= mk < hi]:
                del model[ti][mk]
        elif kind == "scan":
            assert list(table.scan()) == sorted(model[ti].items())
        else:
            taken.append({s.name: sorted(m.items()) for s, m in zip(SPECS, model, strict=True)})
            snap = backend.snapshot_sync(len(taken), background=background, deltas=True)
            futures.append(uploader.upload(snap, positions={"in-0": len(taken)}))
        for i, m in enumerate(model):  # every read sees the model (a range: all of it)
            for kk in range(k, k + v + 1) if kind == "range" else (k,):
                assert backend.table(SPECS[i]).get(key_of(kk)) == m.get(key_of(kk))
    handles = [f.result(timeout=30) for f in futures]
    uploader.close()
    backend.close()
    for i, (handle, expected) in enumerate(zip(handles, taken, strict=True)):
        restored, manifest = restore_backend(store, handle.manifest_path, root / f"restore-{i}")
        assert manifest.positions == {"in-0": i + 1}
        assert contents(restored) == expected
        restored.close()


def _counts(backend: RocksDBBackend, keys: range, bump: int) -> None:
    t = backend.table(SPECS[0])
    for i in keys:
        t.put(("k", i), i + bump)


def test_a_delta_uploads_the_changes_only_and_restores_over_its_base(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store")
    backend = RocksDBBackend(tmp_path / "task")
    uploader = SnapshotUploader(store, APP, TASK)
    _counts(backend, range(20_000), 0)
    full = uploader.upload_now(backend.snapshot_sync(1, deltas=True))
    _counts(backend, range(0, 20_000, 100), 7)  # 1 % of the keys
    delta = uploader.upload_now(backend.snapshot_sync(2, deltas=True))
    backend.table(SPECS[0]).delete_range(("k", 0), ("k", 10))
    third = uploader.upload_now(backend.snapshot_sync(3, deltas=True))
    expected = contents(backend)
    backend.close()
    first_manifest = read_manifest(store, full.manifest_path)
    assert first_manifest.deltas() == []
    manifest = read_manifest(store, delta.manifest_path)
    assert [d.name for d in manifest.deltas()] == ["deltas/000001.kvd"]
    assert {f.sha256 for f in manifest.files} - {f.sha256 for f in first_manifest.files} == {
        manifest.deltas()[0].sha256
    }  # nothing but the delta is new
    assert delta.files_uploaded == 1
    assert delta.bytes_uploaded == manifest.deltas()[0].size < 0.05 * full.bytes_total
    assert json_version(store, third.manifest_path) == 2
    assert [d.name for d in read_manifest(store, third.manifest_path).deltas()] == [
        "deltas/000001.kvd",
        "deltas/000002.kvd",
    ]
    restored, _ = restore_backend(store, third.manifest_path, tmp_path / "elsewhere")
    assert contents(restored) == expected
    table = restored.table(SPECS[0])
    assert table.get(("k", 9)) is None and table.get(("k", 100)) == 107
    assert table.get(("k", 101)) == 101
    restored.close()


def json_version(store: FileStore, path: str) -> int:
    return int(json.loads(store.get_bytes(path))["version"])


def test_the_policy_takes_a_full_snapshot_after_max_files_and_past_the_byte_bound(
    tmp_path: Path,
) -> None:
    store = FileStore(tmp_path / "store")
    policy = DeltaPolicy(max_files=2, min_bytes=10_000, ratio=0.0)
    backend = RocksDBBackend(tmp_path / "task", deltas=policy)
    uploader = SnapshotUploader(store, APP, TASK)
    kinds = []
    for n, changed in enumerate([100, 10, 10, 10, 5_000, 10], start=1):
        _counts(backend, range(changed), n)
        handle = uploader.upload_now(backend.snapshot_sync(n, deltas=True))
        kinds.append(len(read_manifest(store, handle.manifest_path).deltas()))
    backend.close()
    # full, delta, delta, full (2 deltas), full (5 000 changes > 10 kB), delta
    assert kinds == [0, 1, 2, 0, 0, 1]
    restored, _ = restore_backend(store, handle.manifest_path, tmp_path / "elsewhere")
    t = restored.table(SPECS[0])
    assert [t.get(("k", i)) for i in (0, 9, 10, 4_999)] == [6, 15, 15, 4_999 + 5]
    restored.close()


def test_a_ttl_table_keeps_its_write_times_through_a_delta(tmp_path: Path) -> None:
    now = [1000.0]
    spec = TableSpec("sessions", ttl=10.0)
    store = FileStore(tmp_path / "store")
    backend = RocksDBBackend(tmp_path / "task", clock=lambda: now[0])
    uploader = SnapshotUploader(store, APP, TASK)
    backend.table(spec)  # (its column family: the base below holds RocksDB)
    uploader.upload_now(backend.snapshot_sync(1, deltas=True))
    backend.table(spec).put(("old",), 1)
    now[0] = 1008.0
    backend.table(spec).put(("new",), 2)
    handle = uploader.upload_now(backend.snapshot_sync(2, deltas=True))
    assert read_manifest(store, handle.manifest_path).deltas()
    now[0] = 1012.0
    assert backend.purge_expired() == 1
    purged = uploader.upload_now(backend.snapshot_sync(3, deltas=True))
    backend.close()
    restored, _ = restore_backend(
        store, handle.manifest_path, tmp_path / "elsewhere", clock=lambda: 1012.0
    )
    assert restored.table(spec).get(("old",)) is None  # written at 1000: expired at 1012
    assert restored.table(spec).get(("new",)) == 2
    restored.close()
    # The sweep's deletion is in the next delta: gone even for a clock that says it is not due.
    after, _ = restore_backend(
        store, purged.manifest_path, tmp_path / "third", clock=lambda: 1005.0
    )
    assert after.table(spec).get(("old",)) is None and after.table(spec).get(("new",)) == 2
    after.close()


def test_a_corrupt_delta_is_named_and_nothing_of_it_is_applied(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store")
    backend = RocksDBBackend(tmp_path / "task")
    uploader = SnapshotUploader(store, APP, TASK)
    _counts(backend, range(10), 0)
    uploader.upload_now(backend.snapshot_sync(1, deltas=True))
    _counts(backend, range(10), 1)
    handle = uploader.upload_now(backend.snapshot_sync(2, deltas=True))
    backend.close()
    entry = read_manifest(store, handle.manifest_path).deltas()[0]
    target = tmp_path / "store" / entry.path
    target.write_bytes(target.read_bytes()[:-3])
    with pytest.raises(CorruptSnapshotError) as err:
        restore_backend(store, handle.manifest_path, tmp_path / "elsewhere")
    assert err.value.file == entry.name and entry.path in str(err.value.object)


def test_delta_files_round_trip_and_malformed_ones_are_refused() -> None:
    w = DeltaWriter()
    w.table("a")
    w.writes([b"k1", b"k2"], [b"v1", b""])
    w.table("b")
    w.delete_range(b"a", b"z")
    data = w.data()
    assert list(read_delta(data, "x")) == [
        ("a", 2, b"k1", b"v1"),
        ("a", 3, b"k2", b""),
        ("b", 4, b"a", b"z"),
    ]
    for bad in (data[:-1], data[:20], b"KSDELTA2" + data[8:], data + b"\x00", b""):
        with pytest.raises(DeltaError, match="where"):
            list(read_delta(bad, "where"))
    assert decompress(compress(data), "x") == data
    for bad in (compress(data)[:-2], data, b"KSDELTZ1junk"):
        with pytest.raises(DeltaError, match="where"):
            decompress(bad, "where")


@given(st.binary(max_size=64))
def test_any_bytes_after_the_header_are_read_or_refused_with_a_delta_error(junk: bytes) -> None:
    with contextlib.suppress(DeltaError):  # never another exception
        list(read_delta(b"KSDELTA1" + junk, "junk"))


def test_a_snapshot_is_full_when_cache_flushes_wrote_more_than_a_cache_since_the_last(
    tmp_path: Path,
) -> None:
    """State much larger than the write cache: RocksDB already has most changes, so a
    delta would encode them again; a full snapshot does not."""
    store = FileStore(tmp_path / "store")
    backend = RocksDBBackend(tmp_path / "task", cache_entries=10)
    uploader = SnapshotUploader(store, APP, TASK)
    kinds = []
    for n, changed in enumerate([5, 8, 30, 8], start=1):
        _counts(backend, range(changed), n)
        handle = uploader.upload_now(backend.snapshot_sync(n, deltas=True))
        kinds.append(len(read_manifest(store, handle.manifest_path).deltas()))
    backend.close()
    assert kinds == [0, 1, 0, 1]  # 30 changes: 20 went to RocksDB through the cache
    restored, _ = restore_backend(store, handle.manifest_path, tmp_path / "elsewhere")
    assert [restored.table(SPECS[0]).get(("k", i)) for i in (0, 7, 8, 29)] == [4, 11, 11, 32]
    restored.close()


def test_a_large_block_is_read_in_splits_of_the_same_record() -> None:
    w = DeltaWriter()
    w.table("t")
    keys = [b"k%d" % i for i in range(SPLIT * 2 + 5)]
    values = [(b"v%d" % i) if i % 7 else b"" for i in range(len(keys))]
    w.writes(keys, values)
    w.delete_range(b"a", b"b")
    data = w.data()
    got = list(read_delta(data, "x"))
    assert [(k, v) for _, _, k, v in got[:-1]] == list(zip(keys, values, strict=True))
    assert [op for _, op, _, _ in got[:8]] == [OP_DELETE] + [OP_PUT] * 6 + [OP_DELETE]
    blocks = list(read_delta_blocks(data, "x"))
    assert [(i, len(a) if op == OP_PUT else a) for i, _, op, a, _ in blocks] == [
        (1, SPLIT), (1, SPLIT), (1, 5), (2, b"a"),
    ]  # fmt: skip
