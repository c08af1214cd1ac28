"""The query endpoint: HTTP/JSON on a port of its own (docs/queries.md).

``GET /state/<operator>/<get|scan|windows>?key=...`` answers a query
(:mod:`kstream.query.service`); ``GET /state`` lists the operators and what this
worker knows of who runs what. Loopback by default; with a token every request must
carry ``Authorization: Bearer <token>``. HTTP/1.1 with keep-alive, parsed by ``h11``.

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
import threading
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import h11

from kstream.metrics.server import PortSpec
from kstream.query.gate import StateGate
from kstream.query.service import FORWARDED, Answer, QueryService

log = logging.getLogger(__name__)

PUMP_MAX = 16  # requests answered per pump at most (the loop waits for no more)
_REASONS = {200: b"OK", 400: b"Bad Request", 401: b"Unauthorized", 404: b"Not Found",
            503: b"Service Unavailable"}  # fmt: skip


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


class _Conn:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.h11 = h11.Connection(h11.SERVER)
        self.busy = False  # an answer is being made on the pool: read nothing meanwhile
        self.request: h11.Request | None = None  # read, its end not yet


class QueryServer:
    """The endpoint of one worker (module doc) until :meth:`close`."""

    def __init__(
        self, service: QueryService, port: PortSpec | str | int, host: str, gate: StateGate
    ) -> None:
        spec = port if isinstance(port, PortSpec) else PortSpec.parse(port)
        self.service = service
        self.gate = gate
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
        sock.setblocking(False)
        self._listener = sock
        self.host, self.port = host, sock.getsockname()[1]
        self._sel = selectors.DefaultSelector()
        self._sel.register(sock, selectors.EVENT_READ, None)
        self._closed = False
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
        without waiting when nothing is."""
        self.pump()

    def _run(self) -> None:
        """While the loop waits for input: wait for readiness, then for the gate (both
        without the GIL: a busy loop is not disturbed), and answer."""
        while not self._closed:
            try:
                if not self._sel.select(0.2):
                    continue
            except (OSError, ValueError):
                return  # closed
            if self.gate.take(1.0):
                try:
                    self.pump()
                finally:
                    self.gate.give_back()

    # ---- the I/O (the gate held) -----------------------------------------------------------

    def pump(self) -> None:
        """Accept, read and answer what is ready, at most PUMP_MAX requests."""
        answered = 0
        for key, _events in self._sel.select(0):
            if key.data is None:
                self._accept()
                continue
            conn: _Conn = key.data
            answered += self._receive(conn)
            if answered >= PUMP_MAX:
                return

    def _accept(self) -> None:
        while True:
            try:
                sock, _addr = self._listener.accept()
            except (BlockingIOError, OSError):
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sel.register(sock, selectors.EVENT_READ, _Conn(sock))

    def _drop(self, conn: _Conn) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(conn.sock)
        conn.sock.close()

    def _receive(self, conn: _Conn) -> int:
        try:
            data = conn.sock.recv(65536)
        except BlockingIOError:
            return 0
        except OSError:
            self._drop(conn)
            return 0
        conn.h11.receive_data(data)
        return self._events(conn)

    def _events(self, conn: _Conn) -> int:
        """Answer the complete requests h11 holds; how many."""
        answered = 0
        while not conn.busy:
            try:
                event = conn.h11.next_event()
            except h11.RemoteProtocolError:
                self._drop(conn)
                return answered
            if event is h11.NEED_DATA or event is h11.PAUSED:
                if conn.h11.their_state is h11.CLOSED:
                    self._drop(conn)
                return answered
            if isinstance(event, h11.ConnectionClosed):
                self._drop(conn)
                return answered
            if isinstance(event, h11.Request):
                conn.request = event
            elif isinstance(event, h11.EndOfMessage) and conn.request is not None:
                request, conn.request = conn.request, None
                answered += 1
                self._request(conn, request)
        return answered

    def _request(self, conn: _Conn, request: h11.Request) -> None:
        headers = {k.decode().lower(): v.decode() for k, v in request.headers}
        service = self.service
        if service.token and not hmac.compare_digest(
            headers.get("authorization", ""), f"Bearer {service.token}"
        ):
            self._send(
                conn, Answer(401, {"error": "unauthorized: send Authorization: Bearer <token>"})
            )
            return
        url = urllib.parse.urlsplit(request.target.decode())
        parts = [urllib.parse.unquote(p) for p in url.path.strip("/").split("/")]
        params = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        forwarded = FORWARDED.lower() in headers
        if request.method != b"GET":
            self._send(conn, Answer(400, {"error": "use GET"}))
        elif parts == ["state"]:
            self._send(conn, Answer(200, overview(service)))
        elif len(parts) == 3 and parts[0] == "state":
            op, operator = parts[2], parts[1]
            answer = service.answer_here(op, operator, params, forwarded)
            if answer is not None:
                self._send(conn, answer)
                return
            conn.busy = True  # forward, store, every task: not on the loop's time
            self._sel.unregister(conn.sock)
            self._pool.submit(self._slow, conn, op, operator, params, forwarded)
        else:
            self._send(
                conn, Answer(404, {"error": f"no {url.path}: GET /state/<operator>/get?key=..."})
            )

    def _slow(self, conn: _Conn, op: str, operator: str, params: dict[str, str], fwd: bool) -> None:
        try:
            answer = self.service.answer(op, operator, params, fwd)
        except Exception as e:  # an answer, not a dead connection
            log.exception("query %s %s failed", operator, op)
            answer = Answer(500, {"error": f"{type(e).__name__}: {e}"})

        def finish() -> None:
            conn.busy = False
            self._sel.register(conn.sock, selectors.EVENT_READ, conn)
            self._send(conn, answer)
            if not conn.busy and conn.sock.fileno() >= 0:
                self._events(conn)  # what arrived meanwhile (pipelined requests)

        self.gate.run(finish)

    def _send(self, conn: _Conn, answer: Answer) -> None:
        data = json.dumps(answer.body, separators=(",", ":")).encode()
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(data))),
                   *answer.headers.items()]  # fmt: skip
        try:
            out = (
                conn.h11.send(
                    h11.Response(
                        status_code=answer.status,
                        headers=headers,
                        reason=_REASONS.get(answer.status, b""),
                    )
                )
                or b""
            )
            out += conn.h11.send(h11.Data(data=data)) or b""
            out += conn.h11.send(h11.EndOfMessage()) or b""
            if conn.h11.our_state is not h11.MUST_CLOSE:
                conn.h11.start_next_cycle()
            try:
                sent = conn.sock.send(out)  # an answer usually fits the socket buffer
            except BlockingIOError:
                sent = 0
            if sent < len(out):  # a slow reader: the rest from a pool thread, not the loop
                conn.busy = True
                self._sel.unregister(conn.sock)
                self._pool.submit(self._send_rest, conn, out[sent:])
            elif conn.h11.our_state is h11.MUST_CLOSE:
                self._drop(conn)
        except (OSError, h11.LocalProtocolError):
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
            conn.busy = False
            if conn.h11.our_state is h11.MUST_CLOSE:
                conn.sock.close()
                return
            self._sel.register(conn.sock, selectors.EVENT_READ, conn)
            self._events(conn)

        self.gate.run(again)

    def close(self) -> None:
        self._closed = True
        self._thread.join(5)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.gate.on_serve = None
        for key in list(self._sel.get_map().values()):
            if key.data is not None:
                key.data.sock.close()
        self._sel.close()
        self._listener.close()
