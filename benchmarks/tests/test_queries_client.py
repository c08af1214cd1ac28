"""benchmarks.queries' client: its own process, and the endpoint found on any port of the range."""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from benchmarks.queries import Client, Load


class _Answer(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    asked: list[str] = []

    def do_GET(self) -> None:  # (http.server calls it by this name)
        _Answer.asked.append(self.path)
        body = b'{"found": true}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _free_pair() -> tuple[int, ThreadingHTTPServer]:
    """A port nothing listens on, and a server on the port after it."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            first = probe.getsockname()[1]
        try:
            return first, ThreadingHTTPServer(("127.0.0.1", first + 1), _Answer)
        except OSError:
            continue
    raise RuntimeError("no two consecutive free ports")


def test_the_client_finds_the_endpoint_past_a_port_taken_elsewhere_and_reports_back() -> None:
    first, server = _free_pair()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        load = Load(400, keys=10, span_ms=1000, consistency="checkpointed",
                    ports=(first, first + 1))  # fmt: skip
        client = Client(load)
        deadline = time.monotonic() + 30
        while len(_Answer.asked) < 40:
            assert time.monotonic() < deadline, f"{len(_Answer.asked)} lookups in 30 s"
            time.sleep(0.05)  # polling what the server counted, with a deadline
        got = client.stop()
    finally:
        server.shutdown()
        server.server_close()
    answered = got.statuses.get(200, 0)
    assert got.statuses == {200: answered} and answered >= 40
    assert len(got.latencies_ms) == answered == len([t for t in got.trace if t[1] == 200])
    assert all(p.endswith("&consistency=checkpointed") for p in _Answer.asked)
    assert answered <= len(_Answer.asked)  # (lookups asked after the stop are not counted)
