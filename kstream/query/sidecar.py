"""The query sidecar: a child process of the worker in front of its query endpoint.

Why a process: in the worker, no thread can answer while the processing thread holds
the GIL in a C call (a RocksDB write batch: 60 ms per 100 000 entries; a RocksDB
checkpoint: 100+ ms), and a ``checkpointed`` point lookup needs none of the worker's
state. The sidecar owns the worker's public query port (the worker binds it and hands
the listening socket over) and answers there, with the same server
(:class:`~kstream.query.server.QueryServer`), the same reads
(:func:`~kstream.query.read.read`) and the same answers:

* ``checkpointed`` point lookups (``get``, and ``windows`` of fixed windows by time)
  of the newest completed checkpoint, for the tasks whose local snapshot of it the
  worker pinned (:mod:`kstream.query.pinned`), from those snapshots opened read-only;
* everything else — ``latest``, scans, ``checkpoint=N``, a task not pinned here, a
  checkpoint newer than the pinned one, ``GET /state`` — is relayed as it came to the
  worker's endpoint on a loopback port of its own, and its answer relayed back.
"""

from __future__ import annotations

import gc
import http.client
import logging
import sys
import threading
import urllib.parse
from multiprocessing.connection import Connection
from pathlib import Path
from socket import socket
from typing import Any

import httptools
import orjson

from kstream.query.gate import StateGate
from kstream.query.operators import OperatorInfo, QueryError
from kstream.query.pinned import PinnedViews
from kstream.query.read import Query, Tables, read
from kstream.query.routing import Directory
from kstream.query.server import QueryServer
from kstream.query.service import FORWARDED, PINNING, SIDECAR, Answer, QueryService
from kstream.state.base import NotNow

log = logging.getLogger(__name__)

SWITCH_S = 0.0005
"""The sidecar's switch interval: a relay on a pool thread lets the serving thread in
within half a millisecond."""
RELAY_TIMEOUT_S = 10.0
PIN_WAIT_S = 2.0  # how long a lookup waits for a snapshot being pinned at most
_RELAYED = ("authorization", FORWARDED.lower(), SIDECAR.lower())


class _NoTasks:
    """The sidecar runs no task (``LocalTasks``): its reads are of pinned snapshots."""

    def running(self, task: str) -> bool:
        return False

    def tables(self, task: str, operator: str) -> Tables | None:
        return None

    def position(self, task: str) -> dict[str, Any]:
        return {}

    def published(self, task: str) -> dict[str, Any] | None:
        return None


class SidecarService(QueryService):
    """Answers ``checkpointed`` point lookups from pinned snapshots, relays the rest to
    the worker's endpoint at ``worker`` (``host:port``)."""

    front = True

    def __init__(
        self,
        operators: dict[str, OperatorInfo],
        pinned: PinnedViews,
        worker: str,
        *,
        token: str | None = None,
    ) -> None:
        super().__init__(operators, Directory(), StateGate(), _NoTasks(), None, token=token)
        self.pinned = pinned
        self.worker = worker
        self._relays = threading.local()

    def answer_here(
        self, op: str, operator: str, params: dict[str, str], forwarded: bool
    ) -> Answer | None:
        if params.get("consistency") != "checkpointed" or op == "scan":
            return None
        pinned = self.pinned.current
        try:
            q = Query.from_params(op, operator, params)
            info = self.operators.get(q.operator)
            if info is None or pinned.checkpoint is None:
                return None
            if q.checkpoint is not None and q.checkpoint != pinned.checkpoint:
                return None
            task = self._task_of(info, q)
            view = pinned.views.get(task) if task is not None else None
            if view is None:
                return None
            tables = Tables.of(info.id, {n: _opener(view, n) for n in view.table_names()})
            body = read(info, q, tables)
        except (QueryError, NotNow):
            return None  # the worker says what is wrong, or reads it its way
        head = {"operator": info.id, "query": q.op, "consistency": q.consistency,
                "task": task, "worker": pinned.worker}  # fmt: skip
        return Answer(200, head | body | {"position": {"checkpoint": pinned.checkpoint}})

    @staticmethod
    def _task_of(info: OperatorInfo, q: Query) -> str | None:
        if q.task is not None:
            return q.task
        if q.partition is not None:
            return f"{info.stage}-{q.partition}"
        return info.task_of(info.parse_key(q.key or ""), q.partitioner)

    def _pinning(self, target: bytes) -> Answer | None:
        """A checkpointed lookup of a task whose snapshot of the newest checkpoint the
        worker is pinning: answered once it is (a few ms), not by the worker's store."""
        self.pinned.read_pending()  # (now: the worker may have just said so)
        url = httptools.parse_url(target)
        parts = [urllib.parse.unquote(p) for p in url.path.decode("latin-1").strip("/").split("/")]
        query = url.query.decode("latin-1") if url.query else ""
        params = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
        if len(parts) != 3 or params.get("consistency") != "checkpointed" or "checkpoint" in params:
            return None
        op, operator = parts[2], parts[1]
        info = self.operators.get(operator)
        try:
            task = self._task_of(info, Query.from_params(op, operator, params)) if info else None
        except QueryError:
            return None
        if task is None or not self.pinned.expects(task):
            return None
        self.pinned.wait(task, PIN_WAIT_S)
        return self.answer_here(op, operator, params, False)

    def relay(self, target: bytes, headers: dict[str, str]) -> Answer:
        here = self._pinning(target)
        if here is not None:
            return here
        got = self._relay(target, headers | {SIDECAR.lower(): "1"})
        if got.status == 503 and got.body.get("error") == PINNING:
            # The worker is pinning that snapshot for us (it completed meanwhile): wait
            # for it; if it cannot be had, the worker reads the store after all.
            here = self._pinning(target)
            got = here if here is not None else self._relay(target, headers)
        return got

    def _relay(self, target: bytes, headers: dict[str, str]) -> Answer:
        sent = {k: v for k, v in headers.items() if k in _RELAYED}
        conn: http.client.HTTPConnection | None = getattr(self._relays, "conn", None)
        for fresh in (False, True):
            if conn is None or fresh:
                conn = self._relays.conn = http.client.HTTPConnection(
                    self.worker, timeout=RELAY_TIMEOUT_S
                )
            try:
                conn.request("GET", target.decode("latin-1"), headers=sent)
                resp = conn.getresponse()
                data = resp.read()
                retry = resp.getheader("Retry-After")
                body = orjson.loads(data) if data else {}
                return Answer(resp.status, body, {"Retry-After": retry} if retry else {})
            except (OSError, http.client.HTTPException, ValueError) as e:
                conn.close()
                if fresh:  # the worker is gone (killed: this process follows it): its
                    # tasks are moving, as when a forward finds no owner
                    reason = f"the worker behind this endpoint did not answer: {e}"
                    body = {"error": "moving", "task": None, "reason": reason,
                            "retry_after_ms": 500}  # fmt: skip
                    return Answer(503, body, {"Retry-After": "1"})
        raise AssertionError("unreachable")


def _opener(view: Any, name: str) -> Any:
    return lambda: view.table(name)


def run(
    listener: socket,
    worker: str,
    root: str,
    operators: dict[str, OperatorInfo],
    token: str | None,
    parent: Connection,
) -> None:
    """The sidecar process: serve on ``listener`` until the worker closes ``parent``
    (or dies)."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s sidecar %(message)s")
    sys.setswitchinterval(SWITCH_S)
    pinned = PinnedViews(Path(root)).start()
    service = SidecarService(operators, pinned, worker, token=token)
    # The snapshots are followed by the thread that answers, between its answers: a
    # thread of their own took the GIL from it for a switch interval at each of its
    # socket calls, and for whole C calls (a RocksDB open: 4-80 ms on a busy machine).
    server = QueryServer(service, 0, "", service.gate, listener=listener, background=pinned.step)
    # What is loaded now (modules, the first views: tens of thousands of objects) is
    # never garbage: no full collection walks it again (one took 30 ms, every lookup
    # waiting for it).
    gc.collect()
    gc.freeze()
    try:
        parent.send("ready")
        parent.recv()  # EOFError when the worker closes its end or dies
    except (EOFError, OSError):
        pass
    finally:
        server.close()
        pinned.close()
