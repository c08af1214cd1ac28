"""A worker's process-level settings, its errors, and the crash tests' pause points."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from enum import StrEnum

from kstream.config import ConfigError
from kstream.query.settings import QuerySettings
from kstream.snapshots.standby import DEFAULT_BANDWIDTH

log = logging.getLogger(__name__)

PAUSE_MARKER = "KSTREAM-DEBUG-PAUSE"


class WorkerError(RuntimeError):
    """The worker cannot continue; the message says why."""


class PausePoint(StrEnum):
    """Test hook: where a worker stops to be killed (crash tests, never production).

    * ``after-snapshot``: a task took the synchronous part of a checkpoint's
      snapshot, before its upload and acknowledgement (between barrier and ack).
    * ``before-sink-commit``: ``CheckpointCompleted(n)`` arrived and an exactly-once
      sink has records due for *n*, before their transaction.
    """

    AFTER_SNAPSHOT = "after-snapshot"
    BEFORE_SINK_COMMIT = "before-sink-commit"


@dataclass(frozen=True)
class WorkerSettings:
    """Process-level settings of one worker (not part of the job's configuration).

    ``session_timeout_s``: the consumer group's session timeout: how soon a dead
    worker's partitions move to the others. ``drain_timeout_s``: how long a graceful
    stop (:meth:`kstream.worker.loop.Worker.request_stop`) waits for its final
    checkpoint. ``pause_at``: test hook, see :class:`PausePoint`; the worker prints
    ``KSTREAM-DEBUG-PAUSE <point> ...`` on stdout and blocks there until it is stopped
    or killed. ``standby_replicas``: keep standby copies of the tasks this worker would
    get if up to that many other workers left (:mod:`kstream.worker.standbys`), their
    downloads at most ``standby_bandwidth`` bytes/s.
    """

    session_timeout_s: float = 10.0
    pause_at: PausePoint | None = None
    drain_timeout_s: float = 30.0
    query: QuerySettings | None = None  # None: from the environment (KSTREAM_QUERY_*)
    standby_replicas: int = 0  # kstream.worker.standbys; 0: no standby copies
    standby_bandwidth: float | None = DEFAULT_BANDWIDTH  # their downloads' bytes/s (None: any)

    def __post_init__(self) -> None:
        if self.session_timeout_s <= 0:
            raise ConfigError(f"session timeout must be > 0, got {self.session_timeout_s}")
        if self.drain_timeout_s < 0:
            raise ConfigError(f"drain timeout must be >= 0, got {self.drain_timeout_s}")
        if self.standby_replicas < 0:
            raise ConfigError(f"standby replicas must be >= 0, got {self.standby_replicas}")


@dataclass
class WorkerStats:
    """What a worker did so far (logged; read by tests and benchmarks)."""

    records: int = 0
    checkpoints_acked: int = 0
    restores: int = 0
    unverified_control: int = 0  # control messages skipped as unverifiable


#: Set by SIGUSR1 in a worker started with a pause point (``kstream worker
#: --debug-pause-at``): the paused worker goes on, and does not pause again.
PAUSE_RESUMED = threading.Event()


class DebugPause:
    """The crash tests' hook: at ``point``, say so on stdout and block until ``stop`` is
    set — or, once, until ``PAUSE_RESUMED`` (a zombie test: stopped there, then
    continued)."""

    def __init__(self, point: PausePoint | None, stop: threading.Event) -> None:
        self.point = point
        self.stop = stop

    def at(self, point: PausePoint, detail: str) -> None:
        """Block here if the settings name ``point``; otherwise return at once."""
        if self.point is not point:
            return
        print(f"{PAUSE_MARKER} {point.value} {detail}", flush=True)
        log.warning("paused at %s (%s) for a crash test; waiting to be killed", point.value, detail)
        while not self.stop.wait(0.05):
            if PAUSE_RESUMED.is_set():
                self.point = None
                log.warning("resumed at %s (%s) for a crash test", point.value, detail)
                return
