"""One table of keyed state on RocksDB: a column family behind a write cache.

Keys are encoded with ``kstream.state.keys`` (order-preserving, prefix-friendly),
values as ``kstream.state.valueformat`` says.

A *write cache* sits in front of RocksDB: ``put``/``delete`` land in a per-table
dict of decoded Python objects; ``get`` looks there first. The cache is encoded
into one WriteBatch and written when a table's cache exceeds ``cache_entries``
entries, before that table is scanned, and before a full snapshot. The counters and
deletions written stay readable from memory (the *read cache*: the newest
``cache_entries`` compact ints and tombstones flushed, dropped by a range deletion
over them): a snapshot every second must not turn every counter's next ``get``
into a RocksDB read and a decode (tables without TTL). A worker's snapshot leaves
writing the batches to the checkpoint's thread; until it wrote them they are read
from the table (``_pending``), and scans and later writes wait for it. A delta
snapshot (``kstream.state.delta``) encodes the changes into a delta file instead and
the cache keeps them (``_unflushed``, counted in the cache's bound). Writes skip the
WAL: durability comes from snapshots, never from the live DB (a crashed task restores
from a snapshot, docs/design.md §6.3).

TTL: entries of a table with ``TableSpec.ttl`` whose last write is older than the
TTL (by the injected clock) are invisible to ``get``/``scan``; ``get`` deletes them
lazily and ``purge_expired`` sweeps whole tables (call it from a timer).
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from typing import Any

import rocksdict

from kstream.serde import JsonSerde
from kstream.state.base import NotNow, StateKey, StateTable, TableSpec
from kstream.state.delta import DeltaWriter
from kstream.state.keys import decode_key, encode_key, prefix_upper_bound
from kstream.state.tablehost import NO_CF, StateError, TableHost
from kstream.state.valueformat import (
    HAS_TIME,
    HEADERS,
    INT_BODIES,
    IS_INT,
    IS_NONE,
    SMALL_INTS,
    TIME,
    int_value,
    value_serde_for,
)

_TOMBSTONE: Any = object()
_MISSING: Any = object()

_DROPPED_RANGES = 8  # range deletions checked lazily on read-cache hits, at most


class _Timed:
    """A cached value of a TTL table together with its write time (seconds)."""

    __slots__ = ("at", "value")

    def __init__(self, value: Any, at: float) -> None:
        self.value = value
        self.at = at


class RocksDBTable(StateTable):
    """One column family behind a write cache (``cf`` ``NO_CF``: none yet, the backend
    makes it once the table writes to RocksDB); see the module docstring."""

    def __init__(
        self, backend: TableHost, spec: TableSpec, cf: rocksdict.Rdict, handle: Any
    ) -> None:
        self.name = spec.name
        self.spec = spec
        self._backend = backend
        self._cf: Any = cf
        self._handle: Any = handle
        self._serde = value_serde_for(spec)
        # Ints take the compact body only where the serde would return them as ints.
        self._compact_ints = type(self._serde) is JsonSerde
        self._ttl = spec.ttl
        self._dirty: dict[StateKey, Any] = {}
        # The read cache (no TTL only): entries written by earlier flushes, each with its
        # encoded key (a range deletion drops the entries in its range by it), oldest
        # first, at most ``cache_entries``.
        self._clean: dict[StateKey, Any] = {}
        self._clean_keys: dict[StateKey, bytes] = {}
        # Encoded keys since the last flush: of every key read from RocksDB (a put of it
        # usually follows: its flush or delta reuses it; at most ``2 * cache_entries``
        # of these) and of every entry of ``_unflushed`` (all of them: a range deletion
        # finds the entries in its range by them).
        self._keys: dict[StateKey, bytes] = {}
        # Range deletions since the read cache was last filtered (merged, [lo, hi) each):
        # a cached entry in one of them is dropped when read (checked lazily: a fire
        # in slices deletes a range per slice, each a full pass over the cache).
        self._dropped: list[tuple[bytes, bytes]] = []
        # The cached writes of a snapshot while a thread writes them to RocksDB
        # (``snapshot_sync(background=True)``), read before the read cache and RocksDB.
        self._pending: dict[StateKey, Any] = {}
        # Delta snapshots (``snapshot_sync(deltas=True)``): the cached writes already in
        # a delta file but not yet in RocksDB (read after ``_dirty``; their encoded keys
        # are in ``_keys``), and what changed since the last snapshot besides ``_dirty``:
        # cache dicts a flush wrote to RocksDB and range deletions, in order (only while
        # a base exists).
        self._unflushed: dict[StateKey, Any] = {}
        self._log: list[dict[StateKey, Any] | tuple[bytes, bytes]] = []
        self._limit = backend.cache_entries
        self._room = self._limit  # the write cache's bound less what ``_unflushed`` holds
        # Range deletions since RocksDB last flushed this table's memtable: range
        # tombstones in a memtable slow every scan down until a flush (a fire in slices
        # deletes a range per slice), so a delta snapshot flushes it when there are any.
        self.memtable_ranges = 0
        # A seqlock for ``peek`` (another thread): ``_moving`` is non-zero while entries
        # are between the caches and RocksDB (a flush, a range deletion), ``epoch`` counts
        # such moves done; a peek that saw either change retries under the owner.
        self._moving = 0
        self.epoch = 0

    # -- encoding -------------------------------------------------------------

    def _encode_value(self, value: Any, at: float | None) -> bytes:
        if type(value) is int and self._compact_ints:
            compact = int_value(value)
            if compact is not None:
                if at is None:
                    return compact
                return HEADERS[IS_INT | HAS_TIME] + TIME.pack(int(at * 1000)) + compact[1:]
        header = 0
        body = b""
        if value is None:
            header |= IS_NONE
        else:
            data = self._serde.serialize(value)
            body = data if data is not None else b""
        if at is not None:
            return HEADERS[header | HAS_TIME] + TIME.pack(int(at * 1000)) + body
        return HEADERS[header] + body

    def _decode_value(self, raw: bytes, now: float | None) -> Any:
        """The stored value, or _MISSING if it has expired (``now`` given)."""
        header = raw[0]
        pos = 1
        if header & HAS_TIME:
            if now is not None and self._ttl is not None:
                (ms,) = TIME.unpack_from(raw, 1)
                if now - ms / 1000.0 > self._ttl:
                    return _MISSING
            pos = 9
        if header & IS_NONE:
            return None
        if header & IS_INT:
            unpack = INT_BODIES.get(len(raw) - pos)
            if unpack is None:
                raise StateError(
                    f"table {self.name!r}: corrupt stored value {raw!r} (an int body must "
                    "have 1, 2, 4 or 8 bytes); restore the task's state from a checkpoint"
                )
            return unpack(raw, pos)[0]
        return self._serde.deserialize(raw[pos:])

    # -- StateTable -------------------------------------------------------------

    def get(self, key: StateKey, default: Any = None) -> Any:
        entry = self._dirty.get(key, _MISSING)
        if entry is _MISSING:
            if self._unflushed:
                entry = self._unflushed.get(key, _MISSING)
            elif self._pending:
                entry = self._pending.get(key, _MISSING)
        if entry is not _MISSING:
            if entry is _TOMBSTONE:
                return default
            if self._ttl is None:
                return entry.value if type(entry) is _Timed else entry
            if type(entry) is _Timed:
                if self._backend.clock() - entry.at > self._ttl:
                    self._dirty[key] = _TOMBSTONE
                    return default
                return entry.value
            return entry
        entry = self._clean.get(key, _MISSING)
        if entry is not _MISSING:
            if not self._dropped or not self._was_dropped(key):
                return default if entry is _TOMBSTONE else entry
            del self._clean[key], self._clean_keys[key]  # RocksDB has what is current
        ek = encode_key(key)
        raw = self._cf.get(ek)
        if len(self._keys) < self._limit * 2:
            self._keys[key] = ek  # a put of it usually follows: its flush reuses it
        if raw is None:
            return default
        now = self._backend.clock() if self._ttl is not None else None
        value = self._decode_value(raw, now)
        if value is _MISSING:
            self.delete(key)  # lazy purge of an expired entry
            return default
        return value

    def peek(self, key: StateKey, default: Any = None) -> Any:
        """``get`` without its side effects, from another thread (``StateTable.peek``):
        the caches in the order entries move through them (write cache, delta-logged or
        being checkpointed, read cache, RocksDB), the seqlock around it. TTL tables:
        NotNow."""
        epoch = self.epoch
        if self._moving or self._ttl is not None:
            raise NotNow(self.name)
        entry = self._dirty.get(key, _MISSING)
        if entry is _MISSING:
            entry = self._unflushed.get(key, _MISSING)
        if entry is _MISSING:
            entry = self._pending.get(key, _MISSING)
        if entry is _MISSING:
            entry = self._clean.get(key, _MISSING)
            if entry is not _MISSING and self._dropped:
                ek = self._clean_keys.get(key)
                if ek is None or any(a <= ek < b for a, b in self._dropped):
                    entry = _MISSING  # deleted by a range since: RocksDB has what is current
        if entry is _MISSING:
            try:
                raw = self._cf.get(encode_key(key))
            except Exception as e:  # closed under us, or busy in another thread
                raise NotNow(self.name) from e
            entry = _TOMBSTONE if raw is None else self._decode_value(raw, None)
        if self._moving or self.epoch != epoch:
            raise NotNow(self.name)
        return default if entry is _TOMBSTONE else entry

    def put(self, key: StateKey, value: Any) -> None:
        d = self._dirty
        d[key] = value if self._ttl is None else _Timed(value, self._backend.clock())
        if len(d) > self._room:
            self.flush()

    def delete(self, key: StateKey) -> None:
        d = self._dirty
        d[key] = _TOMBSTONE
        if len(d) > self._room:
            self.flush()

    def scan(self, prefix: StateKey = ()) -> Iterator[tuple[StateKey, Any]]:
        start = encode_key(prefix)
        return self._iterate(start, prefix_upper_bound(start))

    def scan_range(self, start: StateKey, end: StateKey) -> Iterator[tuple[StateKey, Any]]:
        return self._iterate(encode_key(start), encode_key(end))

    def delete_range(self, start: StateKey, end: StateKey) -> None:
        """One RocksDB range deletion; cached writes in the range are dropped with it."""
        lo, hi = encode_key(start), encode_key(end)
        if lo >= hi:
            return
        self._moving += 1
        try:
            self._delete_range(lo, hi)
        finally:
            self._moving -= 1
            self.epoch += 1

    def _delete_range(self, lo: bytes, hi: bytes) -> None:
        if self._dirty:
            self._dirty = {k: v for k, v in self._dirty.items() if not lo <= encode_key(k) < hi}
        if self._unflushed:
            keys, unflushed = self._keys, self._unflushed
            gone = [k for k, ek in keys.items() if lo <= ek < hi]
            for k in gone:
                del keys[k]
                unflushed.pop(k, None)
            self._room = self._limit - len(unflushed)
        if self._clean:
            self._drop_cached(lo, hi)
        if self._backend.logging:
            self._log.append((lo, hi))
        if self._cf is NO_CF:
            return  # RocksDB holds nothing of it
        self.memtable_ranges += 1
        batch = rocksdict.WriteBatch(raw_mode=True)
        batch.delete_range(lo, hi, self._handle)
        self._backend.write(batch)

    # -- internals ------------------------------------------------------------------

    def _iterate(self, start: bytes, end: bytes | None) -> Iterator[tuple[StateKey, Any]]:
        self.flush()  # scans read RocksDB only, so cached writes go there first
        self._backend.settle()
        opts = rocksdict.ReadOptions()
        if end is not None:
            opts.set_iterate_upper_bound(end)
        # One call per entry into rocksdict (the items iterator) instead of four.
        entries = self._cf.items(from_key=start, read_opt=opts)
        decode = self._decode_value
        if self._ttl is not None:
            now = self._backend.clock()
            for k, raw in entries:
                value = decode(raw, now)
                if value is not _MISSING:
                    yield decode_key(k), value
            return
        int_bodies = INT_BODIES
        for k, raw in entries:  # nothing expires: no _MISSING; compact ints inline
            unpack = int_bodies.get(len(raw) - 1) if raw[0] == IS_INT else None
            if unpack is not None:
                yield decode_key(k), unpack(raw, 1)[0]
            else:
                yield decode_key(k), decode(raw, None)

    def flush(self) -> int:
        """Write this table's cached entries to RocksDB in one batch; returns how many.

        The compact ints and deletions written join the read cache: they read back
        exactly as written (other values go through their serde, which may not
        return an equal object, so they leave it), so the cache never changes what
        ``get`` returns. The read cache keeps the newest ``cache_entries`` of them."""
        self._moving += 1  # (peek) from the cache's emptying until RocksDB holds them
        try:
            batch = self.take_batch()
            if batch is None:
                return 0
            n = int(batch.len())  # (a batch written is consumed)
            self._backend.write(batch)
            return n
        finally:
            self._moving -= 1
            self.epoch += 1

    def take_batch(self, *, pending: bool = False) -> rocksdict.WriteBatch | None:
        """The cached writes as one batch (None: none), the cache emptied; the caller
        writes it to RocksDB (``flush``), or (``pending``) has it written by a thread
        while the writes stay readable from ``_pending`` until the backend's ``settle``
        (``RocksDBBackend.snapshot_sync(background=True)``)."""
        self._moving += 1  # (peek) entries move from the caches to ``_pending``/the batch
        try:
            return self._take_batch(pending)
        finally:
            self._moving -= 1
            self.epoch += 1

    def _take_batch(self, pending: bool) -> rocksdict.WriteBatch | None:
        self.materialize()
        dirty = self._dirty
        entries = dirty
        if self._unflushed:  # in delta files already: written along, logged no more
            entries = self._unflushed
            entries.update(dirty)
            self._unflushed, self._room = {}, self._limit
        if not entries:
            return None
        if dirty and self._backend.logging:
            self._log.append(dirty)  # RocksDB changes after the base: the next delta's
        if pending:
            self._pending = entries
        batch = rocksdict.WriteBatch(raw_mode=True)
        put, delete, handle = batch.put, batch.delete, self._handle
        stored = self._stored
        cacheable = self._ttl is None
        compact_ints = self._compact_ints and cacheable
        clean, clean_keys, known = self._clean, self._clean_keys, self._keys
        for key, value in entries.items():
            ek = known.get(key) or clean_keys.get(key) or encode_key(key)
            if type(value) is int and compact_ints:  # counters: inline, no serde
                compact = SMALL_INTS[value + 0x80] if -0x80 <= value < 0x80 else int_value(value)
                if compact is not None:
                    put(ek, compact, handle)
                    clean[key] = value
                    clean_keys[key] = ek
                    continue
            if value is _TOMBSTONE:
                delete(ek, handle)
                if cacheable:
                    clean[key] = value
                    clean_keys[key] = ek
                continue
            put(ek, stored(value), handle)
            if clean and key in clean:  # an older cached value of this key is stale now
                del clean[key], clean_keys[key]
        self._dirty = {}
        self._keys = {}
        excess = len(clean) - self._limit
        if excess > 0:  # the oldest first (insertion order)
            for k in list(islice(clean, excess)):
                del clean[k], clean_keys[k]
        return batch

    def flushed_since_snapshot(self) -> int:
        """Entries cache flushes wrote to RocksDB since the last snapshot (logged for the
        next delta)."""
        return sum(len(c) for c in self._log if type(c) is dict)

    def take_delta(self, out: DeltaWriter) -> None:
        """Write what changed since the last snapshot into ``out``, in order; the write
        cache's entries stay cached (``_unflushed``) instead of going to RocksDB."""
        log, dirty = self._log, self._dirty
        if not log and not dirty:
            return
        out.table(self.name)
        for change in log:
            if isinstance(change, tuple):
                out.delete_range(*change)
            else:
                self._encode_changes(change, out, keep=False)
        self._log = []
        if dirty:
            self._encode_changes(dirty, out, keep=True)
            if self._unflushed:
                self._unflushed.update(dirty)
            else:
                self._unflushed = dirty
            self._dirty = {}
            self._room = self._limit - len(self._unflushed)

    def _encode_changes(
        self, changes: dict[StateKey, Any], out: DeltaWriter, *, keep: bool
    ) -> None:
        """Each change as RocksDB would store it (``keep``: the changes stay cached, so
        their encoded keys go into ``_keys``). Most keys were read from RocksDB before
        their first put, or cached in an earlier delta: one lookup finds them."""
        known = self._keys
        keys: list[Any] = list(map(known.get, changes))
        if None in keys:  # the others: in the read cache, or encoded now
            clean_keys = self._clean_keys
            missing = [k for k, ek in zip(changes, keys, strict=True) if ek is None]
            found = [clean_keys.get(k) or encode_key(k) for k in missing]
            if keep:
                known.update(zip(missing, found, strict=True))
            fill = iter(found).__next__
            keys = [fill() if ek is None else ek for ek in keys]
        value = self._stored
        if self._compact_ints and self._ttl is None:  # counters: inline
            small = SMALL_INTS
            values = [
                small[v + 0x80] if type(v) is int and -0x80 <= v < 0x80 else value(v)
                for v in changes.values()
            ]
        else:
            values = [value(v) for v in changes.values()]
        out.writes(keys, values)

    def _stored(self, value: Any) -> bytes:
        """A cached entry's value as RocksDB stores it; empty for a deletion."""
        if value is _TOMBSTONE:
            return b""
        if type(value) is _Timed:
            return self._encode_value(value.value, value.at)
        return self._encode_value(value, self._backend.clock() if self._ttl is not None else None)

    def _drop_cached(self, lo: bytes, hi: bytes) -> None:
        """Cached entries in ``[lo, hi)`` are gone: note the range (merged with one it
        overlaps or touches); past a few ranges, filter the cache once."""
        merged = []
        for a, b in self._dropped:
            if a <= hi and lo <= b:
                lo, hi = min(a, lo), max(b, hi)
            else:
                merged.append((a, b))
        merged.append((lo, hi))
        if len(merged) <= _DROPPED_RANGES:
            self._dropped = merged
            return
        gone = [k for k, ek in self._clean_keys.items() if any(a <= ek < b for a, b in merged)]
        for k in gone:
            del self._clean[k], self._clean_keys[k]
        self._dropped = []

    def _was_dropped(self, key: StateKey) -> bool:
        ek = self._clean_keys[key]
        return any(a <= ek < b for a, b in self._dropped)

    def materialize(self) -> None:
        """Have the backend make the column family if there is none yet but writes."""
        if self._cf is NO_CF and (self._dirty or self._unflushed or self._log):
            self._cf, self._handle = self._backend.column_family(self.name)

    def _detach(self) -> None:
        """Drop the column-family handles (they keep the DB open); the table is unusable after."""
        self._moving += 1  # for good: a peek says NotNow
        self._clean, self._clean_keys, self._keys, self._dropped = {}, {}, {}, []
        self._pending, self._unflushed, self._log = {}, {}, []
        self._cf = None
        self._handle = None

    def purge_expired(self) -> int:
        """Delete every entry whose TTL has passed; returns how many were deleted."""
        if self._ttl is None:
            return 0
        self.flush()
        if self._cf is NO_CF:
            return 0
        self._backend.settle()
        now = self._backend.clock()
        expired = []
        it = self._cf.iter(rocksdict.ReadOptions())
        it.seek_to_first()
        while it.valid():
            if self._decode_value(it.value(), now) is _MISSING:
                expired.append(it.key())
            it.next()
        for k in expired:  # through the cache: a delta snapshot logs them
            self._dirty[decode_key(k)] = _TOMBSTONE
        self.flush()
        return len(expired)
