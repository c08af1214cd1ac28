"""The query endpoint over HTTP on loopback: a key owned by another worker is answered
through one forward, a moving task is a 503 with Retry-After, the bearer token is
required; and `kstream query` reads a retained checkpoint with no job running."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kstream.checkpointstorage.file import FileStore
from kstream.checkpointstorage.metadata import (
    CheckpointMetadata,
    TaskSnapshot,
    read_metadata,
    write_metadata,
)
from kstream.checkpointstorage.savepoints import create_savepoint
from kstream.cli.main import main
from kstream.protocol.messages import Heartbeat, Restore, Resume
from kstream.query.gate import StateGate
from kstream.query.operators import OperatorInfo
from kstream.query.read import Tables
from kstream.query.routing import Directory
from kstream.query.server import QueryServer
from kstream.query.service import QueryService
from kstream.serde import serde_by_name
from kstream.snapshots.upload import SnapshotUploader
from kstream.state.base import TableSpec
from kstream.state.memory import MemoryBackend
from kstream.state.rocksdb import RocksDBBackend

OP = "totals"
INFO = OperatorInfo(OP, "rolling", "stage1", 2, "str", serde_by_name("str"), "crc32")
TOKEN = "s3cret"


def task_of(key: str) -> str:
    task = INFO.task_of(key)
    assert task is not None
    return task


class Tasks:
    """One worker's running tasks, each a memory backend."""

    def __init__(self, owned: dict[str, dict[str, int]]) -> None:
        self.backends = {}
        for task, values in owned.items():
            b = MemoryBackend()
            for k, v in values.items():
                b.table(TableSpec(f"{OP}.acc")).put((k,), v)
            self.backends[task] = b

    def running(self, task: str) -> bool:
        return task in self.backends

    def tables(self, task: str, operator: str) -> Tables | None:
        b = self.backends.get(task)
        if b is None:
            return None
        return Tables.opened(operator, b.tables())

    def position(self, task: str) -> dict[str, Any]:
        return {"offsets": {}}

    def published(self, task: str) -> dict[str, Any] | None:
        return self.position(task)


@pytest.fixture
def two_workers() -> Iterator[tuple[QueryServer, QueryServer, list[Directory]]]:
    a_key, b_key = (
        "k1",
        next(k for k in (f"k{i}" for i in range(2, 99)) if task_of(k) != task_of("k1")),
    )
    owners = {task_of(a_key): "m1", task_of(b_key): "m2"}
    servers, dirs = [], []
    for me, key, value in (("m1", a_key, 1), ("m2", b_key, 2)):
        d = Directory(me=me)
        d.observe(Resume(1, owners))
        tasks = Tasks({task_of(key): {key: value}})
        gate = StateGate()
        service = QueryService({OP: INFO}, d, gate, tasks, None, token=TOKEN)
        servers.append(QueryServer(service, "47100-47199", "127.0.0.1", gate))
        dirs.append(d)
    for d in dirs:
        for member, s in zip(("m1", "m2"), servers, strict=True):
            d.observe(Heartbeat(member, (), 1, "", s.url))
    yield servers[0], servers[1], dirs
    for s in servers:
        s.close()


def get(url: str, path: str, token: str | None = TOKEN) -> tuple[int, dict[str, Any], Any]:
    req = urllib.request.Request(url + path)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read()), resp.headers
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), e.headers


def test_any_worker_answers_for_any_key(two_workers: Any) -> None:
    a, b, _ = two_workers
    key_b = next(k for k in (f"k{i}" for i in range(2, 99)) if task_of(k) != task_of("k1"))
    status, body, _ = get(a.url, f"/state/{OP}/get?key={key_b}")
    assert status == 200
    assert (body["value"], body["worker"], body["task"]) == (2, "m2", task_of(key_b))
    status, body, _ = get(b.url, f"/state/{OP}/get?key=k1")
    assert (status, body["value"], body["worker"]) == (200, 1, "m1")
    # A scan asks every task, wherever it runs, and merges by key.
    status, body, _ = get(a.url, f"/state/{OP}/scan")
    assert [e["key"] for e in body["entries"]] == sorted(["k1", key_b])
    assert {t: v["worker"] for t, v in body["tasks"].items()} == {
        task_of("k1"): "m1", task_of(key_b): "m2",
    }  # fmt: skip


def test_moving_is_a_503_with_retry_after_and_never_a_stale_answer(two_workers: Any) -> None:
    a, _b, dirs = two_workers
    dirs[0].observe(Restore(2, None))
    status, body, headers = get(a.url, f"/state/{OP}/get?key=k1")
    assert (status, body["error"], headers["Retry-After"]) == (503, "moving", "1")
    assert body["retry_after_ms"] == 500 and "restoring" in body["reason"]
    # b still believes a owns k1's task, but a forwarded query is never forwarded again:
    dirs[0].observe(Resume(2, {task_of("k1"): "m2"}))  # a learns m2 owns it now
    status, body, _ = get(a.url, f"/state/{OP}/get?key=k1")
    assert (status, body["error"]) == (503, "moving")  # m2 does not run it (yet)


def test_the_token_is_required_and_errors_say_what_to_do(two_workers: Any) -> None:
    a, _b, _ = two_workers
    assert get(a.url, f"/state/{OP}/get?key=k1", token=None)[0] == 401
    assert get(a.url, f"/state/{OP}/get?key=k1", token="wrong")[0] == 401
    status, body, _ = get(a.url, "/state/nope/get?key=k1")
    assert (status, body["error"]) == (404, "no stateful operator 'nope' (operators: totals)")
    status, body, _ = get(a.url, f"/state/{OP}/get")
    assert (status, body["error"]) == (400, "get needs key=...")
    status, body, _ = get(a.url, "/state")
    assert body["owners"] and body["operators"] == {
        OP: {"kind": "rolling", "stage": "stage1", "partitions": 2}
    }


def _read_answers(sock: socket.socket, n: int) -> list[tuple[int, dict[str, str], Any]]:
    """``n`` HTTP answers from ``sock`` (Content-Length framed), each status, headers, body."""
    buf = b""
    out: list[tuple[int, dict[str, str], Any]] = []
    deadline = time.monotonic() + 10
    while len(out) < n and time.monotonic() < deadline:
        head, sep, rest = buf.partition(b"\r\n\r\n")
        if sep:
            lines = head.decode("latin-1").split("\r\n")
            headers = dict(line.split(": ", 1) for line in lines[1:])
            size = int(headers["Content-Length"])
            if len(rest) >= size:
                out.append((int(lines[0].split()[1]), headers, json.loads(rest[:size])))
                buf = rest[size:]
                continue
        data = sock.recv(65536)
        if not data:
            break
        buf += data
    return out


def test_pipelined_requests_are_answered_in_order_and_bad_http_is_a_400(two_workers: Any) -> None:
    a, _b, _ = two_workers
    auth = f"Authorization: Bearer {TOKEN}\r\n"
    with socket.create_connection(("127.0.0.1", a.port), timeout=10) as sock:
        sock.sendall(
            f"GET /state/{OP}/get?key=k1 HTTP/1.1\r\nHost: a\r\n{auth}\r\n"
            f"GET /state/{OP}/get?key=k%31 HTTP/1.1\r\nHost: a\r\n{auth}\r\n"
            f"GET /state/{OP}/get HTTP/1.1\r\nHost: a\r\n{auth}Connection: close\r\n\r\n".encode()
        )
        got = _read_answers(sock, 3)
        assert [(s, b.get("value", b.get("error"))) for s, _h, b in got] == [
            (200, 1), (200, 1), (400, "get needs key=..."),
        ]  # fmt: skip
        assert got[2][1]["Connection"] == "close" and sock.recv(1) == b""  # closed after it
    with socket.create_connection(("127.0.0.1", a.port), timeout=10) as sock:
        sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        [(status, _headers, body)] = _read_answers(sock, 1)
        assert status == 400 and body["error"].startswith("bad HTTP request: ")
        assert sock.recv(1) == b""


def test_kstream_query_reads_a_retained_checkpoint_without_a_job(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store")
    description = {
        "operators": {OP: {"kind": "rolling", "stage": "stage1", "key serde": "str"}},
        "stages": {"stage1": 1},
    }
    backend = RocksDBBackend(tmp_path / "task")
    uploader = SnapshotUploader(store, "app", "stage1-0")
    table = backend.table(TableSpec(f"{OP}.acc"))
    for n, value in ((1, 10), (2, 20)):
        table.put(("a",), value)
        table.put((f"only{n}",), n)
        handle = uploader.upload(backend.snapshot_sync(n, deltas=True)).result(30)
        meta = CheckpointMetadata(n, 0, 1.0, 2.0, {"stage1-0": TaskSnapshot(handle.manifest_path)})
        write_metadata(
            store, "app", CheckpointMetadata(**{**meta.__dict__, "description": description})
        )
    uploader.close()
    backend.close()
    savepoint = create_savepoint(store, "app", "before", read_metadata(store, "app", 1))
    runner = CliRunner()
    base = ["query", "--app-id", "app", "--store", f"file://{tmp_path / 'store'}"]
    for n, value in ((1, 10), (2, 20)):
        result = runner.invoke(main, [*base, "--checkpoint", str(n), OP, "get", "a"])
        assert result.exit_code == 0, result.output
        body = json.loads(result.stdout)
        assert (body["value"], body["task"], body["position"]) == (
            value,
            "stage1-0",
            {"checkpoint": n},
        )
    result = runner.invoke(main, [*base, "--savepoint", savepoint, OP, "get", "only1"])
    assert (json.loads(result.stdout)["value"], result.exit_code) == (1, 0), result.output
    result = runner.invoke(main, [*base, "--checkpoint", "1", OP, "scan", "--prefix", "only"])
    assert [e["key"] for e in json.loads(result.stdout)["entries"]] == ["only1"]
    result = runner.invoke(main, [*base, "--checkpoint", "1", "nope", "get", "a"])
    assert result.exit_code == 2
    assert "no stateful operator 'nope' in this checkpoint (operators: totals)" in result.stderr
