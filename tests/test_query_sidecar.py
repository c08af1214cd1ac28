"""The query sidecar: a local snapshot (a RocksDB checkpoint and delta files) read in
place, read-only, gives exactly what a restore of it gives; the views follow the pinned
checkpoint while reads go on; the worker's sidecar process answers checkpointed
point lookups on the public port while the worker's loop holds its state, relays the
rest to the worker, and stops with it; and a sidecar killed is replaced, the worker
answering on its port meanwhile."""

from __future__ import annotations

import http.client
import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from kstream.query import pinned as pinned_mod
from kstream.query.gate import StateGate
from kstream.query.operators import OperatorInfo
from kstream.query.pinned import PinnedViews, pin, write_pending, write_pointer
from kstream.query.read import Query
from kstream.query.routing import Directory
from kstream.query.server import QueryServer, bind
from kstream.query.service import Answer, QueryService
from kstream.serde import serde_by_name
from kstream.state.base import NotNow, TableSpec
from kstream.state.localsnapshot import LocalSnapshot, mark_uploaded
from kstream.state.rocksdb import RocksDBBackend
from kstream.state.snapshotview import SnapshotView
from kstream.worker import querysidecar
from kstream.worker.querysidecar import QuerySidecar

OP = "totals"
TABLE = f"{OP}.acc"
INFO = OperatorInfo(OP, "rolling", "stage1", 2, "str", serde_by_name("str"), "crc32")


def wait_for(cond: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def snapshot(backend: RocksDBBackend, n: int) -> LocalSnapshot:
    snap = backend.snapshot_sync(n, deltas=True)
    snap.wait_ready()
    mark_uploaded(snap.directory)
    return snap


def test_a_view_reads_a_base_and_its_deltas_exactly_as_restored(tmp_path: Path) -> None:
    b = RocksDBBackend(tmp_path / "task", cache_entries=4, local_retained=5)
    t = b.table(TableSpec(TABLE))
    for i in range(20):
        t.put((f"k{i:02d}",), i)
    t.put(("doc",), {"a": [1, "x"]})
    s1 = snapshot(b, 1)  # a full snapshot: the base
    t.put(("k01",), 100)
    t.delete(("k02",))
    t.delete_range(("k10",), ("k15",))  # k10..k14
    t.put(("k12",), 1200)  # written again after the range deletion
    t.put(("new",), None)
    s2 = snapshot(b, 2)  # a delta on that base
    t.put(("k03",), 300)
    t.delete_range(("k00",), ("k02",))  # k00, k01 (its 100 of the last delta too)
    s3 = snapshot(b, 3)
    assert (s2.directory / "deltas").is_dir() and (s3.directory / "deltas").is_dir()

    v1 = SnapshotView(s1.directory)
    v2 = v1.advance(s2.directory)
    v3 = v2.advance(s3.directory)
    assert v2.shares_base(v1) and v3.shares_base(v1)
    keys = [("doc",), ("new",), ("absent",)] + [(f"k{i:02d}",) for i in range(20)]
    missing = object()

    def values(view: SnapshotView) -> dict[Any, Any]:
        return {k: view.table(TABLE).get(k, missing) for k in keys}

    live = {k: t.get(k, missing) for k in keys}
    assert values(v3) == live == values(SnapshotView(s3.directory))
    assert values(v3)[("k12",)] == 1200 and values(v3)[("k13",)] is missing
    assert values(v3)[("new",)] is None and values(v3)[("doc",)] == {"a": [1, "x"]}
    got2 = values(v2)
    assert (got2[("k00",)], got2[("k01",)], got2[("k02",)], got2[("k03",)]) == (0, 100, missing, 3)
    assert values(v1)[("k13",)] == 13 and values(v1)[("new",)] is missing
    with pytest.raises(NotNow):
        list(v3.table(TABLE).scan())
    for v in (v3, v2):
        v.close(base=False)
    v1.close()
    b.close()


def test_views_follow_the_pointer_while_reads_go_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pinned_mod, "RETIRE_S", 0.0)
    b = RocksDBBackend(tmp_path / "task", cache_entries=4, local_retained=5)
    t = b.table(TableSpec(TABLE))
    root = tmp_path / "pins"
    root.mkdir()
    views = PinnedViews(root)
    seen: list[tuple[int | None, Any]] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            cur = views.current
            view = cur.views.get("stage1-0")
            if view is not None:
                seen.append((cur.checkpoint, view.table(TABLE).get(("n",))))

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for n in range(1, 6):
            t.put(("n",), n * 10)
            if n == 4:
                b.flush()  # more than a cache's worth flushed: a full snapshot, a new base
                for i in range(10):
                    t.put((f"x{i}",), i)
            src = snapshot(b, n).directory
            pinned = pin(src, root, "stage1-0")
            assert pinned == root / "stage1-0" / f"chk-{n}"
            write_pointer(root, n, "w1", {"stage1-0": pinned})
            assert views.refresh()
            wait_for(partial(lambda n: any(c == n for c, _ in seen), n))
    finally:
        stop.set()
        thread.join()
    # Every read was of one checkpoint's value, in checkpoint order.
    assert {c: v for c, v in seen} == {n: n * 10 for n in range(1, 6)}
    order = [c or 0 for c, _ in seen]
    assert order == sorted(order)
    views.refresh()  # (closes what retired, deletes what no view reads)
    left = sorted(d.name for d in (root / "stage1-0").iterdir())
    assert left == ["chk-5"] or left == ["chk-4", "chk-5"]  # (chk-4: the base of chk-5)
    views.close()
    b.close()


def get(url: str, path: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url + path, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


class _Running:
    """The worker's running tasks for its own endpoint: none (latest: 503 moving)."""

    def running(self, task: str) -> bool:
        return False

    def tables(self, task: str, operator: str) -> None:
        return None

    def position(self, task: str) -> dict[str, Any]:
        return {}

    def published(self, task: str) -> None:
        return None


class Rig(NamedTuple):
    """A worker's query endpoint and its sidecar, started on a public port."""

    task: str  # the task of key "alice", which holds 42 at checkpoint 7 (snapshotted)
    backend: RocksDBBackend
    gate: StateGate
    service: QueryService
    worker: QueryServer
    port: int  # the public one
    sidecar: QuerySidecar

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def started_sidecar(tmp_path: Path, service_type: type[QueryService]) -> Rig:
    """Task state of key "alice" (42) snapshotted at checkpoint 7, not yet named to the
    sidecar; the worker's endpoint (``service_type``) and a sidecar on a public port."""
    task = INFO.task_of("alice")
    assert task is not None
    b = RocksDBBackend(tmp_path / "tasks" / task)
    b.table(TableSpec(TABLE)).put(("alice",), 42)
    snapshot(b, 7)
    gate = StateGate()
    service = service_type({OP: INFO}, Directory(coordinated=False), gate, _Running(), None)
    worker = QueryServer(service, 0, "127.0.0.1", gate, listener=bind(0, "127.0.0.1"))
    public = bind(0, "127.0.0.1")
    sidecar = QuerySidecar(tmp_path / "sidecar")
    sidecar.start(public, worker, {OP: INFO}, None)
    return Rig(task, b, gate, service, worker, public.getsockname()[1], sidecar)


def test_the_sidecar_process_answers_beside_a_busy_worker_and_stops_with_it(
    tmp_path: Path,
) -> None:
    key = "alice"
    rig = started_sidecar(tmp_path, QueryService)
    task, b, gate, worker, url, sidecar = (
        rig.task, rig.backend, rig.gate, rig.worker, rig.url, rig.sidecar
    )  # fmt: skip
    try:
        assert sidecar.process is not None and sidecar.process.is_alive()
        sidecar.completed(7, {task: b}, "member-1")
        q = f"/state/{OP}/get?key={key}&consistency=checkpointed"
        # (until the sidecar follows the pointer, the worker answers: no store here)
        wait_for(lambda: get(url, q)[1].get("worker") == "member-1")
        gate.enter()  # the worker's loop holds its state from here on
        try:
            status, body = get(url, q)
            assert body == {
                "operator": OP, "query": "get", "consistency": "checkpointed",
                "task": task, "worker": "member-1", "found": True, "value": 42,
                "position": {"checkpoint": 7},
            }  # fmt: skip
            other = next(k for k in (f"u{i}" for i in range(99)) if INFO.task_of(k) == task)
            status, body = get(url, f"/state/{OP}/get?key={other}&consistency=checkpointed")
            assert (status, body["found"], body["value"]) == (200, False, None)
        finally:
            gate.leave()
        # The rest is the worker's, relayed: here "moving" (it runs no task), and a
        # checkpointed read it has no store for.
        status, body = get(url, f"/state/{OP}/get?key={key}")
        assert (status, body["error"]) == (503, "moving")
        status, body = get(url, f"/state/{OP}/get?key={key}&consistency=checkpointed&checkpoint=6")
        assert status == 404 and "checkpoint store" in body["error"]
        status, body = get(url, "/state")
        assert status == 200 and list(body["operators"]) == [OP]
        worker.close()  # the worker gone (killed): its tasks are moving
        status, body = get(url, f"/state/{OP}/get?key={key}")
        assert (status, body["error"]) == (503, "moving")
    finally:
        process = sidecar.process
        sidecar.close()
        b.close()
    assert process is not None and not process.is_alive()
    assert not (tmp_path / "sidecar").exists()
    with pytest.raises(OSError):
        urllib.request.urlopen(url + "/state", timeout=2)


def test_the_sidecar_pins_what_the_worker_names_and_a_lookup_waits_for_it(
    tmp_path: Path,
) -> None:
    b = RocksDBBackend(tmp_path / "task", local_retained=5)
    t = b.table(TableSpec(TABLE))
    root = tmp_path / "pins"
    root.mkdir()
    views = PinnedViews(root)  # (driven by hand here: no thread)
    try:
        t.put(("n",), 1)
        write_pending(root, 1, "w1", {"stage1-0": snapshot(b, 1).directory})
        views.read_pending()
        views.pin_pending()
        assert views.refresh() and views.current.checkpoint == 1
        assert not views.expects("stage1-0")
        t.put(("n",), 2)
        src = snapshot(b, 2).directory
        unmarked = b.snapshot_sync(3, deltas=True).directory  # (not uploaded: not pinned)
        write_pending(root, 2, "w1", {"stage1-0": src, "stage1-1": unmarked})  # completed
        views.read_pending()
        assert views.expects("stage1-0") and views.expects("stage1-1")
        assert not views.expects("stage1-2")  # (not this worker's)
        got: list[Any] = []
        waiting = threading.Event()

        def lookup() -> None:
            waiting.set()
            views.wait("stage1-0", 20.0)
            got.append(views.current)

        waiter = threading.Thread(target=lookup)
        waiter.start()
        assert waiting.wait(10)
        views.pin_pending()
        assert not got or got[0].checkpoint == 1  # (the pointer is not followed yet)
        assert views.refresh()
        waiter.join(30)
        assert got and got[0].checkpoint == 2 and list(got[0].views) == ["stage1-0"]
        assert got[0].views["stage1-0"].table(TABLE).get(("n",)) == 2
        assert (root / "stage1-0" / "chk-2").is_dir() and not (root / "stage1-1").exists()
        assert not views.expects("stage1-1")  # (the worker answers for it)
    finally:
        views.close()
        b.close()


class _FromStore(QueryService):
    """The worker's endpoint: its checkpointed answer (from the store in a worker) is
    the snapshot's value, said to come from the worker itself."""

    def _checkpointed(self, info: OperatorInfo, q: Query) -> Answer:
        head = self._head(info, q, info.task_of(q.key or ""))
        return Answer(200, head | {"found": True, "value": 42, "position": {"checkpoint": 7},
                                   "in_process": True})  # fmt: skip


def test_a_killed_sidecar_is_replaced_and_the_worker_answers_its_port_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first death: a new sidecar at once; the second in a row: after 60 s.
    monkeypatch.setattr(querysidecar, "RESTART_PAUSES_S", (0.0, 60.0))
    key = "alice"
    rig = started_sidecar(tmp_path, _FromStore)
    task, b, gate, worker, url, sidecar = (
        rig.task, rig.backend, rig.gate, rig.worker, rig.url, rig.sidecar
    )  # fmt: skip
    q = f"/state/{OP}/get?key={key}&consistency=checkpointed"
    by_sidecar = {
        "operator": OP, "query": "get", "consistency": "checkpointed", "task": task,
        "worker": "member-1", "found": True, "value": 42, "position": {"checkpoint": 7},
    }  # fmt: skip
    try:
        sidecar.completed(7, {task: b}, "member-1")
        wait_for(lambda: get(url, q)[1] == by_sidecar)
        first = sidecar.process
        os.kill(first.pid, signal.SIGKILL)
        first.join(10)  # (dead: no request of ours was in flight in it)
        # Every answer meanwhile is the snapshot's value, from the worker or a sidecar.
        while sidecar.restarts == 0 or not sidecar._serving:
            status, body = get(url, q)
            assert status == 200 and body["value"] == 42, body
        second = sidecar.process
        assert second is not first and second.is_alive() and sidecar.restarts == 1
        gate.enter()  # the worker's loop holds its state: only a sidecar answers now
        try:
            assert get(url, q) == (200, by_sidecar)
        finally:
            gate.leave()

        os.kill(second.pid, signal.SIGKILL)  # the second death in a row: no sidecar for 60 s
        second.join(10)
        wait_for(lambda: get(url, q)[1].get("in_process"))
        conn = http.client.HTTPConnection("127.0.0.1", rig.port, timeout=10)
        for _ in range(3):  # on one connection (keep-alive), and on new ones
            conn.request("GET", q)
            resp = conn.getresponse()
            assert (resp.status, json.loads(resp.read())["in_process"]) == (200, True)
            status, body = get(url, q)
            assert status == 200 and body["value"] == 42 and body["in_process"]
        assert sidecar.process is second and sidecar.restarts == 1
        conn.close()
    finally:
        began = time.monotonic()
        sidecar.close()  # (not waiting out the pause)
        closed_in = time.monotonic() - began
        worker.close()
        b.close()
    assert closed_in < 10
    with pytest.raises(OSError):
        urllib.request.urlopen(url + "/state", timeout=2)


def test_connections_of_a_released_listener_close_after_their_next_answer() -> None:
    gate = StateGate()
    service = QueryService({OP: INFO}, Directory(coordinated=False), gate, _Running(), None)
    server = QueryServer(service, 0, "127.0.0.1", gate, listener=bind(0, "127.0.0.1"))
    other = bind(0, "127.0.0.1")
    try:
        server.adopt(other)
        conn = http.client.HTTPConnection("127.0.0.1", other.getsockname()[1], timeout=10)
        conn.request("GET", "/state")
        resp = conn.getresponse()
        assert (resp.status, resp.getheader("Connection")) == (200, None)
        resp.read()
        server.release(other)
        conn.request("GET", "/state")  # (the same connection: accepted before)
        resp = conn.getresponse()
        assert (resp.status, resp.getheader("Connection")) == (200, "close")
        assert list(json.loads(resp.read())["operators"]) == [OP]
        conn.close()
    finally:
        server.close()
        other.close()


def test_a_lookup_relayed_as_the_checkpoint_completes_waits_for_its_snapshot(
    tmp_path: Path,
) -> None:
    # The sidecar has no snapshot yet; the lookup it relays finds checkpoint 7 completed
    # at the worker, which is pinning its snapshot for the sidecar right then: the
    # sidecar answers it from that snapshot, and the worker never reads the store.
    key = "alice"
    rig = started_sidecar(tmp_path, _FromStore)
    task, b, service, worker, url, sidecar = (
        rig.task, rig.backend, rig.service, rig.worker, rig.url, rig.sidecar
    )  # fmt: skip
    asked = threading.Event()

    def completing(t: str) -> bool:  # the checkpoint completes as the lookup arrives
        sidecar.completed(7, {task: b}, "member-1")
        asked.set()
        return sidecar.pinning(t, 7)

    service.pinning = completing
    got: list[tuple[int, dict[str, Any]]] = []
    lookup = threading.Thread(
        target=lambda: got.append(get(url, f"/state/{OP}/get?key={key}&consistency=checkpointed"))
    )
    try:
        lookup.start()
        assert asked.wait(20)
        lookup.join(30)
        assert got == [(200, {
            "operator": OP, "query": "get", "consistency": "checkpointed", "task": task,
            "worker": "member-1", "found": True, "value": 42, "position": {"checkpoint": 7},
        })]  # fmt: skip
    finally:
        sidecar.close()
        worker.close()
        b.close()
