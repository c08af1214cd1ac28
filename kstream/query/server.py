"""The query endpoint: HTTP/JSON on a port of its own (docs/queries.md).

``GET /state/<operator>/<get|scan|windows>?key=...`` answers a query
(:mod:`kstream.query.service`); ``GET /state`` lists the operators and what this
worker knows of who runs what. Loopback by default; with a token every request must
carry ``Authorization: Bearer <token>``. HTTP/1.1 with keep-alive, parsed by ``httptools`` (llhttp); answers written by orjson.

Who does the I/O: whoever holds the gate (:mod:`kstream.query.gate`). A busy
processing loop answers ready requests itself between two feeds
(:meth:`QueryServer.pump`, the gate's ``on_serve``): a query then costs no hand-over
of the GIL between threads, each of which costs up to the interpreter's switch
interval. While the loop waits for input, the server's thread, which waits for
readiness without the GIL, takes the gate and answers. A query that needs more than
this worker's state — forwarded to the owner, read from the checkpoint store, a scan
over every task — goes to a small thread pool (its local parts then wait for the gate
like any query) so the loop never waits for the network or the store.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import selectors
import socket
import sys
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httptools
import orjson

from kstream.metrics.server import PortSpec
from kstream.query.gate import GateTimeout, StateGate
from kstream.query.service import FORWARDED, SIDECAR, Answer, QueryService

log = logging.getLogger(__name__)

STALL_S = 0.002
"""How long the server's thread lets a busy loop go without answering at a feed (a
few ms of work apart) before it answers beside it."""
QUIET_S = 0.2
"""Requests none for this long: the thread waits for readiness again instead of waking
every STALL_S beside a busy loop."""
STALL_SWITCH_S = 0.0002
"""The interpreter's switch interval while it does (5 ms by default)."""
PUMP_MAX = 16  # requests answered per pump at most (the loop waits for no more)
BACKGROUND_S = 0.01
"""The background work's step (``QueryServer(background=...)``) is taken at least this
often: when no request is ready, or past this long since the last one."""
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
            500: "Internal Server Error", 503: "Service Unavailable"}  # fmt: skip


def overview(service: QueryService) -> dict[str, Any]:
    d = service.directory
    return {
        "worker": d.me,
        "operators": {
            sid: {"kind": i.kind, "stage": i.stage, "partitions": i.partitions}
            for sid, i in sorted(service.operators.items())
        },
        "attempt": d.attempt,
        "restoring": d.restoring,
        "owners": d.owners,
        "endpoints": d.endpoints,
        "completed": d.completed,
    }


class _Adopted:
    """A listening socket the server accepts on besides its own, until released
    (:meth:`QueryServer.adopt`)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.released = False


class _Conn:
    """One client connection; ``httptools`` (llhttp, in C) parses its requests into
    ``ready`` through these callbacks. ``origin``: the adopted listener it came from."""

    def __init__(self, sock: socket.socket, origin: _Adopted | None = None) -> None:
        self.sock = sock
        self.origin = origin
        self.parser = httptools.HttpRequestParser(self)
        self.busy = False  # an answer is being made on the pool: answer nothing meanwhile
        self.closing = False  # the client asked for no keep-alive: close after the answer
        self.ready: deque[_Request] = deque()  # complete requests, oldest first
        self._url = b""
        self._headers: dict[str, str] = {}

    def on_message_begin(self) -> None:
        self._url, self._headers = b"", {}

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_message_complete(self) -> None:
        p = self.parser
        self.ready.append(_Request(p.get_method(), self._url, self._headers, p.should_keep_alive()))


@dataclass(frozen=True)
class _Request:
    method: bytes
    target: bytes
    headers: dict[str, str]
    keep_alive: bool


def _frame(answer: Answer, keep_alive: bool) -> bytes:
    """The HTTP/1.1 response of ``answer``: one buffer, one write."""
    try:
        body = orjson.dumps(answer.body)
    except TypeError:  # past what orjson writes (an int over 64 bits): the standard library
        body = json.dumps(answer.body, separators=(",", ":")).encode()
    head = (
        f"HTTP/1.1 {answer.status} {_REASONS.get(answer.status, '')}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    )
    for name, value in answer.headers.items():
        head += f"{name}: {value}\r\n"
    if not keep_alive:
        head += "Connection: close\r\n"
    return (head + "\r\n").encode("latin-1") + body


def bind(port: PortSpec | str | int, host: str) -> socket.socket:
    """A listening socket on the first free port of ``port`` (OSError: none is)."""
    spec = port if isinstance(port, PortSpec) else PortSpec.parse(port)
    last: OSError | None = None
    for p in range(spec.low, spec.high + 1):
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, p))
            break
        except OSError as e:
            sock.close()
            last = e
    else:
        raise OSError(f"no free query port in {spec.low}-{spec.high} on {host}: {last}")
    sock.listen(128)
    return sock


class QueryServer:
    """The endpoint of one worker (module doc) until :meth:`close`."""

    def __init__(
        self,
        service: QueryService,
        port: PortSpec | str | int,
        host: str,
        gate: StateGate,
        *,
        listener: socket.socket | None = None,
        background: Callable[[], bool] | None = None,
    ) -> None:
        """``background``: a step of other work (the query sidecar following its
        snapshots) that the server's thread takes between answers — a step at a time, so
        an answer waits for one step at most — and again at once while it says there is
        more to do; at least every ``BACKGROUND_S``."""
        self.service = service
        self._background = background
        self._stepped = 0.0  # when the background work last took a step (perf_counter)
        self._more = False  # whether it said it has more to do at once
        self.gate = gate
        sock = listener if listener is not None else bind(port, host)
        sock.setblocking(False)
        self._listener = sock
        self.host, self.port = host, sock.getsockname()[1]
        self._sel = selectors.DefaultSelector()
        self._sel.register(sock, selectors.EVENT_READ, None)
        self._closed = False
        # Who does the I/O (accepts, reads, answers) holds this: the loop between feeds,
        # or this server's thread (module doc). In the order gate, then I/O.
        self._io = threading.Lock()
        self._pumped = 0.0  # when the loop last answered (perf_counter)
        self.answered = 0  # requests taken on (for tests and the quiet check)
        self._pool = ThreadPoolExecutor(4, thread_name_prefix="kstream-query-slow")
        gate.on_serve = self._serve
        self._thread = threading.Thread(target=self._run, name="kstream-query", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # ---- who pumps -------------------------------------------------------------------------

    def _serve(self) -> None:
        """The gate's hook (the gate held): answer what is ready. One ``epoll_wait``
        without waiting when nothing is; nothing while the server's thread answers."""
        self._pumped = time.perf_counter()
        if self._io.acquire(blocking=False):
            try:
                self.pump()
            finally:
                self._io.release()

    def _run(self) -> None:
        """Three states. The loop waits for input: wait for readiness, take the gate,
        answer. The loop works (holds the gate): wait for the gate (without the GIL: a
        busy loop is disturbed once per STALL_S, not per request) while it answers at
        its feeds. It has not for STALL_S (a snapshot, a restore, a long batch): answer
        beside it, on readiness, the lookups that allow it read concurrently
        (``QueryService.answer_concurrent``), the others queued for it."""
        normal = sys.getswitchinterval()
        busy = stalled = False
        seen, quiet_since = -1, 0.0
        try:
            while not self._closed:
                if busy:
                    now = time.perf_counter()
                    if self.answered != seen:
                        seen, quiet_since = self.answered, now
                    if self._answer_with_gate(STALL_S):
                        busy = False
                    elif now - quiet_since > QUIET_S:
                        busy = False  # no requests lately: wait for readiness again
                    elif time.perf_counter() - self._pumped >= STALL_S:
                        busy, stalled = False, True
                        # This thread's socket calls give the GIL up, and the busy loop
                        # keeps it for a whole switch interval each time: make it short.
                        sys.setswitchinterval(STALL_SWITCH_S)
                    continue
                try:
                    ready = self._sel.select(self._select_timeout(stalled))
                except (OSError, ValueError):
                    return  # closed
                if self._background is not None and (
                    not ready or time.perf_counter() - self._stepped >= BACKGROUND_S
                ):
                    self._step()
                    if not ready:
                        continue
                if stalled and time.perf_counter() - self._pumped < STALL_S:
                    stalled, busy = False, True  # the loop answers again
                    sys.setswitchinterval(normal)
                elif ready and self._answer_with_gate(0 if stalled else STALL_S):
                    if stalled:
                        stalled = False
                        sys.setswitchinterval(normal)
                elif ready and stalled:
                    with self._io:
                        self.pump(concurrent=True)
                elif ready:
                    busy = True
        finally:
            sys.setswitchinterval(normal)

    def _select_timeout(self, stalled: bool) -> float:
        if self._background is None:
            return STALL_S if stalled else 0.2
        return 0.0 if self._more else BACKGROUND_S

    def _step(self) -> None:
        assert self._background is not None
        self._stepped = time.perf_counter()
        try:
            self._more = self._background()
        except Exception:  # the answers go on (this thread is the only one that gives them)
            log.exception("the query server's background work failed")
            self._more = False

    def _answer_with_gate(self, wait: float) -> bool:
        """Take the gate within ``wait`` s and answer what is ready; False: not free."""
        taken = self.gate.take(wait) if wait else self.gate.take_now()
        if not taken:
            return False
        try:
            with self._io:
                self.pump()
        finally:
            self.gate.give_back()
        return True

    # ---- the I/O (the gate held) -----------------------------------------------------------

    def pump(self, *, concurrent: bool = False) -> None:
        """Accept, read and answer what is ready, at most PUMP_MAX requests (the I/O
        lock held; ``concurrent``: the gate not held, so beside a working loop)."""
        answered = 0
        for key, _events in self._sel.select(0):
            if key.data is None or isinstance(key.data, _Adopted):
                self._accept(key.data)
                continue
            conn: _Conn = key.data
            answered += self._receive(conn, concurrent)
            if answered >= PUMP_MAX:
                return

    def _accept(self, origin: _Adopted | None) -> None:
        listener = self._listener if origin is None else origin.sock
        while True:
            try:
                sock, _addr = listener.accept()
            except (BlockingIOError, OSError):
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sel.register(sock, selectors.EVENT_READ, _Conn(sock, origin))

    def adopt(self, listener: socket.socket) -> None:
        """Accept on ``listener`` too (the query port of a sidecar that died, until a
        new one serves it) until :meth:`release`."""
        listener.setblocking(False)
        with self._io:
            if listener.fileno() not in self._sel.get_map():
                self._sel.register(listener, selectors.EVENT_READ, _Adopted(listener))

    def release(self, listener: socket.socket) -> None:
        """Accept on ``listener`` no more; its connections close after their next
        answer (their clients reconnect: to whoever serves it now)."""
        with self._io, contextlib.suppress(KeyError, ValueError):
            key = self._sel.unregister(listener)
            key.data.released = True

    def _drop(self, conn: _Conn) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(conn.sock)
        conn.sock.close()

    def _receive(self, conn: _Conn, concurrent: bool) -> int:
        try:
            data = conn.sock.recv(65536)
        except BlockingIOError:
            return 0
        except OSError:
            self._drop(conn)
            return 0
        if not data:  # the client closed
            self._drop(conn)
            return 0
        try:
            conn.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._drop(conn)
            return 0
        except httptools.HttpParserError as e:
            conn.ready.clear()
            self._send(conn, Answer(400, {"error": f"bad HTTP request: {e}"}), keep_alive=False)
            return 0
        return self._answer_ready(conn, concurrent)

    def _answer_ready(self, conn: _Conn, concurrent: bool = False) -> int:
        """Answer the complete requests the connection holds (in order); how many."""
        answered = 0
        while conn.ready and not conn.busy and not conn.closing:
            answered += 1
            self._request(conn, conn.ready.popleft(), concurrent)
        return answered

    def _request(self, conn: _Conn, request: _Request, concurrent: bool) -> None:
        self.answered += 1
        headers = request.headers
        service = self.service
        keep = request.keep_alive and not (conn.origin is not None and conn.origin.released)
        if service.token and not hmac.compare_digest(
            headers.get("authorization", ""), f"Bearer {service.token}"
        ):
            denied = Answer(401, {"error": "unauthorized: send Authorization: Bearer <token>"})
            self._send(conn, denied, keep)
            return
        url = httptools.parse_url(request.target)
        path = url.path.decode("latin-1")
        parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/")]
        query = url.query.decode("latin-1") if url.query else ""
        params = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
        forwarded = FORWARDED.lower() in headers
        if service.front and request.method == b"GET":  # a sidecar: the rest is the worker's
            here = None
            if len(parts) == 3 and parts[0] == "state":
                here = service.answer_here(parts[2], parts[1], params, forwarded)
            if here is not None:
                self._send(conn, here, keep)
            else:
                self._later(conn, keep, lambda: service.relay(request.target, headers))
        elif request.method != b"GET":
            self._send(conn, Answer(400, {"error": "use GET"}), keep)
        elif parts == ["state"]:
            if concurrent:  # the loop changes what it lists
                self._later(
                    conn, keep, lambda: self.gate.run(lambda: Answer(200, overview(service)))
                )
            else:
                self._send(conn, Answer(200, overview(service)), keep)
        elif len(parts) == 3 and parts[0] == "state":
            op, operator = parts[2], parts[1]
            if concurrent:
                answer = service.answer_concurrent(op, operator, params, forwarded)
            else:
                answer = service.answer_here(op, operator, params, forwarded)
            if answer is not None:
                self._send(conn, answer, keep)
                return
            # forward, store, every task, or under the gate: not on the loop's time
            sidecar = SIDECAR.lower() in headers
            self._later(
                conn, keep, lambda: service.answer(op, operator, params, forwarded, sidecar=sidecar)
            )
        else:
            unknown = Answer(404, {"error": f"no {path}: GET /state/<operator>/get?key=..."})
            self._send(conn, unknown, keep)

    def _later(self, conn: _Conn, keep: bool, make: Callable[[], Answer]) -> None:
        """Answer with ``make()`` on the pool; the connection waits, read no further."""
        conn.busy = True
        self._sel.unregister(conn.sock)
        self._pool.submit(self._slow, conn, keep, make)

    def _slow(self, conn: _Conn, keep: bool, make: Callable[[], Answer]) -> None:
        try:
            answer = make()
        except GateTimeout as e:
            answer = Answer(503, {"error": "busy", "reason": str(e), "retry_after_ms": 1000},
                            {"Retry-After": "1"})  # fmt: skip
        except Exception as e:  # an answer, not a dead connection
            log.exception("query failed")
            answer = Answer(500, {"error": f"{type(e).__name__}: {e}"})

        def finish() -> None:
            with self._io:
                conn.busy = False
                self._sel.register(conn.sock, selectors.EVENT_READ, conn)
                self._send(conn, answer, keep)
                if not conn.busy and conn.sock.fileno() >= 0:
                    self._answer_ready(conn)  # what arrived meanwhile (pipelined requests)

        self.gate.run(finish)

    def _send(self, conn: _Conn, answer: Answer, keep_alive: bool) -> None:
        out = _frame(answer, keep_alive)
        conn.closing = not keep_alive
        try:
            try:
                sent = conn.sock.send(out)  # an answer usually fits the socket buffer
            except BlockingIOError:
                sent = 0
            if sent < len(out):  # a slow reader: the rest from a pool thread, not the loop
                conn.busy = True
                self._sel.unregister(conn.sock)
                self._pool.submit(self._send_rest, conn, out[sent:])
            elif conn.closing:
                self._drop(conn)
        except OSError:
            self._drop(conn)

    def _send_rest(self, conn: _Conn, rest: bytes) -> None:
        try:
            conn.sock.settimeout(30.0)
            conn.sock.sendall(rest)
            conn.sock.setblocking(False)
        except OSError:
            conn.sock.close()
            return

        def again() -> None:
            with self._io:
                conn.busy = False
                if conn.closing:
                    conn.sock.close()
                    return
                self._sel.register(conn.sock, selectors.EVENT_READ, conn)
                self._answer_ready(conn)

        self.gate.run(again)

    def close(self) -> None:
        self._closed = True
        self._thread.join(5)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.gate.on_serve = None
        for key in list(self._sel.get_map().values()):
            if isinstance(key.data, _Conn):
                key.data.sock.close()
        self._sel.close()
        self._listener.close()
