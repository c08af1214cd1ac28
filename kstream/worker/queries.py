"""A worker's queryable state (docs/queries.md): its settings, what it offers the query
service (its running tasks' tables and positions, read under the gate) and the
endpoint it serves and announces in its heartbeats."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kstream.checkpointstorage.base import CheckpointStore
from kstream.metrics.server import PortSpec
from kstream.plan import JobPlan
from kstream.protocol.messages import CheckpointCompleted, Message
from kstream.query.gate import StateGate
from kstream.query.operators import of_plan
from kstream.query.read import Tables
from kstream.query.routing import Directory
from kstream.query.server import QueryServer, bind
from kstream.query.service import QueryService
from kstream.query.settings import QuerySettings
from kstream.query.stored import StoredState
from kstream.worker.querysidecar import QuerySidecar
from kstream.worker.runner import TaskRunner
from kstream.worker.tasks import WorkerTasks

QUERY_SLICE = 256
"""Records per feed at most while the endpoint serves: the loop answers waiting queries
between two feeds, so this bounds how long one waits (about 3 ms of w2's work)."""


class WorkerQueries:
    """The query side of one worker; the loop holds ``gate`` while it touches state."""

    def __init__(
        self,
        plan: JobPlan,
        tasks: WorkerTasks,
        store: CheckpointStore | None,
        state_root: Path,
        settings: QuerySettings,
        member: Callable[[], str],
        *,
        coordinated: bool,
    ) -> None:
        self.tasks = tasks
        self.settings = settings
        self.member = member
        self.gate = StateGate()
        self.directory = Directory(coordinated=coordinated)
        self.stored = (
            StoredState(store, plan.app_id, state_root / ".query") if store is not None else None
        )
        self.operators = of_plan(plan, settings.source_partitioner)
        self.service = QueryService(
            self.operators,
            self.directory,
            self.gate,
            self,
            self.stored,
            token=settings.token,
        )
        self.server: QueryServer | None = None
        self.service.pinning = self._pinning
        # checkpointed point lookups in a process of their own (with checkpoints only)
        self.sidecar = QuerySidecar(state_root / ".query-sidecar")
        self._with_sidecar = settings.sidecar and store is not None
        # task -> (its runner, its offsets after the runner's last feed): ``published``
        self._published: dict[str, tuple[TaskRunner, dict[str, int | None]]] = {}

    def start(self) -> str:
        """Serve the endpoint (if configured); its URL, or "" when off (OSError when no
        port of the range is free)."""
        self.directory.joined(self.member())
        if PortSpec.parse(self.settings.port).off:
            return ""
        public = bind(self.settings.port, self.settings.host)
        port = public.getsockname()[1]
        if self._with_sidecar and QuerySidecar.can_run(self.operators):
            inner = bind(0, "127.0.0.1")  # the worker's own endpoint, for the sidecar
            self.server = QueryServer(self.service, 0, "127.0.0.1", self.gate, listener=inner)
            self.sidecar.start(public, self.server, self.operators, self.settings.token)
        else:
            self.server = QueryServer(
                self.service, 0, self.settings.host, self.gate, listener=public
            )
        if self.settings.advertise:
            return self.settings.advertise
        host = self.settings.host
        if host in ("0.0.0.0", "::", ""):
            host = socket.gethostname()
        return f"http://{host}:{port}"

    def max_slice(self, batch_size: int) -> int:
        """Records per feed at most (the loop's batch size when no endpoint serves)."""
        return batch_size if self.server is None else min(batch_size, QUERY_SLICE)

    def observe(self, msg: Message) -> None:
        """A control message (the processing thread, in topic order)."""
        self.directory.joined(self.member())
        before = self.directory.completed
        if isinstance(msg, CheckpointCompleted) and (before is None or msg.checkpoint_id > before):
            # The sidecar is told first: a lookup it relays that finds the checkpoint
            # completed here finds its snapshot being pinned too (``pinning``).
            backends = {t: r.backend for t, r in self.tasks.runners.items() if r.running}
            self.sidecar.completed(msg.checkpoint_id, backends, self.directory.me)
        self.directory.observe(msg)

    def _pinning(self, task: str) -> bool:
        return self.sidecar.pinning(task, self.directory.completed)

    # ---- LocalTasks (kstream.query.service) ---------------------------------------------

    def running(self, task: str) -> bool:
        r = self.tasks.runners.get(task)
        return r is not None and r.running

    def tables(self, task: str, operator: str) -> Tables | None:
        r = self.tasks.runners.get(task)
        if r is None or not r.running:
            return None
        return Tables.opened(operator, r.backend.tables())

    def position(self, task: str) -> dict[str, Any]:
        r = self.tasks.runners[task]
        return {"offsets": self._offsets(r), "checkpoint": self.directory.completed}

    def fed(self, runner: TaskRunner) -> None:
        """The processing thread fed ``runner`` (a ``TaskRunner``): publish its offsets
        for concurrent reads (``published``)."""
        if self.server is not None:
            self._published[runner.task_id] = (runner, self._offsets(runner))

    def published(self, task: str) -> dict[str, Any] | None:
        got = self._published.get(task)
        if got is None or self.tasks.runners.get(task) is not got[0]:
            return None  # none yet, or of a runner since replaced (a restore)
        return {"offsets": got[1], "checkpoint": self.directory.completed}

    @staticmethod
    def _offsets(r: TaskRunner) -> dict[str, int | None]:
        return {f"{t}[{p}]": off for (t, p), off in sorted(r.task.seek_positions().items())}

    def close(self) -> None:
        self.sidecar.close()
        if self.server is not None:
            self.server.close()
        if self.stored is not None:
            self.stored.close()
