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
delta files. :meth:`SnapshotView.opening` does the same in steps of a fraction of a
millisecond each (:mod:`kstream.state.steps`), for a thread that answers lookups between
them. Scans say NotNow: merging the layers in key order is not done here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from itertools import repeat
from pathlib import Path
from typing import Any, cast

import rocksdict

from kstream.state.base import NotNow, StateKey, StateTable, TableSpec
from kstream.state.delta import DIR, OP_RANGE, decompress_steps, read_delta_blocks
from kstream.state.keys import encode_key
from kstream.state.rocksdb_table import RocksDBTable
from kstream.state.steps import Steps, drain
from kstream.state.tablehost import Clock

SPLIT = 256  # entries of a delta block put in a layer per step (about 0.1 ms)


def _no_clock() -> float:
    return 0.0


# One delta file's changes to one table: key -> (its record's index in the file, value;
# b"": deleted), and its range deletions as (record index, low, high).
Puts = dict[bytes, tuple[int, bytes]]
Ranges = list[tuple[int, bytes, bytes]]
Layer = tuple[str, dict[str, Puts], dict[str, Ranges]]  # (delta file name, puts, ranges)


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
    # The open holds the GIL: open the files on this thread (helper threads waiting for
    # a CPU on a busy machine kept it 4 ms instead of 1.7, up to 80), and read no
    # statistics that only compactions use (a read-only DB compacts nothing).
    opts.set_max_file_opening_threads(1)
    opts.set_skip_stats_update_on_db_open(True)
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
        self, directory: Path | str, base: _Base | None = None, layers: list[Layer] | None = None
    ) -> None:
        """The snapshot in ``directory``, opened now (``base``, ``layers``: what is open of
        it already; the delta files not in ``layers`` are read)."""
        self.directory = Path(directory)
        self._base = base or _Base(self.directory)
        self._layers = drain(_read_layers(self.directory, list(layers or [])))
        self._tables: dict[str, ViewTable] = {}
        names = set(self._base.tables)
        for _, puts, ranges in self._layers:
            names |= set(puts) | set(ranges)
        self._names = sorted(names)

    @classmethod
    def opening(
        cls, directory: Path | str, prev: SnapshotView | None = None
    ) -> Steps[SnapshotView]:
        """A view of the snapshot in ``directory``, opened in steps: on ``prev``'s base
        and delta files when it extends them (the same base, those deltas and more), else
        anew. ``prev`` stays readable. Closed before its end, it leaves nothing open."""
        directory = Path(directory)
        layers: list[Layer] = []
        if prev is not None and prev._extended_by(directory):
            base, layers, opened = prev._base, prev._layers, False
        else:
            base, opened = _Base(directory), True  # (one step: RocksDB opens its files)
        try:
            if opened:
                yield
            layers = yield from _read_layers(directory, layers)
        except BaseException:
            if opened:
                base.close()
            raise
        return cls(directory, base, layers)

    def advance(self, directory: Path | str) -> SnapshotView:
        """``opening(directory, self)`` at once."""
        return drain(SnapshotView.opening(directory, self))

    def _extended_by(self, directory: Path) -> bool:
        names = [n for n, _, _ in self._layers]
        newer = _delta_names(directory)
        return _base_files(directory) == self._base.files and newer[: len(names)] == names

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


def _read_layers(directory: Path, layers: list[Layer]) -> Steps[list[Layer]]:
    """``layers`` and a layer of each delta file of ``directory`` not among them."""
    known = {name for name, _, _ in layers}
    layers = list(layers)
    for name in _delta_names(directory):
        if name in known:
            continue
        where = str(directory / DIR / name)
        content = (directory / DIR / name).read_bytes()
        yield
        data = yield from decompress_steps(content, where)
        puts, ranges = yield from _layer(data, where)
        layers.append((name, puts, ranges))
    return layers


def _layer(data: bytes, where: str) -> Steps[tuple[dict[str, Puts], dict[str, Ranges]]]:
    """One delta's changes by table (``SPLIT`` entries per step: each a few C calls)."""
    puts: dict[str, Puts] = {}
    ranges: dict[str, Ranges] = {}
    for i, table, op, a, b in read_delta_blocks(data, where, SPLIT):
        if op == OP_RANGE:
            ranges.setdefault(table, []).append((i, a, b))
            continue
        puts.setdefault(table, {}).update(zip(a, zip(repeat(i), b), strict=False))
        yield
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
