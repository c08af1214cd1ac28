"""A small in-process Confluent Schema Registry for fast tests: the REST endpoints
confluent-kafka's ``SchemaRegistryClient`` calls, over real HTTP, so the real client
(and its serializers) is what the tests exercise.

Endpoints (Confluent's documented API, the subset the client uses here):
``GET /schemas/ids/{id}``, ``POST /subjects/{subject}/versions`` (register),
``POST /subjects/{subject}`` (look up), ``GET /subjects/{subject}/versions/{version}``
and ``.../latest``, ``GET /subjects``. Schemas are compared by their text (no
normalisation, no compatibility checks): integration tests use a real registry
(:mod:`integration.registry`).
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlparse

_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryStub:
    """A registry on ``127.0.0.1`` (free port) in a daemon thread; ``url`` reaches it."""

    def __init__(self) -> None:
        self.schemas: list[dict[str, Any]] = []  # id - 1 -> {"schema", "schemaType", "references"}
        self.subjects: dict[str, list[int]] = {}  # subject -> ids by version
        self.requests: list[str] = []  # "METHOD path" of every request served
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def register(self, subject: str, schema: str, schema_type: str = "AVRO") -> int:
        """Register ``schema`` under ``subject`` (as a producer would); its id."""
        with self.lock:
            return self._register(
                subject, {"schema": schema, "schemaType": schema_type, "references": []}
            )

    def _register(self, subject: str, doc: dict[str, Any]) -> int:
        doc = {
            "schema": doc["schema"],
            "schemaType": doc.get("schemaType", "AVRO"),
            "references": doc.get("references") or [],
        }
        for i, known in enumerate(self.schemas):
            if known == doc:
                sid = i + 1
                break
        else:
            self.schemas.append(doc)
            sid = len(self.schemas)
        versions = self.subjects.setdefault(subject, [])
        if sid not in versions:
            versions.append(sid)
        return sid

    def answer(self, method: str, path: str, body: dict[str, Any] | None) -> tuple[int, Any]:
        with self.lock:
            self.requests.append(f"{method} {path}")
            m = re.fullmatch(r"/schemas/ids/(\d+)", path)
            if method == "GET" and m:
                sid = int(m.group(1))
                if not 1 <= sid <= len(self.schemas):
                    return 404, {"error_code": 40403, "message": f"Schema {sid} not found"}
                return 200, dict(self.schemas[sid - 1])
            if method == "GET" and path == "/subjects":
                return 200, sorted(self.subjects)
            m = re.fullmatch(r"/subjects/([^/]+)/versions", path)
            if method == "POST" and m and body is not None:
                sid = self._register(unquote(m.group(1)), body)
                return 200, {"id": sid}
            m = re.fullmatch(r"/subjects/([^/]+)", path)
            if method == "POST" and m and body is not None:
                subject = unquote(m.group(1))
                if subject not in self.subjects:
                    return 404, {"error_code": 40401, "message": f"Subject '{subject}' not found."}
                for version, sid in enumerate(self.subjects[subject], 1):
                    known = self.schemas[sid - 1]
                    if known["schema"] == body["schema"]:
                        return 200, {"subject": subject, "id": sid, "version": version, **known}
                return 404, {"error_code": 40403, "message": "Schema not found"}
            m = re.fullmatch(r"/subjects/([^/]+)/versions/(latest|\d+)", path)
            if method == "GET" and m:
                subject = unquote(m.group(1))
                versions = self.subjects.get(subject)
                if not versions:
                    return 404, {"error_code": 40401, "message": f"Subject '{subject}' not found."}
                v = len(versions) if m.group(2) == "latest" else int(m.group(2))
                if not 1 <= v <= len(versions):
                    return 404, {"error_code": 40402, "message": f"Version {v} not found."}
                sid = versions[v - 1]
                return 200, {"subject": subject, "id": sid, "version": v, **self.schemas[sid - 1]}
            return 404, {"error_code": 404, "message": f"no endpoint {method} {path}"}


def _handler(stub: RegistryStub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self, method: str) -> None:
            path = urlparse(self.path).path
            body = None
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                body = json.loads(self.rfile.read(length))
            status, doc = stub.answer(method, path, body)
            data = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", _CONTENT_TYPE)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet tests

    return Handler
