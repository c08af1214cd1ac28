"""The per-key view a process function gets as ``state``: state handles and timers.

One ``KeyScope`` per operator, rebound to each record's key (no per-record objects).
Layout in the task's keyed state (tables ``n<node>.<name>``):

* ``s.<state>``: value and list states ``(key,)``, map states ``(key, map_key)``;
  with a TTL the stored value is ``[stamp, value]`` (``stamp``: event time of the write)
* ``ttl``: the expiry index ``(stamp + ttl, state, key[, map_key])``, swept as the
  watermark passes (a rewritten entry leaves a stale index entry, skipped then)
* ``et`` / ``pt``: event-time and processing-time timers ``(timestamp, key)``
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from kstream.api.process import ListState, MapState, StateSpec, ValueState
from kstream.elements.events import MAX_TS, MIN_TS
from kstream.operators.stateschema import AvroStateCodec
from kstream.state.base import KeyedStateBackend, StateTable, TableSpec

_MISSING: Any = object()


class _Handle:
    """Shared parts: the table, the scope (current key and time) and TTL."""

    def __init__(
        self,
        scope: KeyScope,
        name: str,
        table: StateTable,
        ttl: int | None,
        codec: AvroStateCodec | None = None,
    ) -> None:
        self.scope = scope
        self.name = name
        self.table = table
        self.ttl = ttl
        self.codec = codec  # Avro-typed state: values stored versioned (stateschema)
        self.plain = ttl is None and codec is None  # the hot path: table values as they are

    def _read(self, skey: tuple[Any, ...]) -> Any:
        raw = self.table.get(skey, _MISSING)
        if raw is not _MISSING and self.ttl is not None:
            raw = _MISSING if raw[0] + self.ttl <= self.scope.watermark else raw[1]
        if raw is _MISSING or self.codec is None:
            return raw
        return self.codec.decode(raw)

    def _write(self, skey: tuple[Any, ...], value: Any) -> None:
        if self.codec is not None:
            value = self.codec.encode(value)
        if self.ttl is None:
            self.table.put(skey, value)
            return
        stamp = self.scope.timestamp
        self.table.put(skey, [stamp, value])
        self.scope._index_ttl(stamp + self.ttl, self.name, skey)

    def _live(self, entries: Iterator[tuple[Any, Any]]) -> Iterator[tuple[Any, Any]]:
        decode = self.codec.decode if self.codec is not None else None
        if self.ttl is None:
            if decode is None:
                yield from entries
            else:
                for k, raw in entries:
                    yield k, decode(raw)
            return
        wm, ttl = self.scope.watermark, self.ttl
        for k, raw in entries:
            if raw[0] + ttl > wm:
                yield k, raw[1] if decode is None else decode(raw[1])


class ValueHandle(_Handle):
    """One value for the current key."""

    def get(self, default: Any = None) -> Any:
        if self.plain:  # the hot path: one table lookup
            return self.table.get((self.scope.key,), default)
        v = self._read((self.scope.key,))
        return default if v is _MISSING else v

    def set(self, value: Any) -> None:
        if self.plain:
            self.table.put((self.scope.key,), value)
        else:
            self._write((self.scope.key,), value)

    def clear(self) -> None:
        self.table.delete((self.scope.key,))


class ListHandle(_Handle):
    """A list for the current key (a copy is returned; write it back with ``set``)."""

    def get(self) -> list[Any]:
        v = self._read((self.scope.key,))
        return [] if v is _MISSING else list(v)

    def append(self, value: Any) -> None:
        self._write((self.scope.key,), [*self.get(), value])

    def extend(self, values: Any) -> None:
        self._write((self.scope.key,), [*self.get(), *values])

    def set(self, values: Any) -> None:
        self._write((self.scope.key,), list(values))

    def clear(self) -> None:
        self.table.delete((self.scope.key,))


class MapHandle(_Handle):
    """A map for the current key, iterated in map-key order."""

    def get(self, map_key: Any, default: Any = None) -> Any:
        v = self._read((self.scope.key, map_key))
        return default if v is _MISSING else v

    def contains(self, map_key: Any) -> bool:
        return self._read((self.scope.key, map_key)) is not _MISSING

    def put(self, map_key: Any, value: Any) -> None:
        self._write((self.scope.key, map_key), value)

    def delete(self, map_key: Any) -> None:
        self.table.delete((self.scope.key, map_key))

    def items(self) -> list[tuple[Any, Any]]:
        return [(k[1], v) for k, v in self._live(self.table.scan((self.scope.key,)))]

    def keys(self) -> list[Any]:
        return [k for k, _ in self.items()]

    def values(self) -> list[Any]:
        return [v for _, v in self.items()]

    def clear(self) -> None:
        for k, _ in list(self.table.scan((self.scope.key,))):
            self.table.delete(k)


_HANDLES: dict[type, type[_Handle]] = {
    ValueState: ValueHandle,
    MapState: MapHandle,
    ListState: ListHandle,
}


class TimerQueue:
    """Timers ``(timestamp, key) -> 0`` in one table, with a cached lower bound of the
    earliest one so most time steps need no state access."""

    def __init__(self, table: StateTable) -> None:
        self.table = table
        first = next(iter(table.scan()), None)
        self.next: int = MAX_TS if first is None else first[0][0]

    def register(self, ts: int, key: Any) -> None:
        self.table.put((ts, key), 0)
        if ts < self.next:
            self.next = ts

    def delete(self, ts: int, key: Any) -> None:
        self.table.delete((ts, key))

    def due(self, upto: int, limit: int) -> list[tuple[int, Any]]:
        """Up to ``limit`` timers with ``timestamp <= upto``, removed from the queue."""
        if upto < self.next:
            return []
        out: list[tuple[int, Any]] = []
        for k, _ in self.table.scan_range((MIN_TS,), (upto + 1,)):
            out.append((k[0], k[1]))
            if len(out) >= limit:
                break
        for k in out:
            self.table.delete(k)
        if not out:
            first = next(iter(self.table.scan()), None)
            self.next = MAX_TS if first is None else first[0][0]
        return out


class KeyScope:
    """What a process function sees as ``state``; see ``kstream.api.process``."""

    def __init__(
        self,
        prefix: str,
        backend: KeyedStateBackend,
        specs: Mapping[str, StateSpec],
        operator: str | None = None,
    ) -> None:
        self.key: Any = None
        self.timestamp: int = MIN_TS
        self.watermark: int = MIN_TS
        self.processing_time: int | None = None
        self.time_domain: str | None = None
        self.timers_allowed = True
        self._handles: dict[str, _Handle] = {}
        for name, spec in specs.items():
            cls = _HANDLES.get(type(spec))
            if cls is None:
                raise TypeError(
                    f"state {name!r}: expected ValueState(), MapState() or ListState(), "
                    f"got {spec!r}"
                )
            table = backend.table(TableSpec(f"{prefix}.s.{name}"))
            codec = None
            schema = getattr(spec, "schema", None)
            if schema is not None:
                history = backend.table(TableSpec(f"{prefix}.schemas"))
                codec = AvroStateCodec(operator or prefix, name, schema, history)
            self._handles[name] = cls(self, name, table, spec.ttl_ms, codec)
        self.ttl_index = backend.table(TableSpec(f"{prefix}.ttl"))
        first = next(iter(self.ttl_index.scan()), None)
        self._next_expiry: int = MAX_TS if first is None else first[0][0]
        self.event_timers = TimerQueue(backend.table(TableSpec(f"{prefix}.et")))
        self.processing_timers = TimerQueue(backend.table(TableSpec(f"{prefix}.pt")))

    def __getitem__(self, name: str) -> Any:
        try:
            return self._handles[name]
        except KeyError:
            raise KeyError(
                f"no state {name!r}: declare it in process(fn, state={{{name!r}: ValueState()}}) "
                f"(declared: {sorted(self._handles)})"
            ) from None

    def register_event_timer(self, timestamp: int) -> None:
        self._check_timers()
        self.event_timers.register(int(timestamp), self.key)

    def delete_event_timer(self, timestamp: int) -> None:
        self.event_timers.delete(int(timestamp), self.key)

    def register_processing_timer(self, timestamp_ms: int) -> None:
        self._check_timers()
        self.processing_timers.register(int(timestamp_ms), self.key)

    def delete_processing_timer(self, timestamp_ms: int) -> None:
        self.processing_timers.delete(int(timestamp_ms), self.key)

    def _check_timers(self) -> None:
        if not self.timers_allowed:
            raise TypeError(
                "a timer was registered but the process function has no on_timer(key, "
                "timestamp, state, out): pass an object or class with process and on_timer"
            )

    # -- TTL ------------------------------------------------------------------------

    def _index_ttl(self, expires: int, name: str, skey: tuple[Any, ...]) -> None:
        self.ttl_index.put((expires, name, *skey), 0)
        if expires < self._next_expiry:
            self._next_expiry = expires

    def expire(self, watermark: int) -> int:
        """Delete the TTL entries whose time passed at ``watermark``; returns how many."""
        if watermark < self._next_expiry:
            return 0
        n = 0
        due = list(self.ttl_index.scan_range((MIN_TS,), (watermark + 1,)))
        for ik, _ in due:
            expires, name, skey = ik[0], ik[1], ik[2:]
            self.ttl_index.delete(ik)
            h = self._handles.get(name)
            if h is None or h.ttl is None:
                continue  # a state no longer declared: leave its data alone
            raw = h.table.get(skey)
            if raw is not None and raw[0] + h.ttl == expires:  # not rewritten since
                h.table.delete(skey)
                n += 1
        first = next(iter(self.ttl_index.scan()), None)
        self._next_expiry = MAX_TS if first is None else first[0][0]
        return n
