"""Every Prometheus metric kstream exports, defined in one place.

Names follow Prometheus conventions: a ``kstream_`` prefix, base units
(``_seconds``, ``_bytes``), counters end in ``_total``. Labels are bounded: task
ids, topics, partitions and operator names come from the plan, reasons and causes
are the small fixed sets of :mod:`kstream.metrics.labels`; nothing is labelled by
key or by free text.

Who updates what (each process serves its own registry, see
:mod:`kstream.metrics.server`):

* the **worker**: records in/out, consumer lag, event-time lag, late records,
  dead letters, task restores, state size, sink epochs pending — once per batch
  or once per second, never per record;
* the **coordinator**: checkpoint outcomes, durations, alignment, sizes, job
  restarts and the current attempt.

The coordinator's families are the job's, not the process's: a process exports them
only while it hosts the running coordinator (:meth:`Metrics.coordinating`), so of N
workers electing their coordinator exactly one reports the job's checkpoints and
attempt, and an alert on "no completed checkpoint for N minutes" cannot fire on a
worker that merely never coordinated. ``kstream_info``'s ``role`` says the same
(``worker+coordinator`` while the worker hosts it).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

# Checkpoint durations: 10 ms .. 10 min. Sizes: 1 KiB .. 64 GiB (x4 steps).
DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
SIZE_BUCKETS = tuple(float(1024 * 4**i) for i in range(14))


class Metrics:
    """The metric families of one process, registered on ``registry``.

    Tests pass a fresh ``CollectorRegistry``; processes use :data:`METRICS`.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = registry if registry is not None else CollectorRegistry()
        self.registry = r
        self.info = Info("kstream", "The kstream process: app id, role, version.", registry=r)
        self._identity: dict[str, str] = {}
        self._hosting = 0  # coordinators running in this process now
        self._lock = threading.Lock()

        # ---- worker: data ------------------------------------------------------------
        self.records_in = Counter(
            "kstream_records_in",
            "Records read by a task, per input topic (source and internal topics).",
            ["task", "topic"],
            registry=r,
        )
        self.records_out = Counter(
            "kstream_records_out",
            "Records written by a task, per output topic (sinks and internal topics).",
            ["task", "topic"],
            registry=r,
        )
        self.consumer_lag = Gauge(
            "kstream_consumer_lag_records",
            "Records between a partition's high watermark and this worker's read position.",
            ["topic", "partition"],
            registry=r,
        )
        self.event_time_lag = Gauge(
            "kstream_event_time_lag_seconds",
            "Wall clock minus the task's watermark (absent until the task has a watermark).",
            ["task"],
            registry=r,
        )
        self.late_dropped = Counter(
            "kstream_late_records_dropped",
            "Records behind an operator's watermark plus allowed lateness, dropped.",
            ["task", "operator"],
            registry=r,
        )
        self.late_side_output = Counter(
            "kstream_late_records_side_output",
            "Records behind an operator's watermark plus allowed lateness, sent to .late().",
            ["task", "operator"],
            registry=r,
        )
        self.internal_duplicates = Counter(
            "kstream_internal_duplicates_dropped",
            "Second copies of repartition records a producer wrote twice, dropped by the task.",
            ["task"],
            registry=r,
        )
        self.dead_letters = Counter(
            "kstream_dead_letters",
            "Records sent to <app>.dlq, per input topic and reason (see kstream.metrics.labels).",
            ["topic", "reason"],
            registry=r,
        )
        # ---- worker: state, restores, sinks -------------------------------------------
        self.task_restores = Counter(
            "kstream_task_restores",
            "Tasks this worker restored (from a checkpoint or to the start positions).",
            ["source"],  # checkpoint | start
            registry=r,
        )
        self.restore_duration = Histogram(
            "kstream_restore_duration_seconds",
            "Time to restore one task's state (download or local reuse, open, sink recovery).",
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.restore_downloaded = Counter(
            "kstream_restore_downloaded_bytes",
            "Bytes downloaded from the checkpoint store by restores.",
            registry=r,
        )
        self.state_size = Gauge(
            "kstream_state_size_bytes",
            "Size of a task's state in its latest snapshot.",
            ["task"],
            registry=r,
        )
        self.sink_epochs_pending = Gauge(
            "kstream_sink_epochs_pending",
            "Exactly-once sink epochs buffered and not yet published (waiting for completion).",
            ["task"],
            registry=r,
        )
        self.sink_pending_bytes = Gauge(
            "kstream_sink_pending_bytes",
            "Key and value bytes in an exactly-once sink's unpublished epochs.",
            ["task"],
            registry=r,
        )
        self.tasks_running = Gauge(
            "kstream_tasks_running", "Tasks this worker runs now.", registry=r
        )

        # ---- coordinator (exported only while this process hosts it) ---------------------
        self.checkpoints_completed = Counter(
            "kstream_checkpoints_completed", "Checkpoints completed.", registry=None
        )
        self.checkpoints_failed = Counter(
            "kstream_checkpoints_failed",
            "Checkpoints that failed (count towards tolerable_failures), by reason.",
            ["reason"],
            registry=None,
        )
        self.checkpoints_aborted = Counter(
            "kstream_checkpoints_aborted",
            "Checkpoints aborted without counting as failures (subsumed, failover), by reason.",
            ["reason"],
            registry=None,
        )
        self.checkpoint_duration = Histogram(
            "kstream_checkpoint_duration_seconds",
            "Time from a checkpoint's trigger to its last acknowledgement.",
            buckets=DURATION_BUCKETS,
            registry=None,
        )
        self.checkpoint_alignment = Histogram(
            "kstream_checkpoint_alignment_seconds",
            "Per task: time from the trigger reaching the worker to the aligned snapshot.",
            buckets=DURATION_BUCKETS,
            registry=None,
        )
        self.checkpoint_size = Histogram(
            "kstream_checkpoint_size_bytes",
            "Full state size of a completed checkpoint (all tasks).",
            buckets=SIZE_BUCKETS,
            registry=None,
        )
        self.checkpoint_uploaded = Histogram(
            "kstream_checkpoint_uploaded_bytes",
            "Bytes uploaded for a completed checkpoint (incremental snapshots).",
            buckets=SIZE_BUCKETS,
            registry=None,
        )
        self.last_checkpoint_id = Gauge(
            "kstream_last_completed_checkpoint_id",
            "Id of the newest completed checkpoint.",
            registry=None,
        )
        self.last_checkpoint_time = Gauge(
            "kstream_last_completed_checkpoint_timestamp_seconds",
            "When the newest checkpoint completed (epoch seconds).",
            registry=None,
        )
        self.job_restarts = Counter(
            "kstream_job_restarts",
            "Restores of the whole job decided by the coordinator, by cause "
            "(cause=start: a job's first start).",
            ["cause"],
            registry=None,
        )
        self.job_attempt = Gauge(
            "kstream_job_attempt",
            "The job's current attempt (raised by every restore).",
            registry=None,
        )
        r.register(
            _WhileCoordinating(
                self,
                [
                    self.checkpoints_completed,
                    self.checkpoints_failed,
                    self.checkpoints_aborted,
                    self.checkpoint_duration,
                    self.checkpoint_alignment,
                    self.checkpoint_size,
                    self.checkpoint_uploaded,
                    self.last_checkpoint_id,
                    self.last_checkpoint_time,
                    self.job_restarts,
                    self.job_attempt,
                ],
            )
        )
        self.control_skipped = Counter(
            "kstream_control_messages_skipped",
            "Malformed control records skipped by this process's control reader.",
            registry=r,
        )

    def identify(self, app_id: str, role: str, version: str) -> None:
        """Set ``kstream_info`` (``role``: worker, coordinator or worker+coordinator)."""
        with self._lock:
            self._identity = {"app_id": app_id, "role": role, "version": version}
            self._show_identity()

    @property
    def hosting_coordinator(self) -> bool:
        """Whether a coordinator runs in this process now (its families are exported)."""
        return self._hosting > 0

    @contextmanager
    def coordinating(self) -> Iterator[None]:
        """While inside, this process hosts the job's coordinator: the job's families are
        exported and a worker's ``role`` reads ``worker+coordinator``."""
        with self._lock:
            self._hosting += 1
            self._show_identity()
        try:
            yield
        finally:
            with self._lock:
                self._hosting -= 1
                self._show_identity()

    def _show_identity(self) -> None:
        if not self._identity:
            return
        role = self._identity["role"]
        if self._hosting and "coordinator" not in role:
            role = f"{role}+coordinator"
        self.info.info({**self._identity, "role": role})


class _WhileCoordinating(Collector):
    """The job's families (checkpoints, restarts, attempt), collected only while the
    process hosts the coordinator."""

    def __init__(self, metrics: Metrics, families: list[MetricWrapperBase]) -> None:
        self._metrics = metrics
        self._families = families

    def collect(self) -> Iterator[Metric]:
        if not self._metrics.hosting_coordinator:
            return
        for family in self._families:
            yield from family.collect()


METRICS = Metrics(REGISTRY)
"""This process's metrics, on prometheus_client's default registry."""
