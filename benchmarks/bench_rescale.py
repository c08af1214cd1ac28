"""Rescale benchmark (issue 45): ``--keys`` keys of a rolling count over ``--old`` tasks
rescaled to ``--new`` tasks from a savepoint in a ``file://`` store, offline
(``kstream.rescale.savepoint.rescale_savepoint``: restore each old task, route every row,
snapshot and upload each new task). Target: 10 M keys from 4 to 16 tasks in <= 60 s.

Prints the time to build the savepoint (not part of the target), the rescale's wall
time, keys/s and the peak RSS of the rescale (the savepoint is built in a child process).

Run: ``python -m benchmarks.bench_rescale --keys 10000000 --old 4 --new 16``
"""

from __future__ import annotations

import argparse
import resource
import shutil
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import rocksdict

from kstream.checkpointstorage.file import FileStore
from kstream.checkpointstorage.metadata import CheckpointMetadata, TaskSnapshot
from kstream.checkpointstorage.savepoints import create_savepoint
from kstream.query.operators import partition_of
from kstream.rescale.savepoint import rescale_savepoint
from kstream.snapshots.upload import SnapshotUploader
from kstream.state.keys import encode_key
from kstream.state.rocksdb import RocksDBBackend
from kstream.state.rocksdb_options import cf_options, db_options, write_options
from kstream.state.valueformat import int_value

APP, OP, TABLE = "bench", "counts", "counts.acc"


def build(root: Path, keys: int, old: int, partitioner: str) -> str:
    """A savepoint of ``old`` tasks holding ``keys`` counters (written raw, fast)."""
    store = FileStore(root / "store")
    dbs = []
    for p in range(old):
        (root / "old" / str(p) / "db").mkdir(parents=True)
        db = rocksdict.Rdict(str(root / "old" / str(p) / "db"), db_options())
        db.set_write_options(write_options())
        db.create_column_family(TABLE, cf_options())
        dbs.append((db, db.get_column_family_handle(TABLE)))
    batches = [rocksdict.WriteBatch(raw_mode=True) for _ in range(old)]
    for i in range(keys):
        key = f"user{i:09d}"
        p = partition_of(key.encode(), old, partitioner)
        value = int_value(i % 1000)
        assert value is not None
        batches[p].put(encode_key((key,)), value, dbs[p][1])
        if batches[p].len() >= 50_000:
            dbs[p][0].write(batches[p])
            batches[p] = rocksdict.WriteBatch(raw_mode=True)
    tasks = {}
    internal = partitioner == "crc32"
    topic = f"{APP}.rep" if internal else "in"
    for p in range(old):
        dbs[p][0].write(batches[p])
        dbs[p][0].close()
    batches.clear()
    dbs.clear()  # (a column family handle keeps its DB, and its lock, open)
    for p in range(old):
        backend = RocksDBBackend(root / "old" / str(p))
        up = SnapshotUploader(store, APP, f"stage1-{p}")
        pos: object = {"stage0-0": 1} if internal else 1
        h = up.upload_now(backend.snapshot_sync(1), positions={f"{topic}:{p}": pos})
        up.close()
        backend.close()
        tasks[f"stage1-{p}"] = TaskSnapshot(h.manifest_path)
        shutil.rmtree(root / "old" / str(p))
    desc = {
        "version": 2,
        "operators": {OP: {"kind": "rolling", "stage": "stage1", "key serde": "str"}},
        "stages": {"stage1": old},
        "internal_topics": {"rep": old} if internal else {},
    }
    return create_savepoint(store, APP, "sp", CheckpointMetadata(1, 0, 1, 2, tasks, desc))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--old", type=int, default=4)
    ap.add_argument("--new", type=int, default=16)
    ap.add_argument("--partitioner", choices=("murmur2", "crc32"), default="murmur2")
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    args = ap.parse_args()
    root = Path(args.dir or tempfile.mkdtemp(prefix="kstream-bench-rescale-"))
    try:
        t0 = time.perf_counter()
        with ProcessPoolExecutor(1) as pool:  # (this process's peak RSS: the rescale's)
            src = pool.submit(build, root, args.keys, args.old, args.partitioner).result()
        store = FileStore(root / "store")
        built = time.perf_counter() - t0
        t0 = time.perf_counter()
        _path, meta = rescale_savepoint(
            store, src, "rescaled", {"stage1": args.new}, workdir=root / "work"
        )
        took = time.perf_counter() - t0
        assert len(meta.tasks) == args.new
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(
            f"keys={args.keys} {args.old}->{args.new} tasks ({args.partitioner}): "
            f"savepoint built in {built:.1f} s; rescaled in {took:.1f} s "
            f"({args.keys / took:,.0f} keys/s); peak RSS {rss:.0f} MiB; "
            f"state {meta.state_size / 2**20:.0f} MiB"
        )
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
