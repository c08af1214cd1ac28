"""The coordinator at scale, simulated: N tasks on W workers, no broker (issue 41 item 4).

The REAL coordinator state machine (:class:`~kstream.protocol.coordinator.CheckpointCoordinator`)
and one REAL :class:`~kstream.protocol.worker.WorkerProtocol` per worker exchange their
messages through the wire format (``encode``/``decode``, the size limit included) on a
simulated control topic, with a fake clock. What a worker's loop does with its protocol's
actions is simulated: a restore is instant, a trigger gives every running task's
acknowledgement at once (each task's snapshot as a runner describes it), and the worker
sends them as it does (:func:`kstream.protocol.batching.batch`; ``--per-task-acks``: one
message per task, as before).

Measured (``time.process_time`` around the coordinator's own work only: decoding what it
reads, its ``handle``/``tick``/``metadata_written``, encoding what it writes):

* one checkpoint, trigger -> completion announced;
* one round of heartbeats (every worker once);
* the restore: Restore -> every TaskReady -> Resume.

Also: the acknowledgement messages per worker, the largest message, and what a worker
that starts now reads of the compacted control topic (the newest record per key:
:func:`compacted`), in records and bytes.

Run ``python -m benchmarks.coordinator_sim`` (defaults: 100 000 tasks, 1 000 workers);
``--profile`` prints the coordinator's cProfile (the functions by own time). The process
runs with a coordinator process's GC settings (:func:`kstream.hosting.tuning.tune_gc`,
applied by every process that hosts a coordinator); ``--default-gc``: Python's defaults.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial

from kstream.checkpointstorage.metadata import CheckpointMetadata, TaskSnapshot
from kstream.config import CheckpointingConfig, RestartStrategy
from kstream.hosting.tuning import tune_gc
from kstream.protocol import worker as wp
from kstream.protocol.batching import batch
from kstream.protocol.commands import Command, Send, WriteMetadata
from kstream.protocol.coordinator import CheckpointCoordinator
from kstream.protocol.failover import JobPhase
from kstream.protocol.messages import (
    AcknowledgeCheckpoint,
    Message,
    decode,
    encode,
    record_key,
)

INTERVAL_S = 5.0


def task_ids(tasks: int) -> list[str]:
    """``tasks`` task ids of a two-stage job (half the tasks per stage), as the planner
    names them."""
    half = tasks // 2
    return [f"stage0-{p}" for p in range(half)] + [f"stage1-{p}" for p in range(tasks - half)]


def member_id(i: int) -> str:
    """A member id as a worker's consumer has one (host:pid-uuid)."""
    return f"worker-host-{i % 100:02d}:{10000 + i}-{i:08x}-4b1e-9c3d-6f0a-8e2b5d7c9a1f"


def snapshot(task: str, member: str, checkpoint_id: int) -> TaskSnapshot:
    """A task's snapshot as its runner acknowledges it (one input partition)."""
    stage, part = task.split("-")
    topic = "orders" if stage == "stage0" else "app.stage0-repartition"
    return TaskSnapshot(
        handle=f"app/tasks/{task}/chk-{checkpoint_id}.manifest.json",
        offsets={f"{topic}:{part}": 1_000_000 + checkpoint_id},
        state_size=123_456,
        uploaded_size=1_234,
        alignment_ms=12.5,
        sync_ms=3.25,
        async_ms=40.125,
        member=member,
    )


@dataclass
class Written:
    """One record on the simulated control topic."""

    key: str
    value: bytes
    by_coordinator: bool


@dataclass
class Sim:
    """``tasks`` tasks spread evenly over ``workers`` workers, each one worker protocol."""

    tasks: int
    workers: int
    batched: bool = True
    now: float = 1_000_000.0
    topic: list[Written] = field(default_factory=list)
    cpu: float = 0.0  # coordinator CPU seconds so far
    metadata_cpu: float = 0.0  # of which serializing completed checkpoints' metadata
    completed: list[CheckpointMetadata] = field(default_factory=list)
    profiler: cProfile.Profile | None = None

    def __post_init__(self) -> None:
        ids = task_ids(self.tasks)
        self.members = [member_id(i) for i in range(self.workers)]
        per = -(-self.tasks // self.workers)
        self.owned = {m: tuple(ids[i * per : (i + 1) * per]) for i, m in enumerate(self.members)}
        self.protocols = {
            m: wp.WorkerProtocol(m, now=self.now, heartbeat_interval=1.0) for m in self.members
        }
        self.coordinator = CheckpointCoordinator(
            frozenset(ids),
            CheckpointingConfig(interval=INTERVAL_S, timeout=600.0),
            RestartStrategy(delay=0.0, restore_timeout=600.0),
            heartbeat_timeout=60.0,
        )
        self._inbox: list[bytes] = []  # workers' records the coordinator has not read yet
        self.ack_messages: Counter[str] = Counter()  # per member, acknowledgement messages

    # -- the coordinator's side (timed) ---------------------------------------------------

    @contextmanager
    def _timed(self) -> Iterator[None]:
        start = time.process_time()
        if self.profiler is not None:
            self.profiler.enable()
        try:
            yield
        finally:
            if self.profiler is not None:
                self.profiler.disable()
            self.cpu += time.process_time() - start

    def _coordinator(self, call: Callable[[], list[Command]]) -> None:
        """Run ``call`` on the coordinator and carry its commands out (metadata writes
        succeed at once); the messages it sends reach every worker."""
        with self._timed():
            cmds = call()
            out: list[Message] = []
            while cmds:
                cmd, *cmds = cmds
                if isinstance(cmd, Send):
                    value = encode(cmd.message)
                    self.topic.append(Written(record_key(cmd.message), value, True))
                    out.append(cmd.message)
                elif isinstance(cmd, WriteMetadata):
                    start = time.process_time()
                    cmd.metadata.to_json()  # what the adapter writes to the store
                    self.metadata_cpu += time.process_time() - start
                    self.completed.append(cmd.metadata)
                    n = cmd.metadata.checkpoint_id
                    cmds = self.coordinator.metadata_written(n, self.now) + cmds
        for msg in out:
            for member in self.members:
                self._worker(member, self.protocols[member].handle(msg, self.now))

    def deliver(self) -> None:
        """The coordinator reads what the workers wrote since it last read."""
        while self._inbox:
            batch, self._inbox = self._inbox, []
            for value in batch:
                with self._timed():
                    msg = decode(value)
                self._coordinator(partial(self.coordinator.handle, msg, self.now))

    def tick(self) -> None:
        self._coordinator(lambda: self.coordinator.tick(self.now))

    # -- the workers' side (not timed) ----------------------------------------------------

    def _send(self, msgs: list[Message]) -> None:
        for msg in msgs:
            value = encode(msg)
            self.topic.append(Written(record_key(msg), value, False))
            self._inbox.append(value)

    def _worker(self, member: str, actions: list[wp.WorkerCommand]) -> None:
        """Carry a worker protocol's actions out as its loop would."""
        for a in actions:
            if isinstance(a, wp.Send):
                self._send([a.message])
            elif isinstance(a, wp.TriggerTasks):
                p = self.protocols[member]
                n = a.checkpoint_id
                acks = [
                    AcknowledgeCheckpoint(n, task, a.attempt, snapshot(task, member, n))
                    for task in sorted(p.running)
                ]
                msgs: list[Message] = [*batch(acks, member)] if self.batched else [*acks]
                self.ack_messages[member] += len(msgs)
                self._send(msgs)

    def worker_tick(self) -> None:
        for member in self.members:
            self._worker(member, self.protocols[member].tick(self.now))

    # -- the scenario ---------------------------------------------------------------------

    def start(self) -> None:
        """Every worker is assigned its tasks; the coordinator starts, restores, resumes."""
        for member in self.members:
            assigned = wp.Assigned(member, 1, self.owned[member], True)
            self._worker(member, self.protocols[member].handle(assigned, self.now))
        self._coordinator(lambda: self.coordinator.start(self.now))
        self.deliver()
        self.tick()  # the initial restore (no delay)
        self.deliver()
        if self.coordinator.phase is not JobPhase.RUNNING:
            raise RuntimeError(f"the job did not resume: {self.coordinator.phase}")

    def heartbeats(self) -> None:
        """A second passes: every worker heartbeats once, the coordinator reads them."""
        self.now += 1.0
        self.worker_tick()
        self.deliver()

    def checkpoint(self) -> CheckpointMetadata:
        """An interval passes; one checkpoint is triggered, acknowledged and completed."""
        self.now += INTERVAL_S
        before = len(self.completed)
        self.tick()
        if not self.coordinator.pending:
            raise RuntimeError("no checkpoint was triggered")
        self.now += 0.5
        self.deliver()
        if len(self.completed) != before + 1:
            raise RuntimeError(f"checkpoint not complete: {self.coordinator.pending}")
        return self.completed[-1]


def compacted(topic: list[Written]) -> list[Written]:
    """What Kafka's log compaction leaves of ``topic``: the newest record per key, in order."""
    last = {w.key: i for i, w in enumerate(topic)}
    return [w for i, w in enumerate(topic) if last[w.key] == i]


@dataclass(frozen=True)
class Report:
    tasks: int
    workers: int
    batched: bool
    restore_cpu_s: float
    heartbeat_round_cpu_s: float
    checkpoint_cpu_s: list[float]
    metadata_cpu_s: list[float]  # of each: the metadata's JSON
    ack_messages_per_worker: tuple[int, int]  # min, max over workers, per checkpoint
    largest_message: int
    startup_records: int
    startup_bytes: int


def run(
    tasks: int,
    workers: int,
    checkpoints: int = 3,
    *,
    batched: bool = True,
    profiler: cProfile.Profile | None = None,
) -> Report:
    sim = Sim(tasks, workers, batched=batched)
    sim.start()
    restore = sim.cpu
    sim.cpu = 0.0
    sim.heartbeats()
    heartbeat = sim.cpu
    durations, metadata = [], []
    sim.profiler = profiler
    for _ in range(checkpoints):
        sim.ack_messages.clear()
        sim.cpu = sim.metadata_cpu = 0.0
        sim.checkpoint()
        durations.append(sim.cpu)
        metadata.append(sim.metadata_cpu)
    per_worker = [sim.ack_messages[m] for m in sim.members]
    kept = compacted(sim.topic)
    return Report(
        tasks,
        workers,
        batched,
        restore,
        heartbeat,
        durations,
        metadata,
        (min(per_worker), max(per_worker)),
        max(len(w.value) for w in sim.topic),
        len(kept),
        sum(len(w.value) + len(w.key) for w in kept),
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=100_000)
    p.add_argument("--workers", type=int, default=1_000)
    p.add_argument("--checkpoints", type=int, default=3)
    p.add_argument("--per-task-acks", action="store_true", help="one ack message per task")
    p.add_argument("--profile", action="store_true", help="cProfile of the checkpoints")
    p.add_argument("--default-gc", action="store_true", help="not a coordinator's GC settings")
    args = p.parse_args(argv)
    if not args.default_gc:
        tune_gc()
    prof = cProfile.Profile() if args.profile else None
    r = run(
        args.tasks, args.workers, args.checkpoints, batched=not args.per_task_acks, profiler=prof
    )
    acks = "batched" if r.batched else "per-task"
    gcs = "default GC" if args.default_gc else "a coordinator's GC settings"
    print(f"{r.tasks:,} tasks on {r.workers:,} workers ({acks} acks, {gcs})")
    print(f"restore -> resume: {r.restore_cpu_s:.3f} s coordinator CPU")
    print(f"one heartbeat round: {r.heartbeat_round_cpu_s:.3f} s coordinator CPU")
    cps = ", ".join(f"{s:.3f}" for s in r.checkpoint_cpu_s)
    print(f"checkpoint trigger -> complete: {cps} s coordinator CPU")
    meta = ", ".join(f"{s:.3f}" for s in r.metadata_cpu_s)
    print(f"  of which the completed checkpoint's metadata JSON: {meta} s")
    lo, hi = r.ack_messages_per_worker
    print(f"acknowledgement messages per worker per checkpoint: {lo}..{hi}")
    print(f"largest control message: {r.largest_message:,} bytes")
    print(f"a starting worker reads: {r.startup_records:,} records, {r.startup_bytes:,} bytes")
    if prof is not None:
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
