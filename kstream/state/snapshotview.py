"""A task's local snapshot read in place, read-only: what a query sidecar answers from.

A local snapshot (``RocksDBBackend.snapshot_sync``) is a RocksDB checkpoint, or a
base's RocksDB files plus the delta files taken since (``deltas/``,
:mod:`kstream.state.delta`). A :class:`SnapshotView` opens the RocksDB files
read-only (no process writes them again: they are hard links of immutable files) and
holds the delta files' changes in memory, one *layer* per file, read newest first; a
point ``get`` is exactly what the restored snapshot would answer
(``RocksDBBackend.apply_delta`` writes the same changes over the same base), decoded
by the same code as a live table's (``RocksDBTable``). ``advance`` to a newer snapshot
on the same base keeps the open DB and the layers read already and reads only the new
delta files. Scans say NotNow: merging the layers in key order is not done here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from itertools import repeat
from pathlib import Path
from typing import Any, cast

import rocksdict

from kstream.state.base import NotNow, StateKey, StateTable, TableSpec
from kstream.state.delta import DIR, OP_RANGE, decompress, read_delta_blocks
from kstream.state.keys import encode_key
from kstream.state.rocksdb_table import RocksDBTable
from kstream.state.tablehost import Clock

CHUNK = 4096  # entries of a delta block put in a layer at a time


def _no_clock() -> float:
    return 0.0


# One delta file's changes to one table: key -> (its record's index in the file, value;
# b"": deleted), and its range deletions as (record index, low, high).
Puts = dict[bytes, tuple[int, bytes]]
Ranges = list[tuple[int, bytes, bytes]]


class _Host:
    """What a ``RocksDBTable`` needs of a backend, for one that is only read."""

    logging = False

    def __init__(self) -> None:
        self.clock: Clock = _no_clock
        self.cache_entries = 0  # (remembers no encoded keys)

    def settle(self) -> None:
        pass

    def write(self, batch: rocksdict.WriteBatch) -> None:
        raise NotNow("a snapshot view is read-only")

    def column_family(self, name: str) -> tuple[rocksdict.Rdict, Any]:
        raise NotNow("a snapshot view is read-only")


CACHE_BYTES = 64 * 1024 * 1024  # the block cache every view of the process shares
_cache: list[rocksdict.Cache] = []


def _read_options() -> rocksdict.Options:
    if not _cache:
        _cache.append(rocksdict.Cache(CACHE_BYTES))
    opts = rocksdict.Options(raw_mode=True)
    opts.set_max_open_files(-1)  # every file opened at once: the directory may go then
    table = rocksdict.BlockBasedOptions()
    table.set_bloom_filter(10, False)  # (the files have filters: read them)
    table.set_block_cache(_cache[0])
    opts.set_block_based_table_factory(table)
    return opts


def _base_files(directory: Path) -> frozenset[tuple[str, int]]:
    """The RocksDB files of a snapshot, by name and inode: the same base's are links
    of the same files."""
    return frozenset((e.name, e.inode()) for e in os.scandir(directory) if e.is_file())


def _delta_names(directory: Path) -> list[str]:
    d = directory / DIR
    return sorted(n for n in os.listdir(d) if not n.endswith(".tmp")) if d.is_dir() else []


class _Base:
    """The RocksDB files of a snapshot, open read-only (shared by the views on them)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.files = _base_files(directory)
        opts = _read_options()
        names = [n for n in rocksdict.Rdict.list_cf(str(directory), opts) if n != "default"]
        self.db = rocksdict.Rdict(
            str(directory),
            opts,
            column_families={n: _read_options() for n in names},
            access_type=rocksdict.AccessType.read_only(False),
        )
        self.tables = {n: RocksDBTable(_Host(), TableSpec(n), self.db.get_column_family(n), None)
                       for n in names}  # fmt: skip

    def close(self) -> None:
        self.tables.clear()
        self.db.close()


class SnapshotView:
    """One local snapshot of a task (module doc); ``close`` when no read uses it, then
    its directory may be deleted."""

    def __init__(
        self, directory: Path | str, base: _Base | None = None,
        layers: list[tuple[str, dict[str, Puts], dict[str, Ranges]]] | None = None,
    ) -> None:  # fmt: skip
        self.directory = Path(directory)
        self._base = base or _Base(self.directory)
        self._layers = list(layers or [])  # (file name, puts by table, ranges by table)
        known = [name for name, _, _ in self._layers]
        for name in _delta_names(self.directory):
            if name in known:
                continue
            where = str(self.directory / DIR / name)
            self._layers.append((name, *_layer((self.directory / DIR / name).read_bytes(), where)))
        self._tables: dict[str, ViewTable] = {}
        names = set(self._base.tables)
        for _, puts, ranges in self._layers:
            names |= set(puts) | set(ranges)
        self._names = sorted(names)

    def advance(self, directory: Path | str) -> SnapshotView:
        """A view of the newer snapshot in ``directory``: on this one's base and delta
        files when it extends them (the same base, these deltas and more), else opened
        anew. This view stays readable (close it once no read uses it)."""
        directory = Path(directory)
        names = [n for n, _, _ in self._layers]
        newer = _delta_names(directory)
        if _base_files(directory) == self._base.files and newer[: len(names)] == names:
            return SnapshotView(directory, self._base, self._layers)
        return SnapshotView(directory)

    @property
    def base_directory(self) -> Path:
        """The directory whose RocksDB files this view reads (keep it until ``close``)."""
        return self._base.directory

    def table_names(self) -> list[str]:
        return self._names

    def table(self, name: str) -> ViewTable:
        t = self._tables.get(name)
        if t is None:
            layers = [(p.get(name, {}), r.get(name, [])) for _, p, r in reversed(self._layers)]
            layers = [(p, r) for p, r in layers if p or r]
            t = self._tables[name] = ViewTable(name, self._base.tables.get(name), layers)
        return t

    def close(self, *, base: bool = True) -> None:
        """Release the view (``base``: also the RocksDB files, unless a newer view from
        ``advance`` still reads them: then pass False)."""
        self._tables.clear()
        if base:
            self._base.close()

    def shares_base(self, other: SnapshotView) -> bool:
        return self._base is other._base


def _layer(content: bytes, where: str) -> tuple[dict[str, Puts], dict[str, Ranges]]:
    """One delta file's changes by table (built in chunks: each a few C calls, so a
    reading thread waits for the GIL a chunk at most)."""
    puts: dict[str, Puts] = {}
    ranges: dict[str, Ranges] = {}
    for i, table, op, a, b in read_delta_blocks(decompress(content, where), where):
        if op == OP_RANGE:
            ranges.setdefault(table, []).append((i, a, b))
            continue
        into = puts.setdefault(table, {})
        for at in range(0, len(a), CHUNK):
            into.update(zip(a[at : at + CHUNK], zip(repeat(i), b[at : at + CHUNK]), strict=False))
    return puts, ranges


class ViewTable(StateTable):
    """A table of a :class:`SnapshotView`: point reads only (scans: NotNow)."""

    def __init__(
        self, name: str, base: RocksDBTable | None, layers: list[tuple[Puts, Ranges]]
    ) -> None:
        self.name = name
        self._base = base or RocksDBTable(_Host(), TableSpec(name), cast(Any, None), None)
        self._layers = layers  # newest first

    def _raw(self, ek: bytes) -> bytes | None:
        for puts, ranges in self._layers:
            put = puts.get(ek)
            cut = -1
            for i, lo, hi in ranges:
                if i > cut and lo <= ek < hi:
                    cut = i
            if put is not None:
                return (put[1] or None) if put[0] > cut else None
            if cut >= 0:
                return None
        cf = self._base._cf
        return None if cf is None else cf.get(ek)

    def get(self, key: StateKey, default: Any = None) -> Any:
        raw = self._raw(encode_key(key))
        return default if raw is None else self._base._decode_value(raw, None)

    peek = get

    def put(self, key: StateKey, value: Any) -> None:
        raise NotNow(self.name)

    def delete(self, key: StateKey) -> None:
        raise NotNow(self.name)

    def scan(self, prefix: StateKey = ()) -> Iterator[tuple[StateKey, Any]]:
        raise NotNow(self.name)

    def scan_range(self, start: StateKey, end: StateKey) -> Iterator[tuple[StateKey, Any]]:
        raise NotNow(self.name)
