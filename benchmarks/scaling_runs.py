"""The measurements behind the scaling curves (``benchmarks/scaling.py``): each function
runs kstream as separate OS processes on a broker and returns one row per point.

Every job is workload 2's window count (``benchmarks/scaling_job.py``) except the
latency curve, which runs workload 1's stateless job (``contenders/kstream_stateless``)
exactly-once on records produced live.

The state-size curve is ``benchmarks/scaling_state.py`` (its rows and run are imported
here too, as the curves' other measurements); what every run shares (the ``Env``,
topics, running ``scaling_job``) is ``benchmarks/scaling_env.py``.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks import generate
from benchmarks.generate import InputSpec, partition_of
from benchmarks.procstats import Child
from benchmarks.scaling_env import (
    MIB,
    REPO_DIR,
    UNBOUNDED,
    Env,
    _cleanup,
    _fresh_topics,
    _job_argv,
    _job_to_end,
)
from benchmarks.scaling_state import ChangedInterval as ChangedInterval
from benchmarks.scaling_state import StateRow
from benchmarks.scaling_state import state_curve as state_curve
from benchmarks.verify import read_output
from benchmarks.workloads import forever_store_dir
from kstream.checkpointstorage.metadata import CheckpointMetadata, latest_completed
from kstream.checkpointstorage.urls import open_store
from kstream.kafka.clients import TopicPartition, make_consumer, make_producer

# ------------------------------------------------------------------ w2 throughput vs keys


@dataclass(frozen=True)
class ThroughputRow:
    keys: int
    records: int
    window_ms: int
    rate: float  # records/s, t_first to committed output (as benchmarks/run.py)
    seconds: float
    cpu_s: float
    peak_rss_mb: float
    output: int
    workers: int = 1


def throughput_vs_keys(env: Env, keys: int, records: int) -> ThroughputRow:
    """Workload 2 (exactly-once, checkpoints every 1 s) on ``records`` over ``keys`` keys,
    with a window half the input's event-time span: the first window's state holds
    about every key (``keys`` ≤ ``records``), and it fires mid-run."""
    spec = InputSpec(records, keys, env.partitions)
    window_ms = spec.event_span_ms // 2 + 1
    ends = generate.load(env.bootstrap, spec, log=False)
    rid = uuid.uuid4().hex[:8]
    group, out = f"scale-keys-{rid}", f"scale.out.keys.{rid}"
    state = env.workdir / f"state-{group}"
    _fresh_topics(env, out)
    try:
        res, report, published = _job_to_end(
            env, group, out, state, spec.topic, ends.to_json(),
            "--commit-interval", "1", "--window-ms", str(window_ms),
        )  # fmt: skip
        if report.records_in != records:
            raise RuntimeError(f"processed {report.records_in} of {records} records")
        seconds = report.t_end - report.t_first
        return ThroughputRow(
            keys, records, window_ms, records / seconds, seconds, res.cpu_s, res.peak_rss_mb,
            published,
        )  # fmt: skip
    finally:
        _cleanup(env, group, [out], [state])


# ------------------------------------------------------------------ 1 and 2 worker processes

_TOPOLOGY = """\
from kstream.api import Topology, Tumbling, WatermarkStrategy

topology = Topology({app!r})
(
    topology.source({topic!r}, key_serde="bytes", value_serde="json",
                    watermark=WatermarkStrategy(max_out_of_orderness_ms=0), keyed=True)
    .window(Tumbling({window_ms}))
    .count()
    .map(lambda r: {{"start": r.start, "end": r.end, "value": r.value}})
    .to({output!r}, key_serde="bytes", value_serde="json")
)
"""


def throughput_workers(env: Env, workers: int, records: int, keys: int) -> ThroughputRow:
    """Workload 2 (60 s windows, exactly-once, checkpoints every 1 s) run by ``workers``
    ``kstream worker`` processes that elect their coordinator, as deployed. The rate is
    read off the completed checkpoints (input offsets they cover over their completion
    times), from the first checkpoint past 5 % of the input to the one covering all of it,
    so start-up and group joins are not counted."""
    spec = InputSpec(records, keys, env.partitions)
    ends = generate.load(env.bootstrap, spec, log=False)
    total = sum(ends.ends.values())
    rid = uuid.uuid4().hex[:8]
    app, out = f"scale-procs-{rid}", f"scale.out.procs.{rid}"
    _fresh_topics(env, out)
    topo = env.workdir / f"{app}.py"
    topo.write_text(_TOPOLOGY.format(app=app, topic=spec.topic, window_ms=60_000, output=out))
    store_dir = env.workdir / f"{app}.store"
    store_url = f"file://{store_dir}"
    kstream = str(Path(env.python).with_name("kstream"))
    procs: list[Child] = []
    samples: list[tuple[float, int]] = []  # (checkpoint completion time, input offsets covered)
    states = [env.workdir / f"state-{app}-{i}" for i in range(workers)]
    try:
        for i in range(workers):
            procs.append(Child(
                [kstream, "worker", str(topo), "-b", env.bootstrap, "--store", store_url,
                 "--state-dir", str(states[i]), "--interval", "1", "--coordinator", "auto"],
                cwd=REPO_DIR, log_dir=env.workdir, name=f"{app}-{i}",
            ))  # fmt: skip
        deadline = time.monotonic() + env.timeout
        seen: set[int] = set()
        while not samples or samples[-1][1] < total:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{workers} workers covered {samples[-1:]} of {total}")
            for p in procs:
                if not p.running:
                    raise RuntimeError(f"a worker exited:\n{p.result().stderr_tail}")
            meta = latest_completed(open_store(store_url), app) if store_dir.is_dir() else None
            if meta is not None and meta.checkpoint_id not in seen:
                seen.add(meta.checkpoint_id)
                samples.append((meta.complete_time, _covered(meta, spec.topic)))
            time.sleep(0.1)  # polling the store for a condition, with a deadline
        start = next(s for s in samples if s[1] >= total * 0.05)
        end = samples[-1]
        if end[0] <= start[0]:
            raise RuntimeError("the input was processed within one checkpoint: too small to time")
        stats = [p.stop() for p in procs]
        rate = (end[1] - start[1]) / max(end[0] - start[0], 1e-9)
        got = read_output(env.bootstrap, out, env.partitions, timeout=env.timeout)
        return ThroughputRow(
            keys, records, 60_000, rate, end[0] - start[0], sum(s.cpu_s for s in stats),
            sum(s.peak_rss_mb for s in stats), got.records, workers,
        )  # fmt: skip
    finally:
        for p in procs:
            p.stop()
        _cleanup(env, app, [out], [*states, store_dir])


def _covered(meta: CheckpointMetadata, topic: str) -> int:
    return sum(
        pos
        for task in meta.tasks.values()
        for where, pos in task.offsets.items()
        if where.rpartition(":")[0] == topic and isinstance(pos, int)
    )


# ------------------------------------------------------------------ peak RSS vs output per interval


@dataclass(frozen=True)
class OutputRow:
    output: int  # records output in one checkpoint interval
    budget_mb: float | None  # None: unbounded
    peak_rss_mb: float
    seconds: float
    published: int


def rss_vs_output(env: Env, output: int, budgets: list[int]) -> list[OutputRow]:
    """``output`` input records forwarded unchanged to an exactly-once sink by one process
    (``scaling_job --topology forward``) with checkpoints every hour: the only checkpoint
    is the graceful stop's, so all ``output`` records are buffered and published in one
    checkpoint interval. Peak RSS of the process, once per sink buffer budget in
    ``budgets`` (bytes; ``UNBOUNDED``: everything in memory), on the same input."""
    spec = InputSpec(output, 100_000, env.partitions)
    ends = generate.load(env.bootstrap, spec, log=False)
    return [_rss_run(env, spec.topic, ends.to_json(), output, budget) for budget in budgets]


def _rss_run(env: Env, topic: str, ends: str, output: int, budget: int) -> OutputRow:
    rid = uuid.uuid4().hex[:8]
    group, out = f"scale-rss-{rid}", f"scale.out.rss.{rid}"
    state = env.workdir / f"state-{group}"
    _fresh_topics(env, out)
    try:
        res, report, published = _job_to_end(
            env, group, out, state, topic, ends, "--topology", "forward",
            "--commit-interval", "3600", "--sink-buffer-memory", str(budget),
        )  # fmt: skip
        if published != output:
            raise RuntimeError(f"published {published} of {output} records")
        return OutputRow(
            output, None if budget >= UNBOUNDED else budget / MIB, res.peak_rss_mb,
            report.t_end - report.t_first, published,
        )  # fmt: skip
    finally:
        _cleanup(env, group, [out], [state])


# ------------------------------------------------------------------ latency vs checkpoint interval


@dataclass(frozen=True)
class LatencyRow:
    interval_s: float
    rate: int  # records/s produced
    records: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    p99_runs: tuple[float, ...] = ()  # a median row's: every run's p99, in order


def latency_medians(rows: list[LatencyRow]) -> list[LatencyRow]:
    """One row per checkpoint interval: the median p50, p99 and max of its runs (and
    every run's p99), intervals in increasing order."""
    out = []
    for interval in sorted({r.interval_s for r in rows}):
        runs = [r for r in rows if r.interval_s == interval]
        out.append(
            LatencyRow(
                interval, runs[0].rate, runs[0].records,
                statistics.median(r.p50_ms for r in runs),
                statistics.median(r.p99_ms for r in runs),
                statistics.median(r.max_ms for r in runs),
                tuple(r.p99_ms for r in runs),
            )
        )  # fmt: skip
    return out


def latency(env: Env, interval: float, rate: int, seconds: float) -> LatencyRow:
    """Workload 1's stateless job, exactly-once, checkpoints every ``interval`` s, fed
    ``rate`` records/s for ``seconds`` s, each stamped with the wall clock when produced
    (Kafka timestamp = event time). A read_committed consumer notes when each output
    record becomes visible: latency = visible - input timestamp (same host clock)."""
    rid = uuid.uuid4().hex[:8]
    group, topic, out = f"scale-lat-{rid}", f"scale.in.lat.{rid}", f"scale.out.lat.{rid}"
    state = env.workdir / f"state-{group}"
    _fresh_topics(env, topic, out)
    job: Child | None = None
    latencies: list[float] = []
    stop = threading.Event()
    consumer = make_consumer(env.bootstrap, f"{group}-watch", read_committed=True)
    consumer.assign([TopicPartition(out, p, 0) for p in range(env.partitions)])

    def watch() -> None:
        while not stop.is_set():
            for m in consumer.consume(num_messages=5000, timeout=0.05):
                if m.error() is None:
                    latencies.append(time.time() * 1000 - m.timestamp()[1])

    watcher = threading.Thread(target=watch, daemon=True)
    try:
        job = Child(
            _job_argv(
                env, "benchmarks.contenders.kstream_stateless", "--input", topic,
                "--output", out, "--group", group, "--state-dir", str(state),
                "--guarantee", "exactly-once", "--commit-interval", str(interval), "--forever",
            ),
            cwd=REPO_DIR, log_dir=env.workdir, name=group,
        )  # fmt: skip
        _wait_first_checkpoint(group, state, job, env.timeout)
        watcher.start()
        producer = make_producer(env.bootstrap, extra={"linger.ms": 5})
        # Warm the producer up first (metadata, connection, idempotent producer id):
        # otherwise the first stamped records wait for its start-up, up to ~0.8 s here,
        # which is the harness's latency, not the job's. The job filters this record out.
        warm = {"user": "warmup", "kind": "view", "amount": 0.0, "ts": int(time.time() * 1000)}
        producer.produce(topic, json.dumps(warm).encode(), b"warmup", partition=0)
        if producer.flush(30.0):
            raise RuntimeError("latency warm-up record not delivered")
        total = int(rate * seconds)
        t0 = time.monotonic()
        for i in range(total):
            due = t0 + i / rate
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # pacing the producer (not synchronisation)
            now = int(time.time() * 1000)
            key = f"u{i % 1000}".encode()
            value = json.dumps({"user": key.decode(), "kind": "click", "amount": 10.0, "ts": now})
            producer.produce(topic, value.encode(), key, partition=partition_of(key, env.partitions),
                             timestamp=now)  # fmt: skip
            if i % 100 == 0:
                producer.poll(0)
        if producer.flush(30.0):
            raise RuntimeError("latency input not delivered")
        deadline = time.monotonic() + env.timeout
        while len(latencies) < total:
            if time.monotonic() > deadline or not job.running:
                raise RuntimeError(f"saw {len(latencies)} of {total} outputs")
            time.sleep(0.1)  # polling a counter for a condition, with a deadline
        qs = statistics.quantiles(latencies, n=100)
        return LatencyRow(interval, rate, total, qs[49], qs[98], max(latencies))
    finally:
        stop.set()
        if watcher.is_alive():
            watcher.join(5)
        consumer.close()
        if job is not None:
            job.stop()
        _cleanup(env, group, [topic, out], [state, forever_store_dir(state)])


def _wait_first_checkpoint(app: str, state: Path, job: Child, timeout: float) -> None:
    where = forever_store_dir(state)
    deadline = time.monotonic() + timeout
    while True:
        if where.is_dir() and latest_completed(open_store(f"file://{where.resolve()}"), app):
            return
        if not job.running:
            raise RuntimeError(f"job exited:\n{job.result().stderr_tail}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{app}: no checkpoint within {timeout}s")
        time.sleep(0.1)  # polling the store for a condition, with a deadline


# ------------------------------------------------------------------ every curve


@dataclass
class Results:
    """The rows of every curve of one run, and what was not measured."""

    keys: list[ThroughputRow] = field(default_factory=list)
    workers: list[ThroughputRow] = field(default_factory=list)
    state: list[StateRow] = field(default_factory=list)
    latency: list[LatencyRow] = field(default_factory=list)
    outputs: list[OutputRow] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
