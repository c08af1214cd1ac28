"""Rescaling a checkpoint's or savepoint's state to new partition counts, in the store.

For every stage whose partition count changes, each old task's snapshot is restored
into a local directory in turn (one at a time: only its own files are downloaded),
read row by row into the new tasks' RocksDB instances (:func:`kstream.rescale.core.redistribute`),
and each new task's state is snapshotted and uploaded as usual
(:class:`kstream.snapshots.upload.SnapshotUploader`): a new task's restore downloads only
its own share. Stages whose count stays keep their snapshots as they are.

Input positions of a rescaled stage (``docs/operations.md``, "Rescaling"):

* a source topic's partition ``p`` that existed keeps its offset and input watermark
  (new task ``p`` reads it, as old task ``p`` did); a partition added to the topic has
  none, so it is read from the job's start position — or, with ``new_positions`` (the
  user's ``--new-partitions-from TIME``), from the offset it names (the first record at
  or after the time) — (the savepoint must have read the old partitions to their end:
  what is left there was placed by the old count); a source stage cannot shrink (a
  Kafka topic's partitions cannot be removed);
* a repartition topic with a new partition count is a new topic: its positions are
  dropped (start the rescaled state under a new app id, whose internal topics are new
  and empty; a savepoint taken with ``--stop`` has nothing in flight in them).

The exactly-once sinks' buffered output of a rescaled task is not carried over: rescale
a savepoint taken with ``kstream savepoint --stop`` (its output is published).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import rocksdict

from kstream.checkpointstorage.base import CheckpointStore
from kstream.checkpointstorage.metadata import CheckpointMetadata, TaskSnapshot
from kstream.checkpointstorage.savepoints import create_savepoint, read_savepoint
from kstream.plan.compat import IncompatibleStateError
from kstream.rescale.core import redistribute
from kstream.rescale.layout import RescaleError
from kstream.rescale.routing import OperatorRoute, routes_of_description
from kstream.snapshots.restore import restore_backend
from kstream.snapshots.upload import SnapshotManifest, SnapshotUploader, read_manifest
from kstream.state.base import StateKey, TableSpec
from kstream.state.keys import decode_key
from kstream.state.rocksdb import RocksDBBackend
from kstream.state.rocksdb_options import cf_options, db_options, write_options
from kstream.state.valueformat import HAS_TIME, INT_BODIES, IS_INT, IS_NONE

__all__ = ["NewPositions", "rescale_checkpoint", "rescale_savepoint", "rescaler"]

NewPositions = Callable[[str, list[int]], dict[int, int]]
"""``(source topic, its added partitions) -> partition -> offset to start reading at``."""

BATCH = 20_000  # rows per RocksDB write batch of a new task
WRITE_BUFFER = 8 << 20  # a new task's memtable per table: state goes to disk past it


def _target_options() -> rocksdict.Options:
    opts = cf_options()
    opts.set_write_buffer_size(WRITE_BUFFER)
    return opts


def _decode_json_value(raw: bytes) -> Any:
    """A value of a JSON table as stored (:mod:`kstream.state.valueformat`)."""
    header, pos = raw[0], 1
    if header & HAS_TIME:
        pos += 8
    if header & IS_NONE:
        return None
    if header & IS_INT:
        return INT_BODIES[len(raw) - pos](raw, pos)[0]
    return json.loads(raw[pos:])


class _Restored:
    """An old task's snapshot restored locally, read raw (read-only)."""

    def __init__(self, task_id: str, directory: Path, tables: list[str]) -> None:
        self.task_id = task_id
        self._db: rocksdict.Rdict | None = None  # none: a task that never wrote state
        if (directory / "db" / "CURRENT").exists():
            self._db = rocksdict.Rdict(
                str(directory / "db"),
                db_options(),
                column_families={n: cf_options() for n in tables},
                access_type=rocksdict.AccessType.read_only(),
            )
        self._tables = tables

    def table_names(self) -> list[str]:
        return list(self._tables)

    def raw_rows(self, table: str) -> Iterator[tuple[bytes, bytes]]:
        if self._db is not None:
            yield from self._db.get_column_family(table).items()

    def entries(self, table: str) -> dict[StateKey, Any]:
        return {decode_key(k): _decode_json_value(v) for k, v in self.raw_rows(table)}

    def close(self) -> None:
        if self._db is not None:
            self._db.close()


class _Target:
    """A new task's RocksDB being written: raw rows in batches, decoded entries at the end."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._db = rocksdict.Rdict(str(directory / "db"), db_options())
        self._db.set_write_options(write_options())
        self._handles: dict[str, Any] = {}
        self._batch = rocksdict.WriteBatch(raw_mode=True)
        self._pending = 0
        self.decoded: list[tuple[str, StateKey, Any]] = []

    def put_raw(self, table: str, key: bytes, value: bytes) -> None:
        handle = self._handles.get(table)
        if handle is None:
            self._db.create_column_family(table, _target_options())
            handle = self._handles[table] = self._db.get_column_family_handle(table)
        self._batch.put(key, value, handle)
        self._pending += 1
        if self._pending >= BATCH:
            self._flush()

    def put(self, table: str, key: StateKey, value: Any) -> None:
        self.decoded.append((table, key, value))

    def _flush(self) -> None:
        if self._pending:
            self._db.write(self._batch)
            self._batch = rocksdict.WriteBatch(raw_mode=True)
            self._pending = 0

    def finish(self) -> RocksDBBackend:
        """The new task's state, whole, as a backend (to snapshot)."""
        self._flush()
        self._handles.clear()  # (a column family handle keeps the DB, and its lock, open)
        self._db.close()
        del self._db
        backend = RocksDBBackend(self.directory)
        for table, key, value in self.decoded:
            backend.table(TableSpec(table)).put(key, value)
        return backend


def _topic_partition(tp: str) -> tuple[str, int]:
    topic, _, p = tp.rpartition(":")
    return topic, int(p)


def _old_tasks(
    store: CheckpointStore,
    handles: list[tuple[str, str]],
    manifests: Mapping[str, SnapshotManifest],
    marks: dict[str, list[list[Any]]],
    workdir: Path,
) -> Iterator[_Restored]:
    """Each old task restored in turn (its input watermarks noted in ``marks``), then
    deleted locally."""
    for task_id, handle in handles:
        local = workdir / "old" / task_id
        backend, _manifest = restore_backend(store, handle, local)
        tables = backend.stored_tables()
        backend.close()
        old = _Restored(task_id, local, tables)
        try:
            marks[task_id] = _watermarks(manifests[task_id], old)
            yield old
        finally:
            old.close()
            shutil.rmtree(local, ignore_errors=True)


def _internal(topic: str, manifest: SnapshotManifest, names: Mapping[str, int]) -> str | None:
    """The repartition topic name (without the app) if ``topic`` is one of ``names``."""
    app = manifest.app_id
    name = topic[len(app) + 1 :] if topic.startswith(app + ".") else None
    return name if name in names else None


def _watermarks(manifest: SnapshotManifest, old: _Restored | None) -> list[list[Any]]:
    if manifest.watermarks is not None:
        return [list(w) for w in manifest.watermarks]
    if old is None or "task.watermarks" not in old.table_names():
        return []
    return [[*k, v] for k, v in old.entries("task.watermarks").items()]


def _added_positions(
    manifests: Mapping[str, SnapshotManifest],
    internal_names: Mapping[str, int],
    old_n: int,
    n: int,
    new_positions: NewPositions | None,
) -> dict[str, dict[int, int]]:
    """Source topic -> its added partitions' start offsets (none without ``new_positions``)."""
    if new_positions is None or n <= old_n:
        return {}
    topics = {
        topic
        for m in manifests.values()
        for tp in m.positions
        if _internal(topic := _topic_partition(tp)[0], m, internal_names) is None
    }
    out = {}
    for topic in sorted(topics):
        try:
            out[topic] = new_positions(topic, list(range(old_n, n)))
        except Exception as e:  # (the brokers asked, by the caller's function)
            raise RescaleError(
                f"where the partitions {topic} gained start is not known: {e} (grow the "
                "topic before the state is rescaled)"
            ) from e
    return out


def rescale_checkpoint(
    store: CheckpointStore,
    meta: CheckpointMetadata,
    partitions: Mapping[str, int],
    *,
    app_id: str,
    label: str,
    workdir: Path,
    routes: Mapping[str, OperatorRoute] | None = None,
    source_partitioner: str = "murmur2",
    new_positions: NewPositions | None = None,
) -> CheckpointMetadata:
    """``meta``'s state with the stages of ``partitions`` (stage -> new count) rescaled,
    each new task's snapshot uploaded as ``app_id``'s ``<task>/<label>`` (module doc).
    ``routes``: the operators' exact routes (a topology's plan); by default from the
    state's description (key serdes by name). ``new_positions``: where a source
    topic's added partitions start (default: the job's start position). RescaleError
    where it is not sound."""
    desc = meta.description
    if desc is None:
        raise RescaleError(
            "this state has no plan description (taken before stable operator ids): its "
            "operators' state cannot be told apart, so it cannot be rescaled"
        )
    stages: dict[str, int] = dict(desc.get("stages") or {})
    internal_names: dict[str, int] = dict(desc.get("internal_topics") or {})
    unknown = sorted(set(partitions) - set(stages))
    if unknown:
        raise RescaleError(
            f"no stage {', '.join(unknown)} in this state (stages: {', '.join(sorted(stages))})"
        )
    tasks = dict(meta.tasks)
    # How each rescaled stage's keys were routed (a later rescale of the same state
    # finds no repartition topic positions to tell it).
    partitioners: dict[str, Any] = dict(desc.get("partitioners") or {})
    new_internal = dict(internal_names)
    for stage, n in sorted(partitions.items()):
        old_n = stages[stage]
        if n < 1:
            raise RescaleError(f"{stage}: a partition count must be at least 1, got {n}")
        if n == old_n:
            continue
        handles = [(f"{stage}-{p}", tasks[f"{stage}-{p}"].handle) for p in range(old_n)]
        manifests = {t: read_manifest(store, h) for t, h in handles if h}
        handles = [(t, h) for t, h in handles if h]

        known: Mapping[str, Any] = desc.get("partitioners") or {}  # (an earlier rescale's)
        reads_internal = set(known.get(stage, {}).get("internal topics", [])) | {
            name
            for m in manifests.values()
            for tp in m.positions
            if (name := _internal(_topic_partition(tp)[0], m, internal_names)) is not None
        }
        if not reads_internal and n < old_n:
            raise RescaleError(
                f"{stage} reads source topics, which cannot lose partitions: it cannot go "
                f"from {old_n} to {n} tasks (rescale a key_by stage instead)"
            )
        partitioner = "crc32" if reads_internal else source_partitioner
        stage_routes = dict(routes) if routes is not None else {}
        if routes is None:
            stage_routes = routes_of_description(desc, {stage: partitioner})
        # (asked first: a topic not grown yet is refused before the state is read)
        added = (
            {}
            if reads_internal
            else _added_positions(manifests, internal_names, old_n, n, new_positions)
        )
        new_ids = [f"{stage}-{q}" for q in range(n)]
        targets = [_Target(workdir / "new" / t) for t in new_ids]
        marks: dict[str, list[list[Any]]] = {}
        olds = _old_tasks(store, handles, manifests, marks, workdir)
        redistribute(stage, olds, stage_routes, targets)
        for p in range(old_n):
            del tasks[f"{stage}-{p}"]
        for q, (task_id, target) in enumerate(zip(new_ids, targets, strict=True)):
            before = manifests.get(f"{stage}-{q}") if q < old_n else None
            positions: dict[str, Any] = {}
            wms: list[list[Any]] = []
            if before is not None:
                positions = {
                    tp: pos
                    for tp, pos in before.positions.items()
                    if _internal(_topic_partition(tp)[0], before, internal_names) is None
                }
                wms = [
                    w
                    for w in marks.get(f"{stage}-{q}", [])
                    if _internal(str(w[0]), before, internal_names) is None
                ]
            elif q >= old_n:  # a partition the source topics gained
                positions = {f"{t}:{q}": offsets[q] for t, offsets in added.items()}
            backend = target.finish()
            try:
                snap = backend.snapshot_sync(meta.checkpoint_id, label)
                uploader = SnapshotUploader(store, app_id, task_id)
                try:
                    handle = uploader.upload_now(snap, positions=positions, watermarks=wms)
                finally:
                    uploader.close()
            finally:
                backend.close()
                shutil.rmtree(target.directory, ignore_errors=True)
            tasks[task_id] = TaskSnapshot(
                handle=handle.manifest_path,
                offsets=positions,
                state_size=handle.bytes_total,
                uploaded_size=handle.bytes_uploaded,
            )
        stages[stage] = n
        partitioners[stage] = {
            "partitioner": partitioner,
            "internal topics": sorted(reads_internal),
        }
        for name in reads_internal:
            new_internal[name] = n
    description = {
        **desc,
        "stages": stages,
        "internal_topics": new_internal,
        "partitioners": partitioners,
    }
    return replace(meta, tasks=tasks, description=description)


def rescale_savepoint(
    store: CheckpointStore,
    source: str,
    destination: str,
    partitions: Mapping[str, int],
    *,
    workdir: Path,
    routes: Mapping[str, OperatorRoute] | None = None,
    source_partitioner: str = "murmur2",
    new_positions: NewPositions | None = None,
) -> tuple[str, CheckpointMetadata]:
    """Write savepoint ``destination`` (``<app>/savepoints/<name>``, or a bare name: of
    the source's app) holding savepoint ``source``'s state rescaled to ``partitions``;
    its path and metadata. The source is left as it is."""
    meta = read_savepoint(store, source)
    source = source.rstrip("/")
    if "/savepoints/" in destination:
        app_id, _, name = destination.rstrip("/").partition("/savepoints/")
    else:
        app_id, name = source.partition("/savepoints/")[0], destination
    label = f"rescale-{name}"
    rescaled = rescale_checkpoint(
        store,
        meta,
        partitions,
        app_id=app_id,
        label=label,
        workdir=workdir,
        routes=routes,
        source_partitioner=source_partitioner,
        new_positions=new_positions,
    )
    path = create_savepoint(store, app_id, name, replace(rescaled, origin=source))
    for snap in rescaled.tasks.values():  # the savepoint has copies of the new manifests
        if snap.handle.endswith(f"/{label}.json") and snap.handle.startswith(f"{app_id}/tasks/"):
            store.delete(snap.handle)
    return path, read_savepoint(store, path)


def rescaler(
    store: CheckpointStore,
    app_id: str,
    checkpoint_id: int,
    source_partitioner: str = "murmur2",
    new_positions: NewPositions | None = None,
) -> Callable[[CheckpointMetadata, str, dict[str, int]], CheckpointMetadata]:
    """What a job starting ``--from-savepoint`` on other partition counts rescales its state
    with (:func:`kstream.checkpointstorage.startfrom.import_start`): the new tasks' snapshots written
    as ``app_id``'s ``rescale-<checkpoint_id>``; IncompatibleStateError naming the
    operator where the state cannot be rescaled."""

    def rescale(
        meta: CheckpointMetadata, label: str, partitions: dict[str, int]
    ) -> CheckpointMetadata:
        try:
            with tempfile.TemporaryDirectory(prefix="kstream-rescale-") as tmp:
                return rescale_checkpoint(
                    store,
                    meta,
                    partitions,
                    app_id=app_id,
                    label=f"rescale-{checkpoint_id}",
                    workdir=Path(tmp),
                    source_partitioner=source_partitioner,
                    new_positions=new_positions,
                )
        except RescaleError as e:
            raise IncompatibleStateError(f"{label} cannot be rescaled to this topology: {e}") from e

    return rescale
