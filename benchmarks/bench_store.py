"""Checkpoint store comparison: ``file://`` vs ``s3://`` (S3Proxy on loopback).

For each store, workload 4's recovery measurement (``benchmarks/recovery.py``) on a
state of ``--keys`` keys: the job builds the state, and the checkpoint that covers
the whole input is read back from the store — its duration (trigger to the last
acknowledgement) and the bytes it uploaded; then kill -9, local state wiped, restart:
seconds until the first new output (the restart restores every task from the store).

    python -m benchmarks.bench_store [--keys 1000000] [--runs 1] [--partitions 4]

Starts its own Kafka broker and S3Proxy (both on loopback, from the cached Maven
jars) and prints a Markdown table (add it to RESULTS.md by hand, under a heading
"## Checkpoint store: ...": ``benchmarks.run`` keeps that section when it rewrites the file).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

from benchmarks import recovery
from benchmarks.lineup import REPO_DIR, Contender
from benchmarks.procstats import Child
from benchmarks.workloads import forever_store_dir
from kstream.checkpointstorage.base import CheckpointStore
from kstream.checkpointstorage.metadata import CheckpointMetadata
from kstream.checkpointstorage.urls import open_store
from kstream.dev.localbroker import LocalBroker
from kstream.dev.s3proxy import S3Proxy


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--timeout", type=float, default=600.0)
    a = p.parse_args()
    contender = Contender("kstream", "kstream_recovery")
    rows: list[str] = []
    with tempfile.TemporaryDirectory(prefix="kstream-bench-store-") as tmp:
        work = Path(tmp)
        with LocalBroker(work / "kafka") as broker, S3Proxy(work / "s3") as s3:
            s3_options = {
                "endpoint": s3.endpoint,
                "access_key_id": s3.access_key,
                "secret_access_key": s3.secret_key,
                "region": "us-east-1",
            }
            for kind in ("file", "s3"):
                results: list[recovery.RecoveryResult] = []
                metas: list[CheckpointMetadata] = []
                for run in range(a.runs):
                    url = f"s3://kstream/bench-{run}-{int(time.time())}" if kind == "s3" else ""
                    extra: list[str] = []
                    if url:
                        extra = ["--store-url", url]
                        for k, v in s3_options.items():
                            extra += ["--store-option", f"{k}={v}"]

                    def argv(
                        topic_in: str,
                        topic_out: str,
                        group: str,
                        state: Path,
                        member: str,
                        extra: list[str] = extra,
                    ) -> list[str]:
                        return contender.argv([
                            "--bootstrap", broker.bootstrap, "--input", topic_in,
                            "--output", topic_out, "--group", group, "--state-dir", str(state),
                            "--instance-id", member, "--guarantee", "exactly-once",
                            "--commit-interval", "1",
                            "--window-ms", str(recovery.RECOVERY_WINDOW_MS), "--forever", *extra,
                        ])  # fmt: skip

                    if url:
                        s3_store: CheckpointStore = open_store(url, s3_options)
                        wait = recovery.wait_checkpointed_in(partial(_same, s3_store), metas.append)
                    else:
                        wait = _file_wait(metas)
                    result = recovery.measure_recovery(
                        broker.bootstrap, argv, name=f"store-{kind}", keys=a.keys,
                        partitions=a.partitions, workdir=work, cwd=REPO_DIR,
                        wipe=True, timeout=a.timeout, wait_built=wait,
                    )  # fmt: skip
                    results.append(result)
                rows.append(_row(kind, results, metas, a.keys))
    print(f"\nState of {a.keys:,} keys, {a.partitions} partitions, 1 process; "
          f"S3 = S3Proxy 2.6.0 (filesystem-nio2 backend) on loopback.\n")  # fmt: skip
    print(
        "| store | runs | checkpoint covering the input: duration ms | uploaded bytes "
        "| state bytes | kill -9 → first output, s (median) | min - max | restored / expected |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(r)
    return 0


def _file_wait(metas: list[CheckpointMetadata]) -> recovery.BuildWait:
    """``wait_checkpointed`` for the file store next to the state dir, recording metadata."""

    def wait(
        bootstrap: str,
        group: str,
        topic: str,
        ends: dict[int, int],
        job: Child,
        timeout: float,
        state_dir: Path,
    ) -> None:
        where = forever_store_dir(state_dir)
        recovery.wait_checkpointed_in(
            lambda: open_store(f"file://{where.resolve()}") if where.is_dir() else None,
            metas.append,
        )(bootstrap, group, topic, ends, job, timeout, state_dir)

    return wait


def _row(
    kind: str, results: list[recovery.RecoveryResult], metas: list[CheckpointMetadata], keys: int
) -> str:
    rs = [r.recovery_s for r in results]
    dur = statistics.median(m.duration_ms for m in metas) if metas else float("nan")
    up = statistics.median(m.uploaded_size for m in metas) if metas else 0
    size = statistics.median(m.state_size for m in metas) if metas else 0
    restored = ", ".join(f"{r.restored}/{r.expected}" for r in results)
    return (
        f"| {kind}:// | {len(results)} | {dur:.0f} | {up:,.0f} | {size:,.0f} | "
        f"{statistics.median(rs):.2f} | {min(rs):.2f} - {max(rs):.2f} | {restored} |"
    )


if __name__ == "__main__":
    sys.exit(main())


def _same(store: CheckpointStore) -> CheckpointStore:
    return store
