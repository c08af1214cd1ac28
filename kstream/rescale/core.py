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

from kstream.elements.events import MIN_TS
from kstream.rescale.layout import COPY, META, RescaleError, key_index, merge_meta
from kstream.rescale.routing import OperatorRoute
from kstream.state.base import StateKey
from kstream.state.keys import KeyEncodingError, decode_key

__all__ = ["NewTask", "OldTask", "StageCounts", "redistribute"]

TASK_PREFIX = "task."
FIRED_BY_END = ("acc", "timers")  # a window kind's tables keyed by window end first
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
    fired: dict[str, tuple[int, str, int]] = {}  # operator -> (end, task, its watermark)
    seen: list[str] = []
    for task in old:
        seen.append(task.task_id)
        tables = task.table_names()
        wms: dict[str, int] = {}  # this task's operators' watermarks
        for table in tables:
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
            if table == f"{sid}.meta":
                meta = task.entries(table)
                metas.setdefault(sid, []).append((task.task_id, meta))
                if ("wm",) in meta:
                    wms[sid] = int(meta[("wm",)])
        for table in tables:
            sid = _operator_of(table, ids)
            if sid is None or table == f"{sid}.meta":
                continue
            route = routes[sid]
            suffix = table[len(sid) + 1 :]
            at = key_index(sid, route.kind, suffix)
            if at == COPY:
                copies.setdefault(table, {}).update(task.raw_rows(table))
                continue
            assert at != META
            # Windows (and session/sliding timers) are keyed by their end first: one at or
            # below its task's watermark has fired and is kept for allowed lateness.
            wm = wms.get(sid) if route.kind == "window" and suffix in FIRED_BY_END else None
            per_task = [0] * n
            partition = route.partition
            cache = caches.setdefault(sid, {})
            for k, v in task.raw_rows(table):
                try:
                    key = decode_key(k)
                    rk = key[at]
                except (KeyEncodingError, IndexError) as e:
                    raise RescaleError(
                        f"operator {sid!r}: a key of its table {suffix!r} in task "
                        f"{task.task_id} is not laid out as expected ({e}); not rescaled"
                    ) from e
                if wm is not None and key[0] <= wm and key[0] > fired.get(sid, (MIN_TS, "", 0))[0]:
                    fired[sid] = (key[0], task.task_id, wm)
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
    for sid, of_tasks in metas.items():
        have = {t for t, _e in of_tasks}
        merged = merge_meta(sid, [*of_tasks, *((t, {}) for t in seen if t not in have)])
        low = merged.get(("wm",), MIN_TS)
        if sid in fired and fired[sid][0] > low:
            end, where, wm = fired[sid]
            raise RescaleError(
                f"operator {sid!r}: task {where} (watermark {wm}) keeps a fired window ending "
                f"at {end} for allowed lateness, but another task's watermark is {low}: "
                f"at the lowest watermark it would fire again; take the savepoint once "
                f"every task's watermark has passed {end}"
            )
        for i, target in enumerate(targets):
            for key, value in merged.items():
                target.put(f"{sid}.meta", key, value)
            if excluded.get(sid, [0] * n)[i]:
                target.put(f"{sid}.meta", ("excluded",), excluded[sid][i])
    return counts
