"""A worker's query service: a query in, its answer out (docs/queries.md).

``latest``: the key's task (the job's partitioner: :mod:`kstream.query.operators`) is
looked up in the directory (:mod:`kstream.query.routing`): this worker reads its
running task through the gate (:mod:`kstream.query.gate`), or forwards the query once
to the owner, or answers 503 "moving". ``checkpointed``: this worker reads the task's
snapshot of the newest completed checkpoint (or the one asked for) from the store
(:mod:`kstream.query.stored`) — any worker can, the owner's failure included. A scan
without ``task`` asks every task of the stage and merges their entries by key.
"""

from __future__ import annotations

import http.client
import json
import logging
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kstream.checkpointstorage.base import StoreError
from kstream.query.gate import GateTimeout, StateGate
from kstream.query.operators import OperatorInfo, QueryError
from kstream.query.read import Query, Tables, peek_read, read
from kstream.query.routing import Directory, Forward, Local, Moving
from kstream.query.stored import StoredState
from kstream.snapshots.restore import CorruptSnapshotError
from kstream.state.base import NotNow

log = logging.getLogger(__name__)

FORWARDED = "X-Kstream-Forwarded"
SIDECAR = "X-Kstream-Sidecar"
"""On a request the query sidecar relays to its worker: the worker answers a
``checkpointed`` lookup of a snapshot it is pinning for the sidecar with ``PINNING``
instead of reading the checkpoint store (hundreds of ms the first time): the sidecar
waits for the snapshot and answers it."""
PINNING = "pinning"
FORWARD_TIMEOUT_S = 5.0


@dataclass
class Answer:
    """An HTTP status, its JSON body and extra headers."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


class LocalTasks(Protocol):
    """What the worker offers the service (reads happen under the gate)."""

    def running(self, task: str) -> bool:
        """Whether this worker runs ``task`` now."""

    def tables(self, task: str, operator: str) -> Tables | None:
        """``task``'s tables of ``operator``; None if the task does not run here."""

    def position(self, task: str) -> dict[str, Any]:
        """Where ``task`` is: its input offsets (the next to process)."""

    def published(self, task: str) -> dict[str, Any] | None:
        """``position`` as the processing thread last published it (after a feed: all
        of its state is newer), for reads on another thread; None: none yet."""


def _moving(m: Moving) -> Answer:
    return Answer(
        503,
        {"error": "moving", "task": m.task, "reason": m.reason, "retry_after_ms": m.retry_after_ms},
        {"Retry-After": str(max(1, -(-m.retry_after_ms // 1000)))},
    )


def _order(entry: dict[str, Any]) -> tuple[int, Any]:
    key = entry.get("key")
    if isinstance(key, bool) or not isinstance(key, int | float | str):
        return (2, json.dumps(key, sort_keys=True))
    return (0, key) if not isinstance(key, str) else (1, key)


class QueryService:
    """Answers queries for one worker (module doc)."""

    front = False
    """A front of the worker's endpoint (the query sidecar, :mod:`kstream.query.sidecar`):
    what ``answer_here`` does not answer goes to ``relay``."""

    def relay(self, target: bytes, headers: dict[str, str]) -> Answer:
        """The worker's answer to the request for ``target`` (a front only)."""
        raise NotImplementedError

    def __init__(
        self,
        operators: dict[str, OperatorInfo],
        directory: Directory,
        gate: StateGate,
        local: LocalTasks,
        stored: StoredState | None,
        *,
        token: str | None = None,
    ) -> None:
        self.operators = operators
        self.directory = directory
        self.gate = gate
        self.local = local
        self.stored = stored
        self.token = token
        self._conns = threading.local()
        self.pinning: Callable[[str], bool] | None = None
        """Whether this worker's query sidecar is being given its snapshot of ``task``
        at the newest completed checkpoint (a worker with a sidecar)."""

    def _info(self, q: Query) -> OperatorInfo:
        info = self.operators.get(q.operator)
        if info is None:
            raise QueryError(
                f"no stateful operator {q.operator!r} (operators: "
                f"{', '.join(sorted(self.operators)) or 'none'})",
                404,
            )
        return info

    def answer(
        self, op: str, operator: str, params: dict[str, str], forwarded: bool,
        *, sidecar: bool = False,
    ) -> Answer:  # fmt: skip
        """The answer to a query (any thread but the one holding the gate; ``sidecar``:
        relayed by this worker's query sidecar)."""
        try:
            q = Query.from_params(op, operator, params)
            info = self._info(q)
            if q.consistency == "checkpointed":
                if sidecar and self.pinning is not None and q.checkpoint is None:
                    task = self._task(info, q) if q.op != "scan" else None
                    if task is not None and self.pinning(task):
                        return Answer(503, {"error": PINNING, "task": task, "retry_after_ms": 10},
                                      {"Retry-After": "1"})  # fmt: skip
                return self._checkpointed(info, q)
            if q.op == "scan" and q.task is None and q.partition is None:
                return self._scan_all(info, q, forwarded)
            return self._latest(info, q, self._task(info, q), forwarded)
        except QueryError as e:
            return Answer(e.status, {"error": str(e)})
        except GateTimeout as e:
            return Answer(503, {"error": "busy", "reason": str(e), "retry_after_ms": 1000},
                          {"Retry-After": "1"})  # fmt: skip
        except (StoreError, CorruptSnapshotError) as e:
            return Answer(503, {"error": "store", "reason": str(e)}, {"Retry-After": "1"})

    def answer_here(
        self, op: str, operator: str, params: dict[str, str], forwarded: bool
    ) -> Answer | None:
        """The answer, if this worker's running task gives it (or it is an error, or
        "moving"), read at once: the caller holds the gate. None: the query needs a
        forward, the store or every task — ``answer`` it on another thread."""
        try:
            q = Query.from_params(op, operator, params)
            info = self._info(q)
            if q.consistency == "checkpointed" or (
                q.op == "scan" and q.task is None and q.partition is None
            ):
                return None
            task = self._task(info, q)
            route = self.directory.route(task, self.local.running(task), forwarded=forwarded)
            if isinstance(route, Forward):
                return None
            if isinstance(route, Moving):
                return _moving(route)
            return self._read_local(info, q, task)
        except QueryError as e:
            return Answer(e.status, {"error": str(e)})

    def answer_concurrent(
        self, op: str, operator: str, params: dict[str, str], forwarded: bool
    ) -> Answer | None:
        """The answer of a ``latest`` point lookup of a task running here, read while
        the processing thread may be working (:func:`~kstream.query.read.peek_read`);
        its ``position`` was published before the read, so the value reflects at least
        the records before those offsets. None: answer it under the gate (``answer``)."""
        try:
            q = Query.from_params(op, operator, params)
            info = self._info(q)
            if q.consistency != "latest" or q.op == "scan":
                return None
            task = self._task(info, q)
            route = self.directory.route(task, self.local.running(task), forwarded=forwarded)
            if isinstance(route, Moving):
                return _moving(route)  # (at once: a restore holds the loop up longest)
            if not isinstance(route, Local):
                return None
            position = self.local.published(task)  # first: a lower bound of the read
            tables = self.local.tables(task, info.id) if position is not None else None
            if tables is None:
                return None
            body = peek_read(info, q, tables) | {"position": position}
            return Answer(200, self._head(info, q, task) | body)
        except QueryError as e:
            return Answer(e.status, {"error": str(e)})
        except (NotNow, RuntimeError, KeyError):  # (a dict the owner changed under us)
            return None
        except Exception:  # a bug: the gate's way still answers
            log.exception("query %s %s beside the loop failed", operator, op)
            return None

    def _task(self, info: OperatorInfo, q: Query) -> str:
        if q.task is not None:
            if q.task not in info.tasks():
                raise QueryError(f"task={q.task!r}: {info.id} runs in {', '.join(info.tasks())}")
            return q.task
        if q.partition is not None:
            if not 0 <= q.partition < info.partitions:
                raise QueryError(f"partition={q.partition}: {info.stage} has {info.partitions}")
            return f"{info.stage}-{q.partition}"
        task = info.task_of(info.parse_key(q.key or ""), q.partitioner)
        assert task is not None  # a worker's operators know their partitioner
        return task

    # ---- latest ------------------------------------------------------------------------------

    def _latest(self, info: OperatorInfo, q: Query, task: str, forwarded: bool) -> Answer:
        route = self.directory.route(task, self.local.running(task), forwarded=forwarded)
        if isinstance(route, Moving):
            return _moving(route)
        if isinstance(route, Forward):
            return self._forward(route, q)
        assert isinstance(route, Local)
        return self.gate.run(lambda: self._read_local(info, q, task))

    def _read_local(self, info: OperatorInfo, q: Query, task: str) -> Answer:
        """Read this worker's task (the gate held): "moving" if it no longer runs here."""
        tables = self.local.tables(task, info.id)
        if tables is None:
            return _moving(Moving(task, f"task {task} stopped running here"))
        body = read(info, q, tables) | {"position": self.local.position(task)}
        return Answer(200, self._head(info, q, task) | body)

    def _head(self, info: OperatorInfo, q: Query, task: str | None) -> dict[str, Any]:
        return {
            "operator": info.id,
            "query": q.op,
            "consistency": q.consistency,
            "task": task,
            "worker": self.directory.me,
        }

    def _forward(self, route: Forward, q: Query) -> Answer:
        url = urllib.parse.urlsplit(route.url)
        path = f"/state/{urllib.parse.quote(q.operator)}/{q.op}?" + urllib.parse.urlencode(
            {**q.params(), "task": route.task}
        )
        headers = {FORWARDED: self.directory.me or "1"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        conns: dict[str, http.client.HTTPConnection] = self._conns.__dict__
        for fresh in (False, True):
            conn = conns.get(url.netloc)
            if conn is None or fresh:
                conn = conns[url.netloc] = http.client.HTTPConnection(
                    url.netloc, timeout=FORWARD_TIMEOUT_S
                )
            try:
                conn.request("GET", path, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                body = json.loads(data) if data else {}
                retry = resp.getheader("Retry-After")
                return Answer(resp.status, body, {"Retry-After": retry} if retry else {})
            except (OSError, http.client.HTTPException, ValueError) as e:
                conn.close()
                if fresh:
                    reason = f"the owner of {route.task} ({route.member}) did not answer: {e}"
                    return _moving(Moving(route.task, reason))
        raise AssertionError("unreachable")

    def _scan_all(self, info: OperatorInfo, q: Query, forwarded: bool) -> Answer:
        entries: list[dict[str, Any]] = []
        tasks: dict[str, Any] = {}
        more = False
        for task in info.tasks():
            one = self._latest(info, q, task, forwarded)
            if one.status != 200:
                return one  # one task moving: the whole scan is
            entries += one.body.get("entries", [])
            more = more or bool(one.body.get("more"))
            tasks[task] = {"worker": one.body.get("worker"), "position": one.body.get("position")}
        entries.sort(key=_order)
        more = more or len(entries) > q.limit
        body = self._head(info, q, None) | {"entries": entries[: q.limit], "more": more}
        return Answer(200, body | {"tasks": tasks})

    # ---- checkpointed -----------------------------------------------------------------------

    def _checkpointed(self, info: OperatorInfo, q: Query) -> Answer:
        if self.stored is None:
            raise QueryError("checkpointed reads need checkpointing (a checkpoint store)", 404)
        meta = self.stored.metadata(
            q.checkpoint if q.checkpoint is not None else self.directory.completed
        )
        return Answer(200, answer_stored(self.stored, meta, info, q, self._head))


def answer_stored(
    stored: StoredState,
    meta: Any,
    info: OperatorInfo,
    q: Query,
    head: Callable[[OperatorInfo, Query, str | None], dict[str, Any]],
) -> dict[str, Any]:
    """A query's answer from the snapshots of checkpoint (or savepoint) ``meta``: the
    key's task when the partitioner is known, else every task of the stage."""
    if q.task is not None:
        tasks = [q.task]
    elif q.partition is not None:
        tasks = [f"{info.stage}-{q.partition}"]
    elif q.op != "scan" and (t := info.task_of(info.parse_key(q.key or ""), q.partitioner)):
        tasks = [t]
    else:
        tasks = info.tasks()
    position = {"checkpoint": meta.checkpoint_id}
    if q.op != "scan":
        first: dict[str, Any] | None = None
        for task in tasks:
            got = stored.read(meta, task, info.id, lambda t: read(info, q, t))
            if got is None:
                continue
            body = head(info, q, task) | got | {"position": position}
            if got.get("found"):
                return body
            first = first or body
        return first or head(info, q, None) | {"found": False, "position": position}
    entries: list[dict[str, Any]] = []
    more = False
    for task in tasks:
        got = stored.read(meta, task, info.id, lambda t: read(info, q, t))
        if got is not None:
            entries += got["entries"]
            more = more or got["more"]
    entries.sort(key=_order)
    more = more or len(entries) > q.limit
    return head(info, q, None) | {
        "entries": entries[: q.limit],
        "more": more,
        "position": position,
    }
