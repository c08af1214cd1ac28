"""State backend benchmark: cache vs raw rocksdict, snapshot sync time, incremental upload, restore.

Prints, for each run and as the median over runs:

* keyed read-modify-write ops/s through the state API (write cache) vs. raw
  rocksdict get+put of the same encoded keys and JSON values, for a hot key set
  and for keys spread uniformly over the whole state;
* synchronous snapshot time at ``--keys`` keys (cache flush + RocksDB checkpoint),
  after 1 % of the keys changed (target <= 50 ms);
* bytes uploaded by the checkpoints of ``--intervals`` successive intervals with
  another 1 % of the keys changed each, as a fraction of the full state: the first
  interval's, the mean over all (compactions included) and the largest (issue 19's
  target: <= 5 %);
* restore time from the task-local copy vs. from the store;
* a window firing's state work: flushing 100 k cached counters, and scanning
  ``--keys`` window accumulators ``(end, start, key) -> count`` through the state
  API vs. iterating the same column family with raw rocksdict.

Run: ``python -m benchmarks.bench_state --keys 1000000 --runs 3``
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import rocksdict

from kstream.checkpointstorage.file import FileStore
from kstream.snapshots.restore import restore_state
from kstream.snapshots.upload import SnapshotUploader
from kstream.state.base import TableSpec
from kstream.state.keys import encode_key
from kstream.state.rocksdb import RocksDBBackend

SPEC = TableSpec("counts")
APP, TASK = "bench", "stage0-0"


def _keys(n_ops: int, space: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(space) for _ in range(n_ops)]


def rmw_state_api(backend: RocksDBBackend, keys: list[int]) -> float:
    """ops/s of get + put (+1) through the state API."""
    t = backend.table(SPEC)
    t0 = time.perf_counter()
    for k in keys:
        key = (k,)
        v = t.get(key)
        t.put(key, {"c": 1} if v is None else {"c": v["c"] + 1})
    backend.flush()  # the cache's work counts
    return len(keys) / (time.perf_counter() - t0)


def rmw_raw(path: Path, keys: list[int], preload: int) -> float:
    """ops/s of get + put (+1) on raw rocksdict with the same key/value encoding."""
    opts = rocksdict.Options(raw_mode=True)
    opts.create_if_missing(True)
    db = rocksdict.Rdict(str(path), opts)
    wo = rocksdict.WriteOptions()
    setattr(wo, "disable_wal", True)  # noqa: B010 - same durability as the backend
    db.set_write_options(wo)
    wb = rocksdict.WriteBatch(raw_mode=True)
    for i in range(preload):
        wb.put(encode_key((i,)), b'{"c":0}')
    db.write(wb)
    dumps, loads = json.dumps, json.loads
    t0 = time.perf_counter()
    for k in keys:
        ek = encode_key((k,))
        raw = db.get(ek)
        v = None if raw is None else loads(raw)
        db.put(ek, dumps({"c": 1} if v is None else {"c": v["c"] + 1}).encode())
    rate = len(keys) / (time.perf_counter() - t0)
    db.close()
    return rate


def firing(work: Path, n_keys: int) -> dict[str, float]:
    """Flush of cached counters and the range scan that fires ``n_keys`` windows."""
    backend = RocksDBBackend(work / "firing")
    t = backend.table(TableSpec("n1.acc"))
    end = 3_600_000
    keys = [(end, 0, f"user{i:07d}".encode()) for i in range(n_keys)]
    for k in keys:
        t.put(k, 1)
    backend.flush()
    for k in keys[:100_000]:  # the cache holds 100 k entries before it flushes itself
        t.put(k, 2)
    t0 = time.perf_counter()
    flushed = t.flush()
    flush_ms = (time.perf_counter() - t0) * 1000 * 100_000 / max(flushed, 1)
    drain = collections.deque
    t0 = time.perf_counter()
    drain(t.scan_range((end,), (end + 1,)), maxlen=0)
    scan_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    drain(t._cf.items(), maxlen=0)  # the same entries, undecoded
    raw_s = time.perf_counter() - t0
    backend.close()
    return {"flush_100k_counters_ms": flush_ms, "fire_scan_s": scan_s, "raw_scan_s": raw_s}


def one_run(
    work: Path, n_keys: int, n_ops: int, seed: int, intervals: int = 10
) -> dict[str, float]:
    out: dict[str, float] = {}
    hot = _keys(n_ops, 10_000, seed)
    uniform = _keys(n_ops, n_keys, seed + 1)

    # 1. Read-modify-write throughput (state holds n_keys keys in both cases).
    backend = RocksDBBackend(work / "task")
    t = backend.table(SPEC)
    t0 = time.perf_counter()
    for i in range(n_keys):
        t.put((i,), {"c": 0})
    backend.flush()
    out["load_s"] = time.perf_counter() - t0
    out["rmw_api_hot_ops"] = rmw_state_api(backend, hot)
    out["rmw_api_uniform_ops"] = rmw_state_api(backend, uniform)
    out["rmw_raw_hot_ops"] = rmw_raw(work / "raw-hot", hot, n_keys)
    shutil.rmtree(work / "raw-hot")
    out["rmw_raw_uniform_ops"] = rmw_raw(work / "raw-uni", uniform, n_keys)
    shutil.rmtree(work / "raw-uni")

    # 2. Full first checkpoint, then 1 % of keys change and a second one.
    store = FileStore(work / "store")
    uploader = SnapshotUploader(store, APP, TASK)
    first = uploader.upload(backend.snapshot_sync(1)).result()
    out["full_sync_ms"] = first.sync_ms
    out["full_upload_ms"] = first.upload_ms
    out["state_bytes"] = first.bytes_total
    rng = random.Random(seed + 2)
    order = list(range(n_keys))
    rng.shuffle(order)
    per = max(1, n_keys // 100)
    shares: list[float] = []
    uploaded = total = 0
    for i in range(intervals):  # another 1 % of the keys each interval
        for k in order[(i * per) % n_keys : (i * per) % n_keys + per]:
            t.put((k,), {"c": -1 - i})
        snap = backend.snapshot_sync(2 + i)  # includes flushing the 1 % from the cache
        second = uploader.upload(snap).result()
        if i == 0:
            out["sync_ms_1pct"] = second.sync_ms
            out["upload_ms_1pct"] = second.upload_ms
        shares.append(second.bytes_uploaded / second.bytes_total)
        uploaded += second.bytes_uploaded
        total += second.bytes_total
    out["uploaded_fraction_1pct"] = shares[0]
    out["uploaded_fraction_mean"] = uploaded / total
    out["uploaded_fraction_max"] = max(shares)
    backend.close()
    uploader.close()

    # 3. Restore: from the task-local copy, then on a "new machine" from the store.
    _, _, local = restore_state(store, second.manifest_path, work / "task")
    _, _, remote = restore_state(store, second.manifest_path, work / "elsewhere")
    assert local.files_downloaded == 0 and remote.files_reused == 0
    out["restore_local_ms"] = local.restore_ms
    out["restore_store_ms"] = remote.restore_ms

    # 4. A window firing's state work.
    out.update(firing(work, n_keys))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--ops", type=int, default=200_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--intervals", type=int, default=10, help="intervals with 1 %% changed")
    p.add_argument("--dir", type=Path, default=None, help="scratch directory (default: a temp dir)")
    args = p.parse_args()
    runs: list[dict[str, float]] = []
    for r in range(args.runs):
        work = Path(tempfile.mkdtemp(prefix="bench-state-", dir=args.dir))
        try:
            res = one_run(work, args.keys, args.ops, seed=r, intervals=args.intervals)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        runs.append(res)
        print(f"run {r + 1}: " + json.dumps({k: round(v, 4) for k, v in res.items()}))
    med: dict[str, Any] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    print(f"\nmedian of {args.runs} runs, {args.keys:,} keys, {args.ops:,} ops per RMW test")
    print(
        f"  RMW ops/s hot keys (10k):   state API+cache {med['rmw_api_hot_ops']:>10,.0f}   raw rocksdict {med['rmw_raw_hot_ops']:>10,.0f}"
    )
    print(
        f"  RMW ops/s uniform ({args.keys:,}): state API+cache {med['rmw_api_uniform_ops']:>10,.0f}   raw rocksdict {med['rmw_raw_uniform_ops']:>10,.0f}"
    )
    print(
        f"  sync snapshot after 1% changed: {med['sync_ms_1pct']:.1f} ms (target <= 50 ms); first full: {med['full_sync_ms']:.1f} ms"
    )
    print(
        f"  uploaded after 1% changed: {100 * med['uploaded_fraction_1pct']:.2f}% of {med['state_bytes'] / 1e6:.1f} MB (target <= 5%); upload {med['upload_ms_1pct']:.0f} ms vs full {med['full_upload_ms']:.0f} ms"
    )
    print(
        f"  {args.intervals} intervals of 1% changed: mean {100 * med['uploaded_fraction_mean']:.2f}%, largest {100 * med['uploaded_fraction_max']:.2f}% of the state (target <= 5%)"
    )
    print(
        f"  restore: local copy {med['restore_local_ms']:.0f} ms, from store {med['restore_store_ms']:.0f} ms"
    )
    print(
        f"  firing {args.keys:,} windows: scan {med['fire_scan_s']:.2f} s (raw rocksdict {med['raw_scan_s']:.2f} s); flush of 100k cached counters {med['flush_100k_counters_ms']:.0f} ms"
    )


if __name__ == "__main__":
    main()
