"""The query endpoint: HTTP/JSON on a port of its own (docs/queries.md).

``GET /state/<operator>/<get|scan|windows>?key=...`` answers a query
(:mod:`kstream.query.service`); ``GET /state`` lists the operators and what this
worker knows of who runs what. Loopback by default (``KSTREAM_QUERY_HOST`` to bind
elsewhere); with a token every request must carry ``Authorization: Bearer <token>``.
A thread per connection (keep-alive), so a slow client holds up no one.
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kstream.metrics.server import PortSpec
from kstream.query.service import FORWARDED, Answer, QueryService

log = logging.getLogger(__name__)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: a client asks many queries on one connection
    # Headers and body go out as two writes: without TCP_NODELAY the body waits for the
    # client's delayed ACK of the headers (40 ms on Linux), every answer.
    disable_nagle_algorithm = True
    server: _Server

    def do_GET(self) -> None:
        service = self.server.service
        if service.token and not hmac.compare_digest(
            self.headers.get("Authorization", ""), f"Bearer {service.token}"
        ):
            self._send(Answer(401, {"error": "unauthorized: send Authorization: Bearer <token>"}))
            return
        url = urllib.parse.urlsplit(self.path)
        parts = [urllib.parse.unquote(p) for p in url.path.strip("/").split("/")]
        params = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        if parts == ["state"]:
            self._send(Answer(200, overview(service)))
        elif len(parts) == 3 and parts[0] == "state":
            forwarded = self.headers.get(FORWARDED) is not None
            self._send(service.answer(parts[2], parts[1], params, forwarded))
        else:
            self._send(Answer(404, {"error": f"no {url.path}: GET /state/<operator>/get?key=..."}))

    def _send(self, answer: Answer) -> None:
        data = json.dumps(answer.body, separators=(",", ":")).encode()
        head = [
            f"HTTP/1.1 {answer.status} {self.responses.get(answer.status, ('',))[0]}",
            "Content-Type: application/json",
            f"Content-Length: {len(data)}",
            *(f"{k}: {v}" for k, v in answer.headers.items()),
        ]
        # One write: each socket call hands the GIL back to a busy processing thread,
        # and taking it again costs up to the switch interval.
        self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode() + data)
        self.log_request(answer.status, len(data))

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("query %s", format % args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], service: QueryService) -> None:
        self.service = service
        super().__init__(address, _Handler)


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


class QueryServer:
    """The endpoint of one worker, served on a daemon thread until :meth:`close`."""

    def __init__(self, service: QueryService, port: PortSpec | str | int, host: str) -> None:
        spec = port if isinstance(port, PortSpec) else PortSpec.parse(port)
        last: OSError | None = None
        for p in range(spec.low, spec.high + 1):
            try:
                self._server = _Server((host, p), service)
                break
            except OSError as e:
                last = e
        else:
            raise OSError(f"no free query port in {spec.low}-{spec.high} on {host}: {last}")
        self.host, self.port = host, self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="kstream-query", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
