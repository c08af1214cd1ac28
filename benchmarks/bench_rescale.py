"""Rescale benchmark (issue 45): ``--keys`` keys of a rolling count over ``--old`` tasks
rescaled to ``--new`` tasks from a savepoint in a ``file://`` store, offline
(``kstream.rescale.savepoint.rescale_savepoint``: restore each old task, route every row,
snapshot and upload each new task). Target: 10 M keys from 4 to 16 tasks in <= 60 s.

Prints the time to build the savepoint (not part of the target), the rescale's wall
time, keys/s and the peak RSS of the rescale (each in a child process of its own);
``--keys`` may list several sizes, ``--plot PNG`` draws the time against keys.

Run: ``python -m benchmarks.bench_rescale --keys 10000000 --old 4 --new 16``, the plot:
``... --keys 1000000,3000000,10000000 --plot benchmarks/plots/rescale.png``
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


def measure(root: Path, keys: int, old: int, new: int, partitioner: str) -> dict[str, float]:
    """One run: the savepoint built, then rescaled offline, each in a child process of its
    own (the rescale's peak RSS is its process's); seconds, keys/s, MiB."""
    t0 = time.perf_counter()
    with ProcessPoolExecutor(1) as pool:
        src = pool.submit(build, root, keys, old, partitioner).result()
    built = time.perf_counter() - t0
    with ProcessPoolExecutor(1) as pool:
        took, rss, state = pool.submit(rescale, root, src, new).result()
    return {
        "keys": keys,
        "old": old,
        "new": new,
        "built_s": built,
        "rescale_s": took,
        "keys_per_s": keys / took,
        "rss_mib": rss,
        "state_mib": state,
    }


def rescale(root: Path, src: str, new: int) -> tuple[float, float, float]:
    """Rescale ``src`` to ``new`` tasks: (seconds, this process's peak RSS MiB, state MiB)."""
    store = FileStore(root / "store")
    t0 = time.perf_counter()
    _path, meta = rescale_savepoint(store, src, "rescaled", {"stage1": new}, workdir=root / "work")
    took = time.perf_counter() - t0
    assert len(meta.tasks) == new
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return took, rss, meta.state_size / 2**20


def plot(rows: list[dict[str, float]], path: Path, note: str) -> bool:
    """Rescale time against keys (the 60 s target at 10 M marked) into ``path``; False
    without matplotlib (the optional ``bench`` extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    xs = [r["keys"] / 1e6 for r in rows]
    ax.plot(xs, [r["rescale_s"] for r in rows], "o-", color="tab:blue", label="rescale (offline)")
    right = max(10.5, max(xs) * 1.05)
    for r in rows:
        left = r["keys"] / 1e6 < right / 2  # (the label inside the axes)
        ax.annotate(
            f"{r['rescale_s']:.1f} s, {r['keys_per_s'] / 1000:.0f} k keys/s, {r['rss_mib']:.0f} MiB",
            (r["keys"] / 1e6, r["rescale_s"]),
            textcoords="offset points", xytext=(8 if left else -8, -12),
            ha="left" if left else "right", fontsize=7,
        )  # fmt: skip
    ax.plot([10], [60], "*", color="tab:red", markersize=12, label="target: 10 M keys <= 60 s")
    ax.axhline(60, color="tab:red", linestyle=":", linewidth=0.8)
    ax.set_xlabel("keys (millions)")
    ax.set_ylabel("s")
    ax.set_ylim(0, max(70.0, max(r["rescale_s"] for r in rows) * 1.15))
    ax.set_xlim(0, right)
    old, new = int(rows[0]["old"]), int(rows[0]["new"])
    ax.set_title(f"Rescaling a rolling count's state {old} -> {new} tasks ({note})", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keys", default="1000000", help="keys, or several: 1000000,10000000")
    ap.add_argument("--old", type=int, default=4)
    ap.add_argument("--new", type=int, default=16)
    ap.add_argument("--partitioner", choices=("murmur2", "crc32"), default="murmur2")
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    ap.add_argument("--plot", default=None, metavar="PNG", help="draw time against keys here")
    ap.add_argument("--note", default="", help="what the plot's title says about the machine")
    args = ap.parse_args()
    rows = []
    for keys in (int(k) for k in args.keys.split(",")):
        root = Path(args.dir or tempfile.mkdtemp(prefix="kstream-bench-rescale-")) / str(keys)
        try:
            r = measure(root, keys, args.old, args.new, args.partitioner)
        finally:
            if args.dir is None:
                shutil.rmtree(root.parent, ignore_errors=True)
        rows.append(r)
        print(
            f"keys={keys} {args.old}->{args.new} tasks ({args.partitioner}): "
            f"savepoint built in {r['built_s']:.1f} s; rescaled in {r['rescale_s']:.1f} s "
            f"({r['keys_per_s']:,.0f} keys/s); peak RSS {r['rss_mib']:.0f} MiB; "
            f"state {r['state_mib']:.0f} MiB",
            flush=True,
        )
    if args.plot and not plot(rows, Path(args.plot), args.note or args.partitioner):
        print("no plot: matplotlib is not installed (pip install -e '.[bench]')")


if __name__ == "__main__":
    main()
