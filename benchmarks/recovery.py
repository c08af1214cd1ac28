"""Workload 4's recovery measurement: time from ``kill -9`` to the first new output.

For one contender (a window-count job that runs until killed):

1. load a fresh input topic with ``keys`` records, one per key, all inside one
   1-hour tumbling window W0 — so the job's state holds every key;
2. start the job; wait until its checkpoint holds the whole state — the build phase:
   for Quix, until its group has committed the end offsets of every input partition
   (``wait_committed``); for kstream, which commits no group offsets in checkpointed
   mode, until the latest completed checkpoint in its store covers them
   (``wait_checkpointed``);
3. ``SIGKILL`` the job's process group (t_kill); with ``wipe`` delete its local state
   directory (a replacement machine: state must come from the changelog / the
   checkpoint store);
4. append one probe record per partition, event time past W0's end, which closes W0;
5. restart the job with the same arguments (same group, same static member id);
6. the first record a read_committed reader sees on the output topic is the first
   new output (t_out); recovery time = t_out - t_kill. Every key's W0 count is then
   read back: ``restored`` must equal ``keys`` (the whole state was recovered).
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Producer as ConfluentProducer

from benchmarks.generate import (
    KEEP_FOREVER,
    START_TS_MS,
    InputSpec,
    delete_topic,
    end_offsets,
    partition_of,
    produce,
)
from benchmarks.procstats import Child
from benchmarks.verify import READ_BACK
from benchmarks.workloads import forever_store_dir
from kstream.checkpointstorage.base import CheckpointStore
from kstream.checkpointstorage.metadata import CheckpointMetadata, latest_completed
from kstream.checkpointstorage.urls import open_store
from kstream.kafka.clients import (
    TopicPartition,
    TopicSpec,
    ensure_topics,
    make_admin,
    make_consumer,
)

RECOVERY_WINDOW_MS = 3_600_000
RECOVERY_EVENT_RATE = 5_000

#: Builds a job's argv from (input topic, output topic, group, state dir, static member id).
JobArgv = Callable[[str, str, str, Path, str], Sequence[str]]

#: Returns once the job's checkpoint covers ``ends`` of the input topic; raises if the
#: job dies or the timeout passes. Arguments: (bootstrap, group, input topic, end offsets,
#: the job, timeout s, the job's state dir).
BuildWait = Callable[[str, str, str, dict[int, int], Child, float, Path], None]


@dataclass(frozen=True)
class RecoveryResult:
    """One recovery measurement."""

    build_s: float  # start of the job until its group committed all input
    recovery_s: float  # kill -9 until the first new output was readable
    restored: int  # W0 results read back after the restart (expected: keys)
    expected: int
    restart_cpu_s: float
    restart_peak_rss_mb: float


def window_bounds(spec: InputSpec) -> tuple[int, int]:
    """Start and end (ms) of the window W0 that must hold every record of ``spec``."""
    start = START_TS_MS // RECOVERY_WINDOW_MS * RECOVERY_WINDOW_MS
    end = start + RECOVERY_WINDOW_MS
    if START_TS_MS + spec.event_span_ms >= end:
        raise ValueError(
            f"{spec.records} records at {spec.event_rate}/s span {spec.event_span_ms} ms: "
            f"they do not fit one {RECOVERY_WINDOW_MS} ms window; raise the event rate"
        )
    return start, end


def probe_key(partition: int, partitions: int) -> bytes:
    """A key outside the data set's users that lands on ``partition``."""
    i = 0
    while True:
        key = f"probe{i}".encode()
        if partition_of(key, partitions) == partition:
            return key
        i += 1


def wait_committed(
    bootstrap: str, group: str, topic: str, ends: dict[int, int], job: Child, timeout: float
) -> None:
    """Return once ``group`` committed ``ends`` on ``topic``; raise if the job dies or time runs out."""
    consumer = make_consumer(bootstrap, group)  # never subscribes: only reads commits
    tps = [TopicPartition(topic, p) for p in sorted(ends)]
    deadline = time.monotonic() + timeout
    seen: dict[int, int] = {}
    try:
        while True:
            seen = {tp.partition: tp.offset for tp in consumer.committed(tps, timeout=10.0)}
            if all(seen.get(p, -1) >= o for p, o in ends.items()):
                return
            if not job.running:
                raise RuntimeError(
                    f"job exited during the build phase:\n{job.result().stderr_tail}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"group {group} committed {seen}, expected {ends} in {timeout}s")
            time.sleep(0.2)  # polling the broker for a condition, with a deadline
    finally:
        consumer.close()


def wait_group_committed(
    bootstrap: str,
    group: str,
    topic: str,
    ends: dict[int, int],
    job: Child,
    timeout: float,
    _state_dir: Path,
) -> None:
    """``BuildWait`` for jobs that commit their group's offsets when a checkpoint completes."""
    wait_committed(bootstrap, group, topic, ends, job, timeout)


def checkpoint_offsets(store: CheckpointStore, app_id: str, topic: str) -> dict[int, int]:
    """Input positions of ``topic`` in the latest completed kstream checkpoint in ``store``
    (partition -> next offset to read); empty when there is none."""
    meta = latest_completed(store, app_id)
    covered: dict[int, int] = {}
    if meta is None:
        return covered
    for task in meta.tasks.values():
        for where, pos in task.offsets.items():
            t, _, p = where.rpartition(":")
            if t == topic and isinstance(pos, int):
                covered[int(p)] = pos
    return covered


def wait_checkpointed(
    _bootstrap: str,
    group: str,
    topic: str,
    ends: dict[int, int],
    job: Child,
    timeout: float,
    state_dir: Path,
) -> None:
    """``BuildWait`` for a kstream job (app id = ``group``): its checkpoint store (next to
    ``state_dir``, see ``kstreamapp.store_dir``) has a completed checkpoint covering ``ends``."""
    where = forever_store_dir(state_dir)

    def store_of() -> CheckpointStore | None:
        return open_store(f"file://{where.resolve()}") if where.is_dir() else None

    _wait_covered(store_of, None, group, topic, ends, job, timeout)


def wait_checkpointed_in(
    store_of: Callable[[], CheckpointStore | None],
    on_covered: Callable[[CheckpointMetadata], None] | None = None,
) -> BuildWait:
    """A ``BuildWait`` polling the store ``store_of()`` returns (None: not created yet);
    ``on_covered`` gets the metadata of the checkpoint that covers the input."""

    def wait(
        _bootstrap: str,
        group: str,
        topic: str,
        ends: dict[int, int],
        job: Child,
        timeout: float,
        _state_dir: Path,
    ) -> None:
        _wait_covered(store_of, on_covered, group, topic, ends, job, timeout)

    return wait


def _wait_covered(
    store_of: Callable[[], CheckpointStore | None],
    on_covered: Callable[[CheckpointMetadata], None] | None,
    group: str,
    topic: str,
    ends: dict[int, int],
    job: Child,
    timeout: float,
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        store = store_of()
        seen = checkpoint_offsets(store, group, topic) if store is not None else {}
        if store is not None and all(seen.get(p, -1) >= o for p, o in ends.items()):
            meta = latest_completed(store, group)
            if on_covered is not None and meta is not None:
                on_covered(meta)
            return
        if not job.running:
            raise RuntimeError(f"job exited during the build phase:\n{job.result().stderr_tail}")
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"checkpoint of {group} covers {seen}, expected {ends} in {timeout}s"
            )
        time.sleep(0.2)  # polling the store for a condition, with a deadline


def measure_recovery(
    bootstrap: str,
    job_argv: JobArgv,
    *,
    name: str,
    keys: int,
    partitions: int,
    workdir: Path,
    cwd: Path,
    wipe: bool = True,
    timeout: float = 1800.0,
    wait_built: BuildWait = wait_group_committed,
) -> RecoveryResult:
    """Run steps 1-6 of the module docstring once for one job; clean up its topics and state."""
    run_id = uuid.uuid4().hex[:8]
    spec = InputSpec(keys, keys, partitions, event_rate=RECOVERY_EVENT_RATE, cover=True)
    _, w0_end = window_bounds(spec)
    topic_in = f"bench.rec.in.{name}.{run_id}"
    topic_out = f"bench.rec.out.{name}.{run_id}"
    group = f"bench-rec-{name}-{run_id}"
    state_dir = workdir / f"state-{group}"
    admin = make_admin(bootstrap)
    ensure_topics(
        admin,
        [
            TopicSpec(topic_in, partitions, KEEP_FOREVER),
            TopicSpec(topic_out, partitions, KEEP_FOREVER),
        ],
    )
    argv = job_argv(topic_in, topic_out, group, state_dir, f"{group}-member")
    watcher = make_consumer(bootstrap, f"{group}-watcher", read_committed=True, extra=READ_BACK)
    job: Child | None = None
    try:
        # 1. the state's input
        produce(bootstrap, spec, topic_in)
        ends = end_offsets(bootstrap, topic_in, partitions).ends
        watcher.assign([TopicPartition(topic_out, p, 0) for p in range(partitions)])
        # 2. build the state and wait until it is checkpointed
        t0 = time.monotonic()
        job = Child(argv, cwd=cwd, log_dir=workdir, name=f"{group}-build")
        wait_built(bootstrap, group, topic_in, ends, job, timeout, state_dir)
        build_s = time.monotonic() - t0
        early = watcher.consume(num_messages=1, timeout=0.5)
        if early:
            raise RuntimeError(f"{name}: output before W0 closed: {early[0].value()!r}")
        # The probes' producer is connected (and knows the topic's leaders) before the
        # kill: its start-up is the harness's, not part of any contender's recovery.
        # Not idempotent: an idempotent producer's id request sometimes made the first
        # send wait ~0.5 s after the kill (4 probes need no deduplication).
        producer = ConfluentProducer({"bootstrap.servers": bootstrap, "acks": "all"})
        producer.list_topics(topic_in, timeout=10.0)
        # 3. kill -9, and lose the local state
        t_kill = time.time()
        job.kill()
        job.wait(60)
        if wipe:
            shutil.rmtree(state_dir, ignore_errors=True)
        # 4. probes that close W0 on every partition
        for p in range(partitions):
            probe = {"user": "probe", "kind": "click", "amount": 1.0, "ts": w0_end + 1000}
            producer.produce(
                topic_in,
                json.dumps(probe).encode(),
                probe_key(p, partitions),
                partition=p,
                timestamp=w0_end + 1000,
            )
        if producer.flush(30.0):
            raise RuntimeError(f"{name}: probe records not delivered")
        # 5. restart
        job = Child(argv, cwd=cwd, log_dir=workdir, name=f"{group}-restart")
        # 6. first new output, then every key's W0 result
        deadline = time.monotonic() + timeout
        restored = 0
        t_out: float | None = None
        while restored < keys and time.monotonic() < deadline:
            msgs = watcher.consume(num_messages=10_000, timeout=0.2)
            got = [m for m in msgs if m.error() is None]
            if got and t_out is None:
                t_out = time.time()
            restored += len(got)
            if not got and not job.running:
                break
        if t_out is None:
            raise RuntimeError(
                f"{name}: no output within {timeout}s after the restart; stderr tail:\n"
                + (job.result().stderr_tail if not job.running else "(still running)")
            )
        stats = job.stop()
        return RecoveryResult(
            build_s=build_s,
            recovery_s=t_out - t_kill,
            restored=restored,
            expected=keys,
            restart_cpu_s=stats.cpu_s,
            restart_peak_rss_mb=stats.peak_rss_mb,
        )
    finally:
        if job is not None:
            job.stop()
        watcher.close()
        shutil.rmtree(state_dir, ignore_errors=True)
        shutil.rmtree(forever_store_dir(state_dir), ignore_errors=True)  # kstream's store
        for t in [topic_in, topic_out, *topics_of_group(bootstrap, group)]:
            delete_topic(bootstrap, t)


def topics_of_group(bootstrap: str, group: str) -> list[str]:
    """Topics a framework created for ``group`` (changelogs, repartition, control topics)."""
    names = make_admin(bootstrap).list_topics(timeout=10.0).topics
    return sorted(t for t in names if group in t)
