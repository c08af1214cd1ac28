"""The worker: one process in consumer group ``<app>`` running the tasks it is assigned.

One readable loop (:meth:`Worker.run`): the mode's start of an iteration (control
messages), a batch of records, each fed to its task, the tasks ticked, the mode's end
of an iteration (acknowledgements, heartbeats, commits), the pauses brought in line.
What differs between checkpointed, unchecked and bounded runs is the mode's
(:mod:`kstream.worker.mode`); the worker's half of the control protocol is a pure
state machine (:mod:`kstream.protocol.worker`); one task's build, restore, snapshot
and acknowledgement are its runner's (:mod:`kstream.worker.runner`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from kstream.checkpointstorage.controlkey import ControlKey
from kstream.checkpointstorage.urls import open_store
from kstream.config import ConfigError, Guarantee, JobConfig
from kstream.job import Job
from kstream.kafka.clients import Producer, make_producer
from kstream.kafka.control import ControlClient, ControlError
from kstream.kafka.delivery import InternalDeliveryError
from kstream.kafka.dlq import DeadLetterWriter
from kstream.kafka.reachability import Reachability
from kstream.kafka.sink import SinkError
from kstream.kafka.source import RawRecord, SourceConsumer, SourceError
from kstream.kafka.worker_transactions import WorkerTransactions
from kstream.metrics.worker import WorkerMetrics, sink_buffers
from kstream.names import commits_topic, worker_client_id, worker_sink_transactional_id
from kstream.plan.fingerprint import fingerprint
from kstream.protocol.messages import Message
from kstream.protocol.worker import WorkerProtocol
from kstream.query.settings import QuerySettings
from kstream.runtime.lateness import late_summary
from kstream.sinkbuffer.epochs import SinkStateError
from kstream.snapshots.standby import StandbyCopies
from kstream.worker.backlog import Backlog
from kstream.worker.bounded import Bounded
from kstream.worker.checkpointed import Checkpointed
from kstream.worker.internalfirst import InternalFirst, read_past
from kstream.worker.mode import TP, Mode
from kstream.worker.queries import WorkerQueries
from kstream.worker.routing import Router
from kstream.worker.runner import RunnerContext
from kstream.worker.settings import DebugPause, WorkerSettings, WorkerStats
from kstream.worker.standbys import Standbys
from kstream.worker.tasks import WorkerTasks
from kstream.worker.unchecked import Unchecked

log = logging.getLogger(__name__)

#: The worker's publishing transactions: the broker aborts one left open this long (a
#: worker killed or frozen in the middle of it), and a new owner of its tasks waits for
#: that (kstream.kafka.worker_transactions). Kafka Streams takes 10 s; a publication of
#: a checkpoint's output must fit in it (-X transaction.timeout.ms=... to change it).
TRANSACTION_TIMEOUT_MS = 20_000

#: A checkpointed worker's ``max.poll.interval.ms`` (librdkafka's default: 5 minutes):
#: how long a restore may keep the processing thread from polling before the worker
#: leaves the group (-X max.poll.interval.ms=... to change it).
MAX_POLL_INTERVAL_MS = 30 * 60 * 1000

#: How often a worker heartbeats its group (at most; a quarter of the session when that
#: is shorter): the others learn of a join or a leave at their next heartbeat, and every
#: hand-over waits for the last of them (-X heartbeat.interval.ms=... to change it).
REBALANCE_HEARTBEAT_MS = 300

IDLE_WAIT_S = 0.005
"""How long an iteration waits for input when none is queued. Control messages and
finished uploads are looked at between waits, so each step of a checkpoint (trigger,
acknowledgement, completion, sink commit) may wait this long: at a 0.2 s interval 50 ms
made the p99 end-to-end latency about 60 ms longer than 20 ms did, and 20 ms about 40 ms
longer than 5 ms (benchmarks/PROFILE.md). Busy workers never wait; an idle one wakes
200 times a second."""


@dataclass
class WorkerClients:
    """The Kafka clients of one worker (``control`` only with checkpointing)."""

    source: SourceConsumer
    producer: Producer  # internal topics': failed deliveries reported (``Router``)
    dlq: DeadLetterWriter
    control: ControlClient | None


def open_clients(
    cfg: JobConfig,
    topics: list[str],
    settings: WorkerSettings,
    *,
    on_assign: Callable[[list[TP]], None],
    on_revoke: Callable[[list[TP]], None],
    key_source: Callable[[], bytes | None] | None = None,
) -> WorkerClients:
    """The clients of a worker of ``cfg`` reading ``topics`` (its group membership)."""
    checkpointed = cfg.checkpointing.enabled and not cfg.bounded
    # One view of the brokers for the source and the control client: an outage is
    # logged once and bounded by --max-outage (kstream.kafka.reachability).
    reachability = Reachability(cfg.max_outage)
    return WorkerClients(
        source=SourceConsumer(
            cfg.bootstrap_servers,
            cfg.group_id,
            topics,
            on_assign=on_assign,
            on_revoke=on_revoke,
            reachability=reachability,
            # Restores position every partition: never the group's offsets, which are
            # the exactly-once publications' (kstream.kafka.source).
            ignore_committed=checkpointed,
            # A checkpointed worker joins once its mode started (a hand-over: §6.6).
            subscribe=not checkpointed,
            cooperative=cfg.cooperative,
            extra={
                "session.timeout.ms": int(settings.session_timeout_s * 1000),
                "heartbeat.interval.ms": min(
                    REBALANCE_HEARTBEAT_MS, int(settings.session_timeout_s * 250)
                ),
                # A restore does not poll the consumer (its partitions are paused, and a
                # rebalance served in the middle of it would pull the tasks from under
                # it): restoring 512 tasks took over librdkafka's 5 minutes on this
                # machine, the worker left the group, and every worker restored again, for
                # good (benchmarks/SCALING.md). The coordinator's restore deadline, which
                # runs from the restore's last progress, watches a restore instead.
                **({"max.poll.interval.ms": MAX_POLL_INTERVAL_MS} if checkpointed else {}),
                **cfg.kafka,
            },
        ),
        producer=make_producer(
            cfg.bootstrap_servers,
            # failed deliveries only, to each record's callback (``Router``)
            extra={"linger.ms": 5, **cfg.kafka, "delivery.report.only.error": True},
        ),
        dlq=DeadLetterWriter(
            cfg.app_id, cfg.bootstrap_servers, cfg.on_bad_record, producer_config=cfg.kafka
        ),
        control=(
            ControlClient(
                cfg.bootstrap_servers,
                cfg.app_id,
                extra=cfg.kafka,
                reachability=reachability,
                key_source=key_source,
            )
            if checkpointed
            else None
        ),
    )


class Worker:
    """Runs the tasks of ``job`` that the consumer group assigns to this process."""

    def __init__(
        self,
        job: Job,
        *,
        member_label: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        batch_size: int = 2000,
        heartbeat_interval: float = 1.0,
        commit_interval: float = 1.0,
        stop_when_idle: float | None = None,
        settings: WorkerSettings | None = None,
    ) -> None:
        self.job = job
        self.cfg: JobConfig = job.config
        self.plan = job.plan
        self.settings = settings or WorkerSettings()
        self.clock = clock
        self.batch_size = batch_size
        self.checkpointed = self.cfg.checkpointing.enabled and not self.cfg.bounded
        self.stop_event = threading.Event()  # stop now
        self.stop_requested = threading.Event()  # stop after a final checkpoint
        self.stats = WorkerStats()
        self.metrics = WorkerMetrics()
        self._next_export = 0.0
        self._assignment_changed = False
        topics = sorted({i.topic for spec in self.plan.tasks for i in spec.inputs})
        if self.cfg.cooperative and (self.plan.internal_topic_partitions or len(topics) != 1):
            raise ConfigError(
                "partition.assignment.strategy=cooperative-sticky needs a job without a "
                f"key_by that reads one topic (this one reads {', '.join(topics)}"
                f"{' and repartitions' if self.plan.internal_topic_partitions else ''}): "
                "only then are its tasks' partitions assigned one at a time"
            )
        store = open_store(self.cfg.store_url, self.cfg.store_options)
        clients = open_clients(
            self.cfg,
            topics,
            self.settings,
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            key_source=ControlKey(store, self.cfg.app_id).get,
        )
        self.source, self.producer, self.dlq = clients.source, clients.producer, clients.dlq
        self.control = clients.control
        self.router = Router(
            self.producer,
            self.dlq,
            self.plan.internal_topic_partitions,
            send=None if self.control is None else self.control.report,
            metrics=self.metrics,
        )
        # One transactional producer for all the exactly-once sinks of this process
        # (kstream.kafka.worker_transactions); without checkpoints sinks are
        # at-least-once, through self.producer.
        unchecked = not self.checkpointed and not self.cfg.bounded
        self.transactions = WorkerTransactions(
            self.cfg.bootstrap_servers,
            worker_sink_transactional_id(self.cfg.app_id),
            commits_topic(self.cfg.app_id),
            producer_config={"transaction.timeout.ms": TRANSACTION_TIMEOUT_MS, **self.cfg.kafka},
            group_metadata=self.source.group_metadata,
        )
        context = RunnerContext(
            plan=self.plan,
            config=self.cfg,
            store=store,
            state_root=Path(self.cfg.state_dir) / self.cfg.app_id,
            router=self.router,
            dlq=self.dlq,
            pause=DebugPause(self.settings.pause_at, self.stop_event),
            clock=clock,
            sink_guarantee=(
                None if self.checkpointed or self.cfg.bounded else Guarantee.AT_LEAST_ONCE
            ),
            metrics=self.metrics,
            transactions=None if unchecked else self.transactions,
            wait_stable=None if unchecked else self._wait_stable,
        )
        self.context = context
        self.tasks = WorkerTasks(self.plan, self.source, context)
        self.standby: StandbyCopies | None = None  # --standby-replicas: kstream.worker.standbys
        label = member_label or f"{os.uname().nodename}/{os.getpid()}"
        self.mode: Mode
        if self.control is not None:
            plan = fingerprint(self.plan)
            protocol = WorkerProtocol(
                label,
                now=clock(),
                heartbeat_interval=heartbeat_interval,
                stop_when_idle=stop_when_idle,
                drain_timeout_s=self.settings.drain_timeout_s,
                plan=plan.digest,
                client_id=worker_client_id(),
                cooperative=self.cfg.cooperative,
                producer=self.transactions.transactional_id,
            )
            self.mode = Checkpointed(
                protocol, self.control, self.tasks, self.source, store, self.stats, label,
                fingerprint=plan,
            )  # fmt: skip
            self.mode.observers.append(self._on_control)
            if self.settings.standby_replicas > 0:
                self.standby = StandbyCopies(
                    store,
                    self.cfg.app_id,
                    context.state_root,
                    bandwidth=self.settings.standby_bandwidth,
                )
                feed = Standbys(
                    self.standby, self.plan, self.settings.standby_replicas, lambda: protocol.member
                )
                self.mode.observers.append(feed.observe)
                self.tasks.before_restore.append(self.standby.claim)
                self.standby.start()
        elif self.cfg.bounded:
            self.mode = Bounded(
                self.tasks, self.source, self.router, self.dlq, store, self.cfg.app_id, self.stats
            )
        else:
            self.mode = Unchecked(
                self.tasks, self.source, self.router, self.dlq, now=clock(),
                commit_interval=commit_interval, stop_when_idle=stop_when_idle,
            )  # fmt: skip

        self.queries = WorkerQueries(
            self.plan,
            self.tasks,
            store if self.checkpointed else None,
            context.state_root,
            self.settings.query or QuerySettings.from_env(),
            lambda: protocol.member if self.control is not None else label,
            coordinated=self.control is not None,
        )

    def _on_control(self, msg: Message) -> None:
        self.queries.observe(msg)

    # ---- group membership callbacks (inside consume) ----------------------------------

    def _on_assign(self, tps: list[TP]) -> None:
        self._assignment_changed = True

    def _wait_stable(self, tps: list[TP]) -> None:
        """A task's new owner waits for a previous owner's publication in flight."""
        try:
            self.source.wait_stable(tps)
        except SourceError as e:
            raise SinkError(str(e)) from e

    def _on_revoke(self, tps: list[TP]) -> None:
        self._assignment_changed = True
        self.mode.on_revoke(tps)

    # ---- the loop -----------------------------------------------------------------------

    def run(self) -> int:
        """Run until stopped (0), the job failed (1), or a bounded run finished (0)."""
        gate = self.queries.gate
        gate.enter()  # the state is this thread's, but while it waits for input
        try:
            url = self.queries.start()
            if url:
                log.info("queries at %s", url)
            self.mode.serving_queries(url, self.clock())  # announced in its heartbeats
            self.mode.start()
            return self._loop()
        # An outage past --max-outage, a refused write, an internal record refused, a sink
        # that cannot publish (bounded runs; checkpointed ones fail over): the reason
        except (ControlError, InternalDeliveryError, SinkError) as e:
            if isinstance(e, SinkStateError):
                raise  # a bug: its traceback
            log.error("kstream: job failed: %s", e)
            return 1
        finally:
            self.close()
            gate.leave()

    def request_stop(self) -> None:
        """Stop gracefully (safe from signal handlers and other threads): read no more
        input, have a checkpoint taken of everything read (so exactly-once output is
        published and a restart replays nothing), then stop; at most
        ``settings.drain_timeout_s`` is spent waiting for that checkpoint."""
        self.stop_requested.set()

    def _loop(self) -> int:
        mode, tasks, internal = self.mode, self.tasks, self.tasks.internal_parts
        # Waiting queries are answered between two slices: with an endpoint, slices are
        # short (kstream.query.gate), so a query waits milliseconds, not a batch.
        backlog = Backlog(self.queries.max_slice(self.batch_size), first=internal.__contains__)
        mode.unfed = backlog.partitions  # read is not fed (a bounded run's end: its tasks')
        # Internal records queued behind prefetched user-topic ones are read first.
        first = InternalFirst(internal.__contains__, self.clock())
        seeks = tasks.seeks
        while not self.stop_event.is_set():
            now = self.clock()
            code = mode.begin(now)
            if code is None and self.stop_requested.is_set():
                code = mode.stop(now)
            if code is not None:
                return code
            if mode.draining:  # a stop (signal or StopJob) just now: read no more user input
                tasks.sync_pauses(draining=True)
                # Unfed user input is not part of the final checkpoint: drop it and read
                # it again from there after a restart (kstream.worker.backlog).
                for tp, offset in backlog.drop(lambda t: t not in internal).items():
                    tasks.seek_back(tp, offset)
                seeks = tasks.seeks  # the internal records left are still to be fed
            if tasks.seeks != seeks:  # read again from the new positions
                sought = tasks.take_sought()
                if sought is None or not self.cfg.cooperative:
                    backlog.clear()
                else:  # (an adoption: the tasks that ran on keep what they read)
                    gone = {tp for tp in backlog.partitions() if tp in sought}
                    gone |= {tp for tp in backlog.partitions() if not tasks.running_for(tp)}
                    backlog.drop_partitions(gone.__contains__)
            # Source partitions run ahead (watermark alignment): held in the backlog.
            held = tasks.held(backlog.partitions())
            # Internal records starved behind user-topic ones: read past those (or, with
            # much in hand, skip them: resumed by sync_pauses below).
            busy = backlog.has_topic(lambda t: t not in internal)
            starved = first.starved(self.source, now, busy)
            size = read_past(len(backlog), self.batch_size) if starved else self.batch_size
            if not size:
                self.source.pause(starved)
                size = self.batch_size
            if starved or not backlog.feedable(held):
                # A firing going on is work to do: take what is queued, wait for nothing.
                firing = not mode.draining and any(r.task.firing for r in tasks.running())
                self.queries.gate.leave()  # queries read state while the loop waits
                try:
                    wait = 0.0 if firing or starved else IDLE_WAIT_S
                    batch = self.source.consume_batch(size, wait)
                finally:
                    self.queries.gate.enter()
                first.read(batch, now)
                if self._assignment_changed:
                    self._assignment_changed = False
                    log.info("assignment changed: %s", sorted(self.source.assignment))
                    mode.on_assignment(now)
                    if self.cfg.cooperative:  # the partitions that stay keep their positions
                        batch = {tp: rs for tp, rs in batch.items() if tasks.running_for(tp)}
                        idle = {tp for tp in backlog.partitions() if not tasks.running_for(tp)}
                        backlog.drop_partitions(idle.__contains__)
                    else:
                        batch = {}  # fetched around a rebalance: read again after the seeks
                        backlog.clear()
                backlog.add(batch)
            seeks = tasks.seeks
            if backlog.has_topic(lambda t: t not in internal) or (
                not mode.draining and any(r.task.firing for r in tasks.running())
            ):
                # Input from a user topic (internal records are its consequences, and
                # carry barriers and watermarks even when no input arrives), or a window
                # firing going on (not idle; a stop takes its checkpoint mid-firing).
                mode.on_input(now)
            # At most about a second of work before signals and control messages are
            # looked at again (slow user functions: kstream.worker.backlog).
            # A partition whose hold ends runs only until it is ahead again.
            backlog.feed(
                partial(self._feed, now=now), held, lambda tp: tasks.held(backlog.partitions(), tp)
            )
            wall_ms = int(time.time() * 1000)  # processing-time timers run on the wall clock
            for r in tasks.running():
                mode.guarded(r, r.task.tick, now, wall_ms)
            self.router.write_sets()  # the barriers and watermarks passed in this iteration
            code = mode.end(now)
            if code is not None:
                return code
            self._export(now)
            tasks.sync_pauses(draining=mode.draining, full=backlog.full(held))
        return 0

    def _feed(self, tp: TP, records: list[RawRecord], now: float) -> None:
        self.queries.gate.serve()  # waiting queries, between two feeds
        r = self.tasks.running_for(tp)
        if r is None:
            return  # not ours to run now: paused; re-read after the next restore
        topic, partition = tp
        self.stats.records += len(records)
        self.metrics.records_in(r.task_id, topic, len(records))
        if topic in self.tasks.internal_parts:
            items = self.tasks.decode_internal(tp, records, self.dlq)
            self.mode.guarded(r, r.task.feed_internal, topic, partition, items, now)
        else:
            self.mode.guarded(r, r.task.feed_source, topic, partition, records, now)
        self.mode.on_fed(tp, records)
        self.queries.fed(r)  # its offsets, for lookups answered while the loop works

    def _export(self, now: float) -> None:
        """Once a second: the metrics read from the tasks, their sinks and the consumer."""
        if now < self._next_export:
            return
        self._next_export = now + 1.0
        running = self.tasks.running()
        for r in running:
            epochs, exactly_once = sink_buffers(r.sinks.values())
            if exactly_once:
                self.metrics.sink_buffer(r.task_id, epochs, r.sink_blob_bytes)
        self.metrics.sync({r.task_id: r.task for r in running}, self.source.lag())

    def close(self) -> None:
        self.queries.close()
        runners = sorted(self.tasks.runners.items())
        summary = late_summary((t, r.task.late_counts()) for t, r in runners)
        if summary:  # visible at the default log level: late input is lost input
            log.warning("late records since the tasks started, per operator:\n%s", summary)
        self.mode.settle()
        if self.standby is not None:
            self.standby.close()
        self.tasks.stop_all()
        self.transactions.close()
        self.context.close()
        self.producer.flush(10)
        self.dlq.close()
        self.source.close()
        self.mode.close()
