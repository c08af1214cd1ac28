"""Workload 2's state work on one task, in process, without Kafka: what a checkpoint
every interval costs the state backend alone.

One task's share of w2 (``--records`` 250 000 records of ``--keys`` 25 000 users, 1 250
events per event-time second, 60 s tumbling windows): per record a ``get`` and a
``put`` of the (window end, window start, user) counter; at each window end the fired
windows are scanned and range-deleted (as ``FixedWindowOperator`` does without
lateness); with ``--every N`` a snapshot (``snapshot_sync``, the worker's background
RocksDB checkpoint, marked uploaded by another thread once it is whole, as the
uploader does) every N records, none with ``--every 0``.
Prints records/s, the time inside ``snapshot_sync`` and the process CPU time.

Run: ``python -m benchmarks.bench_window_state --every 32000`` (32 000 records: about
1 s of one of w2's four tasks) and ``--every 0``; ``--repo DIR`` imports kstream from
another checkout (a before/after comparison in one interpreter environment).
"""

from __future__ import annotations

import argparse
import inspect
import random
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--records", type=int, default=250_000)
    p.add_argument("--keys", type=int, default=25_000)
    p.add_argument("--rate", type=int, default=1_250, help="events per event-time second")
    p.add_argument("--window-ms", type=int, default=60_000)
    p.add_argument("--every", type=int, default=32_000, help="records per snapshot; 0: none")
    p.add_argument("--repo", default="", help="import kstream from this checkout")
    a = p.parse_args()
    if a.repo:
        sys.path.insert(0, a.repo)
    from kstream.state.base import TableSpec
    from kstream.state.rocksdb import RocksDBBackend

    try:
        from kstream.state.localsnapshot import mark_uploaded
    except ImportError:  # a checkout from before kstream/state/localsnapshot.py
        from kstream.state.rocksdb import mark_uploaded  # type: ignore[attr-defined,no-redef]

    def upload(snap: Any) -> None:  # what the uploader does first and last
        getattr(snap, "wait_ready", lambda: None)()
        mark_uploaded(snap.directory)

    rnd = random.Random(7)
    root = tempfile.mkdtemp(prefix="bench-window-state-")
    backend = RocksDBBackend(root)
    table = backend.table(TableSpec("windows"))
    # An older checkout has no background checkpoint (all synchronous) or no delta snapshots.
    params = inspect.signature(backend.snapshot_sync).parameters
    kw: dict[str, Any] = {k: True for k in ("background", "deltas") if k in params}
    uploads = ThreadPoolExecutor(1)
    window, next_end, snapshots, in_snapshots, fired = a.window_ms, a.window_ms, 0, 0.0, 0
    c0, t0 = time.process_time(), time.perf_counter()
    for i in range(a.records):
        ts = i * 1000 // a.rate
        while ts >= next_end:
            lo, hi = (next_end, next_end - window), (next_end, next_end - window + 1)
            fired += sum(1 for _ in table.scan_range(lo, hi))
            table.delete_range(lo, hi)
            next_end += window
        start = ts - ts % window
        key = (start + window, start, f"u{rnd.randrange(a.keys)}")
        table.put(key, table.get(key, 0) + 1)
        if a.every and i % a.every == a.every - 1:
            s0 = time.perf_counter()
            snap = backend.snapshot_sync(snapshots + 1, **kw)
            in_snapshots += time.perf_counter() - s0
            uploads.submit(upload, snap)
            snapshots += 1
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    uploads.shutdown(wait=True)
    backend.close()
    shutil.rmtree(root)
    print(
        f"every={a.every} records/s={a.records / elapsed:,.0f} s={elapsed:.2f} cpu_s={cpu:.2f} "
        f"snapshots={snapshots} in_snapshot_sync_s={in_snapshots:.2f} fired={fired}"
    )


if __name__ == "__main__":
    main()
