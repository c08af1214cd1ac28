"""The state-size curve of the scaling benchmark (``benchmarks/scaling.py``):
checkpoint duration and uploaded bytes with 1 % of the keys changed per interval, and
recovery time with the local state wiped or kept (workload 4's recovery run,
``benchmarks/recovery.py``), as separate OS processes on a broker.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import generate, recovery
from benchmarks.generate import START_TS_MS, InputSpec, partition_of
from benchmarks.procstats import Child
from benchmarks.scaling_env import REPO_DIR, Env, _job_argv
from benchmarks.workloads import forever_store_dir
from kstream.checkpointstorage.metadata import CheckpointMetadata, latest_completed
from kstream.checkpointstorage.urls import open_store
from kstream.kafka.clients import make_producer
from kstream.snapshots.upload import read_manifest

# ------------------------------------------------------------------ state size: checkpoints, recovery


@dataclass(frozen=True)
class ChangedInterval:
    """What the checkpoints of one interval with ``keys`` changed uploaded."""

    keys: int
    uploaded_bytes: int  # every checkpoint from the change until one covered it
    duration_ms: float  # the longest of those checkpoints: trigger to last acknowledgement
    state_bytes: int  # the covering checkpoint's whole state, its delta files left out


@dataclass(frozen=True)
class StateRow:
    keys: int
    wipe: bool
    recovery_s: float
    restored: int
    build_s: float
    restart_peak_rss_mb: float
    state_bytes: int = 0  # the last checkpoint's whole state
    idle_duration_ms: float = 0.0  # a checkpoint with nothing changed
    changed: tuple[ChangedInterval, ...] = ()  # successive intervals, 1 % changed each
    failovers: int = 0  # failovers the coordinator logged while the restarted job ran

    def shares(self) -> list[float]:
        """Uploaded / state of each changed interval."""
        return [c.uploaded_bytes / c.state_bytes for c in self.changed if c.state_bytes]

    @property
    def mean_share(self) -> float:
        """Everything the changed intervals uploaded over their states: the steady cost
        per interval, the compactions' rewrites included."""
        total = sum(c.state_bytes for c in self.changed)
        return sum(c.uploaded_bytes for c in self.changed) / total if total else 0.0


def state_curve(
    env: Env, keys: int, wipe: bool, change: float = 0.01, intervals: int = 0
) -> StateRow:
    """Workload 4's recovery run (``benchmarks/recovery.py``) on a state of ``keys``
    keys; with ``intervals`` > 0, after the build and before the kill, ``intervals``
    times in a row a different ``change`` of the keys get one more record, each waited
    for until a checkpoint covers it: what each interval's checkpoints uploaded is what
    a steady 1 % change per interval costs (compactions included)."""
    measured: dict[str, Any] = {}

    def built(
        bootstrap: str, group: str, topic: str, ends: dict[int, int], job: Child,
        timeout: float, state_dir: Path,
    ) -> None:  # fmt: skip
        measured["group"] = group
        recovery.wait_checkpointed(bootstrap, group, topic, ends, job, timeout, state_dir)
        if intervals <= 0:
            return
        store = open_store(f"file://{forever_store_dir(state_dir).resolve()}")
        base = latest_completed(store, group)
        assert base is not None
        idle = _next_checkpoints(store, group, base.checkpoint_id, 1, job, timeout)
        measured["idle"] = idle[-1].duration_ms
        prev = idle[-1].checkpoint_id
        rows: list[ChangedInterval] = []
        for i in range(intervals):
            n = _change_keys(bootstrap, topic, keys, change, env.partitions, i)
            new_ends = generate.end_offsets(bootstrap, topic, env.partitions).ends
            recovery.wait_checkpointed(bootstrap, group, topic, new_ends, job, timeout, state_dir)
            last = latest_completed(store, group)
            assert last is not None
            metas = _metas_between(store, group, prev, last.checkpoint_id)
            rows.append(ChangedInterval(
                n, sum(m.uploaded_size for m in metas), max(m.duration_ms for m in metas),
                _state_without_deltas(store, last),
            ))  # fmt: skip
            prev = last.checkpoint_id
        measured["changed"] = tuple(rows)
        measured["state"] = rows[-1].state_bytes

    def argv(topic_in: str, topic_out: str, group: str, state: Path, member: str) -> list[str]:
        return _job_argv(
            env, "benchmarks.scaling_job", "--input", topic_in, "--output", topic_out,
            "--group", group, "--state-dir", str(state), "--instance-id", member,
            "--guarantee", "exactly-once", "--commit-interval", "1",
            "--window-ms", str(recovery.RECOVERY_WINDOW_MS), "--forever",
        )  # fmt: skip

    r = recovery.measure_recovery(
        env.bootstrap, argv, name="scale", keys=keys, partitions=env.partitions,
        workdir=env.workdir, cwd=REPO_DIR, wipe=wipe, timeout=env.timeout, wait_built=built,
    )  # fmt: skip
    restart_log = env.workdir / f"{measured['group']}-restart.err"  # procstats.Child's
    failovers = restart_log.read_text(errors="replace").count("failover (attempt")
    return StateRow(
        keys, wipe, r.recovery_s, r.restored, r.build_s, r.restart_peak_rss_mb,
        int(measured.get("state", 0)), float(measured.get("idle", 0.0)),
        measured.get("changed", ()), failovers,
    )  # fmt: skip


def _state_without_deltas(store: Any, meta: CheckpointMetadata) -> int:
    """The checkpoint's size without its delta files: the state a delta is a share of
    (counting the deltas would make each share smaller the more deltas there are)."""
    manifests = [read_manifest(store, t.handle) for t in meta.tasks.values()]
    return sum(m.total_bytes - sum(d.size for d in m.deltas()) for m in manifests)


def _next_checkpoints(
    store: Any, app: str, after: int, n: int, job: Child, timeout: float
) -> list[CheckpointMetadata]:
    """The next ``n`` completed checkpoints after id ``after`` (waits for them)."""
    out: list[CheckpointMetadata] = []
    deadline = time.monotonic() + timeout
    while len(out) < n:
        meta = latest_completed(store, app)
        if meta is not None and meta.checkpoint_id > (out[-1].checkpoint_id if out else after):
            out.append(meta)
        if not job.running or time.monotonic() > deadline:
            raise RuntimeError(f"no checkpoint after {after} within {timeout}s")
        time.sleep(0.05)  # polling the store for a condition, with a deadline
    return out


def _metas_between(store: Any, app: str, after: int, upto: int) -> list[CheckpointMetadata]:
    """Completed checkpoints ``after < id <= upto`` still in the store."""
    from kstream.checkpointstorage.metadata import read_metadata

    out = []
    for cid in range(after + 1, upto + 1):
        try:
            out.append(read_metadata(store, app, cid))
        except Exception:  # an aborted or failed id, or one retention already removed
            continue
    return out


def _change_keys(
    bootstrap: str, topic: str, keys: int, change: float, partitions: int, round_no: int = 0
) -> int:
    """One more record in W0 for ``change`` of the keys of a recovery input (every
    ``1/change``-th key, starting at key ``round_no``: each round other keys), at the
    input's last event time (not late)."""
    spec = InputSpec(keys, keys, partitions, event_rate=recovery.RECOVERY_EVENT_RATE, cover=True)
    ts = START_TS_MS + spec.event_span_ms
    step = max(1, round(1 / change))
    producer = make_producer(bootstrap, extra={"linger.ms": 20})
    n = 0
    for uid in range(round_no % step, keys, step):
        key = f"u{uid}".encode()
        value = json.dumps({"user": f"u{uid}", "kind": "view", "amount": 1.0, "ts": ts}).encode()
        while True:
            try:
                producer.produce(
                    topic, value, key, partition=partition_of(key, partitions), timestamp=ts
                )
                break
            except BufferError:
                producer.poll(0.1)
        n += 1
    if producer.flush(60.0):
        raise RuntimeError("changed records not delivered")
    return n
