"""What one RocksDB per worker would cost a task's full snapshot and restore (issue 41 item 2).

A task's state must be snapshotted, uploaded and restored alone (a moved task restores
only its own). With a DB per task (today), a full snapshot is a RocksDB checkpoint
(hard links to the task's SST files, which the store already holds when unchanged) and
a restore places those files and opens them. With one DB shared by the worker's tasks,
rocksdict (the binding kstream uses) offers no way to take one task's files out of it
or put them into another worker's DB: ``live_files()`` does not say which column family
a file belongs to, and ``ingest_external_file`` refuses a file RocksDB itself wrote
("External file version not found"; RocksDB's ``allow_db_generated_files`` and its
column-family export/import are not exposed). What is left is to *write* a task's state
out: iterate its column families and write each entry with ``SstFileWriter``, then
ingest the file on restore. This measures both ways for one task of N keys, in
interleaved rounds, and prints the medians and their ratio:

    python -m benchmarks.shared_db [--keys 1000000] [--rounds 3]

- *checkpoint*: ``Checkpoint.create_checkpoint`` of the task's own DB (today's full
  snapshot; the memtable flushed first, as the snapshot does);
- *export*: every entry of the task's column family written to one SST file
  (``SstFileWriter``), the Python loop holding the GIL as a checkpoint thread would;
- *ingest*: that file into a fresh DB (the restore's part that replaces placing files).
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from pathlib import Path

import click
import rocksdict


def _options() -> rocksdict.Options:
    opts = rocksdict.Options(raw_mode=True)
    opts.create_if_missing(True)
    return opts


def fill(path: Path, keys: int) -> rocksdict.Rdict:
    """A DB at ``path`` holding ``keys`` entries of 8-byte keys and 16-byte values
    in one column family (a task's window table), flushed to SST files."""
    db = rocksdict.Rdict(str(path), _options())
    table = db.create_column_family("op.counts", _options())
    batch = rocksdict.WriteBatch(raw_mode=True)
    handle = db.get_column_family_handle("op.counts")
    for i in range(keys):
        batch.put(i.to_bytes(8, "big"), b"v" * 16, handle)
        if len(batch) >= 100_000:
            db.write(batch)
            batch = rocksdict.WriteBatch(raw_mode=True)
    db.write(batch)
    table.flush()
    return db


def checkpoint(db: rocksdict.Rdict, target: Path) -> float:
    t0 = time.perf_counter()
    db.get_column_family("op.counts").flush()
    rocksdict.Checkpoint(db).create_checkpoint(str(target))
    return time.perf_counter() - t0


def export(db: rocksdict.Rdict, target: Path) -> tuple[float, int]:
    """Seconds to write the table's entries to ``target``; how many."""
    t0 = time.perf_counter()
    writer = rocksdict.SstFileWriter(_options())
    writer.open(str(target))
    n = 0
    for key, value in db.get_column_family("op.counts").items():
        writer[key] = value
        n += 1
    writer.finish()
    return time.perf_counter() - t0, n


def ingest(sst: Path, path: Path) -> float:
    db = rocksdict.Rdict(str(path), _options())
    table = db.create_column_family("op.counts", _options())
    t0 = time.perf_counter()
    table.ingest_external_file([str(sst)])
    elapsed = time.perf_counter() - t0
    db.close()
    return elapsed


def median_spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} s ({min(values):.3f}-{max(values):.3f})"


@click.command()
@click.option("--keys", default=1_000_000, show_default=True, help="Entries of the task.")
@click.option("--rounds", default=3, show_default=True)
def main(keys: int, rounds: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="kstream-shared-db-"))
    try:
        db = fill(root / "task", keys)
        taken: dict[str, list[float]] = {"checkpoint": [], "export": [], "ingest": []}
        for r in range(rounds):
            taken["checkpoint"].append(checkpoint(db, root / f"chk-{r}"))
            seconds, n = export(db, root / f"export-{r}.sst")
            if n != keys:
                raise SystemExit(f"exported {n} entries, expected {keys}")
            taken["export"].append(seconds)
            taken["ingest"].append(ingest(root / f"export-{r}.sst", root / f"restored-{r}"))
        db.close()
        size = (root / "export-0.sst").stat().st_size
        print(f"one task of {keys} keys, {rounds} rounds (median, range):")
        for name, values in taken.items():
            print(f"  {name:<10} {median_spread(values)}")
        ratio = statistics.median(taken["export"]) / statistics.median(taken["checkpoint"])
        print(f"  export / checkpoint: {ratio:.0f}x; exported file {size / 1e6:.1f} MB")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
