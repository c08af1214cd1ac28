"""Redistributing one stage's keyed state over a new number of tasks, streaming.

The old tasks are read one after the other, each table row by row as stored (encoded
key and value bytes, :mod:`kstream.state.keys`, :mod:`kstream.state.valueformat`): the
record key is decoded from the row's key (its place: :mod:`kstream.rescale.layout`),
the operator's partitioner names the new task (:mod:`kstream.rescale.routing`), and
the row's bytes go to that task's writer unchanged (values, TTL write times and all).
Nothing but a row at a time, the small non-keyed entries (``meta``, ``schemas``) and a
bounded cache of key -> task is held in memory; the writers write through to RocksDB.

Pure: readers and writers are interfaces (:class:`OldTask`, :class:`NewTask`); the
store and RocksDB side is :mod:`kstream.rescale.savepoint`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kstream.rescale.layout import COPY, META, RescaleError, key_index, merge_meta
from kstream.rescale.routing import OperatorRoute
from kstream.state.base import StateKey
from kstream.state.keys import KeyEncodingError, decode_key

__all__ = ["NewTask", "OldTask", "StageCounts", "redistribute"]

TASK_PREFIX = "task."
CACHE_KEYS = 200_000  # record key -> new task, cleared when full


class OldTask(Protocol):
    """One task's state as it was taken."""

    task_id: str

    def table_names(self) -> list[str]: ...

    def raw_rows(self, table: str) -> Iterator[tuple[bytes, bytes]]:
        """The table's rows in key order, as stored."""
        ...

    def entries(self, table: str) -> dict[StateKey, Any]:
        """A small table's rows decoded (``meta``, ``task.*``)."""
        ...


class NewTask(Protocol):
    """One new task's state being written."""

    def put_raw(self, table: str, key: bytes, value: bytes) -> None: ...

    def put(self, table: str, key: StateKey, value: Any) -> None: ...


@dataclass
class StageCounts:
    """What a stage's redistribution moved: rows per new task and per table."""

    rows: list[int]
    tables: dict[str, int] = field(default_factory=dict)


def _operator_of(table: str, ids: Sequence[str]) -> str | None:
    for sid in ids:  # longest first: ids may contain dots (``stage1.window0``)
        if table.startswith(sid + "."):
            return sid
    return None


def redistribute(
    stage: str,
    old: Iterable[OldTask],
    routes: Mapping[str, OperatorRoute],
    targets: Sequence[NewTask],
) -> StageCounts:
    """Write the keyed state of ``old`` (every old task of ``stage``, read one at a time)
    into ``targets`` (the new tasks, by index): each row to the task its operator's
    partitioner names for its record key over ``len(targets)`` partitions; non-keyed
    entries merged (:func:`kstream.rescale.layout.merge_meta`) or copied to every new
    task. RescaleError naming the operator where that is not sound."""
    n = len(targets)
    ids = sorted((sid for sid, r in routes.items() if r.stage == stage), key=len, reverse=True)
    counts = StageCounts([0] * n)
    metas: dict[str, list[tuple[str, dict[StateKey, Any]]]] = {}
    copies: dict[str, dict[bytes, bytes]] = {}
    excluded: dict[str, list[int]] = {}  # table -> rows per new task (sliding windows)
    caches: dict[str, dict[Any, int]] = {}  # per operator: record key -> new task
    for task in old:
        for table in task.table_names():
            if table.startswith(TASK_PREFIX):
                if table == "task.firing" and task.entries(table):
                    raise RescaleError(
                        f"task {task.task_id} was firing windows in slices when this state "
                        f"was taken: take the savepoint again (kstream savepoint --stop)"
                    )
                continue  # task.watermarks: input positions' business (savepoint module)
            sid = _operator_of(table, ids)
            if sid is None:
                raise RescaleError(
                    f"task {task.task_id} holds table {table!r} of no stateful operator of "
                    f"{stage} in the state's description: it cannot be routed"
                )
            route = routes[sid]
            suffix = table[len(sid) + 1 :]
            at = key_index(sid, route.kind, suffix)
            if at == META:
                metas.setdefault(sid, []).append((task.task_id, task.entries(table)))
                continue
            if at == COPY:
                copies.setdefault(table, {}).update(task.raw_rows(table))
                continue
            per_task = [0] * n
            partition = route.partition
            cache = caches.setdefault(sid, {})
            for k, v in task.raw_rows(table):
                try:
                    rk = decode_key(k)[at]
                except (KeyEncodingError, IndexError) as e:
                    raise RescaleError(
                        f"operator {sid!r}: a key of its table {suffix!r} in task "
                        f"{task.task_id} is not laid out as expected ({e}); not rescaled"
                    ) from e
                p = cache.get(rk)
                if p is None:
                    if len(cache) >= CACHE_KEYS:
                        cache.clear()
                    p = cache[rk] = partition(rk, n)
                targets[p].put_raw(table, k, v)
                per_task[p] += 1
            for i, c in enumerate(per_task):
                counts.rows[i] += c
            counts.tables[table] = counts.tables.get(table, 0) + sum(per_task)
            if suffix == "excluded":
                acc = excluded.setdefault(sid, [0] * n)
                for i, c in enumerate(per_task):
                    acc[i] += c
        caches.clear()  # (a key lives in one old task: its entries are all seen by now)
    for table, rows in copies.items():
        for target in targets:
            for k, v in rows.items():
                target.put_raw(table, k, v)
    for sid, entries in metas.items():
        merged = merge_meta(sid, entries)
        for i, target in enumerate(targets):
            for key, value in merged.items():
                target.put(f"{sid}.meta", key, value)
            if excluded.get(sid, [0] * n)[i]:
                target.put(f"{sid}.meta", ("excluded",), excluded[sid][i])
    return counts
