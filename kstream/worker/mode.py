"""What differs between the worker's three ways of running (docs/design.md §7, §9): the steps
of the loop a mode fills in.

* :class:`~kstream.worker.checkpointed.Checkpointed` (default): the coordinator's
  protocol decides which tasks run and when they checkpoint;
* :class:`~kstream.worker.unchecked.Unchecked` (checkpointing off): tasks start with
  empty state at the group's committed offsets; offsets are committed periodically
  after the output is flushed;
* :class:`~kstream.worker.bounded.Bounded`: one worker reads every source up to the
  end offsets seen at start, stores the final state once and exits.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from typing import Any

from kstream.kafka.source import RawRecord
from kstream.logs import ctx
from kstream.worker.runner import TaskRunner
from kstream.worker.settings import WorkerError

log = logging.getLogger(__name__)

TP = tuple[str, int]


class Mode(ABC):
    """The mode-specific steps of one loop iteration; each returns an exit code to stop."""

    unfed: Callable[[], AbstractSet[TP]] = frozenset
    """The partitions with records read but not fed yet (the loop sets its backlog's):
    the consumer's position is past them, their tasks have not seen them."""

    def start(self) -> None:  # noqa: B027 - optional
        """Before the first iteration."""

    @abstractmethod
    def begin(self, now: float) -> int | None:
        """Before reading records (e.g. control messages)."""

    @abstractmethod
    def stop(self, now: float) -> int | None:
        """A graceful stop was requested: one step of it; an exit code once done."""

    @abstractmethod
    def on_assignment(self, now: float) -> None:
        """The group assignment changed (records fetched around it are read again)."""

    def on_revoke(self, tps: list[TP]) -> None:  # noqa: B027 - optional
        """Partitions are about to move to another worker (inside the consumer's poll)."""

    def on_input(self, now: float) -> None:  # noqa: B027 - optional
        """Records of a user topic arrived."""

    def on_fed(self, tp: TP, records: list[RawRecord]) -> None:  # noqa: B027 - optional
        """``records`` of ``tp`` were fed to its running task."""

    def serving_queries(self, url: str, now: float) -> None:  # noqa: B027 - optional
        """This worker's query endpoint is ``url``."""

    @abstractmethod
    def end(self, now: float) -> int | None:
        """After the batch was fed and the tasks ticked."""

    @property
    def draining(self) -> bool:
        """Stopping gracefully: user-topic inputs stay paused."""
        return False

    def guarded(self, runner: TaskRunner, call: Callable[..., None], *args: Any) -> None:
        """One call of a task with its output written; a failure of the task fails it
        over (:meth:`task_failed`): with checkpointing, the coordinator rolls the job
        back (a restart strategy bounds retries); otherwise the worker stops."""
        try:
            t0 = time.perf_counter()
            runner.step(call, *args)
            took = time.perf_counter() - t0
            if took > 0.25:  # e.g. a watermark that fired many windows at once
                log.debug("task %s: %s took %.0f ms", runner.task_id, call.__name__, took * 1000)
        except WorkerError:
            raise
        except Exception as e:  # user code or corrupt input: the task fails, with the reason
            log.exception(
                "task %s failed in attempt %d",
                runner.task_id,
                runner.attempt,
                extra=ctx(attempt=runner.attempt, task=runner.task_id),
            )
            self.task_failed(runner, f"{type(e).__name__}: {e}")

    def task_failed(self, runner: TaskRunner, reason: str) -> None:
        """A task call raised: without a coordinator to roll back, the worker stops."""
        raise WorkerError(f"task {runner.task_id} failed: {reason}")

    def settle(self) -> None:  # noqa: B027 - optional
        """The worker stops: finish what runs on other threads before the tasks close."""

    def close(self) -> None:  # noqa: B027 - optional
        """The worker stops."""
