"""Lookups answered beside a working processing loop (docs/queries.md, isolation): a
peek while the loop moves entries from its caches to RocksDB says "not now", never a
stale value; under forced thread switches every peek gives a value the key had during
it; and the endpoint answers a point lookup while the loop holds the gate, a scan only
once the loop lets it."""

from __future__ import annotations

import json
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kstream.protocol.messages import Restore, Resume
from kstream.query.gate import StateGate
from kstream.query.operators import OperatorInfo
from kstream.query.read import Tables
from kstream.query.routing import Directory
from kstream.query.server import QueryServer
from kstream.query.service import QueryService
from kstream.serde import serde_by_name
from kstream.state.base import NotNow, TableSpec
from kstream.state.rocksdb import RocksDBBackend

OP = "totals"
INFO = OperatorInfo(OP, "rolling", "stage1", 1, "str", serde_by_name("str"), "crc32")
TASK = "stage1-0"


def peeked(peek: Callable[[], Any]) -> Any:
    try:
        return peek()
    except NotNow:
        return "not now"


def test_a_peek_while_entries_move_to_rocksdb_says_not_now_never_a_stale_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = RocksDBBackend(tmp_path, cache_entries=100)
    table = backend.table(TableSpec(f"{OP}.acc"))
    table.put(("a",), "v1")  # not a compact int: after a flush, in RocksDB only
    table.put(("b",), "old")
    table.flush()
    table.put(("a",), "v2")
    seen: list[Any] = []
    write = backend.write

    def write_peeking(batch: Any) -> None:  # the cache is empty, RocksDB not written yet
        seen.append(peeked(lambda: table.peek(("a",))))
        seen.append(peeked(lambda: table.peek(("b",))))
        write(batch)

    monkeypatch.setattr(backend, "write", write_peeking)
    table.flush()  # "v2" on its way to RocksDB
    table.delete_range(("b",), ("c",))  # "old" on its way out
    assert seen == ["not now", "not now", "not now", "not now"]
    assert [table.peek(("a",)), table.peek(("b",), "gone")] == ["v2", "gone"]
    # Counters stay in the read cache; one under a range deletion is gone, the others not.
    monkeypatch.setattr(backend, "write", write)
    for k in "cde":
        table.put((k,), 7)
    table.flush()
    table.delete_range(("d",), ("e",))
    assert [table.peek((k,), "gone") for k in "cde"] == [7, "gone", 7]
    backend.close()
    assert peeked(lambda: table.peek(("a",))) == "not now"  # closed


def test_every_peek_under_forced_thread_switches_gives_a_value_the_key_had(
    tmp_path: Path,
) -> None:
    """The loop's thread writes counters (ints: read cache; text: RocksDB), flushes a
    small cache, takes delta snapshots and deletes ranges, while another thread peeks.
    Each peek must be at least the value the key had when it started (never stale)."""
    backend = RocksDBBackend(tmp_path, cache_entries=8)
    table = backend.table(TableSpec(f"{OP}.acc"))
    keys = [(f"k{i}",) for i in range(6)]
    floor = dict.fromkeys(keys, -1)  # the value each key has for sure (set after its put)
    stale: list[tuple[Any, int, Any]] = []
    answered = [0, 0]  # peeks answered, "not now"
    done = threading.Event()

    def value_of(i: int, n: int) -> Any:
        return n if i % 2 else f"{n:08d}"  # odd keys ints, even keys text

    def loop() -> None:
        for n in range(4000):
            for i, k in enumerate(keys):
                table.put(k, value_of(i, n))
                floor[k] = n
            table.put(("x", n), n)
            if n % 50 == 49:
                backend.snapshot_sync(n, background=True, deltas=True)
            if n % 30 == 29:
                table.delete_range(("x",), ("y",))
        done.set()

    def reader() -> None:
        while not done.is_set():
            for k in keys:
                low = floor[k]
                try:
                    got = table.peek(k)
                except NotNow:
                    answered[1] += 1
                    continue
                answered[0] += 1
                if (-1 if got is None else int(got)) < low:
                    stale.append((k, low, got))

    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    try:
        threads = [threading.Thread(target=loop), threading.Thread(target=reader)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        sys.setswitchinterval(before)
    backend.close()
    assert done.is_set()
    assert stale == []
    assert answered[0] > 100  # most peeks answer


class OneTask:
    def __init__(self, backend: RocksDBBackend) -> None:
        self.backend = backend
        for k, v in (("a", 1), ("b", 2)):
            backend.table(TableSpec(f"{OP}.acc")).put((k,), v)

    def running(self, task: str) -> bool:
        return task == TASK

    def tables(self, task: str, operator: str) -> Tables | None:
        return Tables.opened(operator, self.backend.tables()) if task == TASK else None

    def position(self, task: str) -> dict[str, Any]:
        return {"offsets": {"in[0]": 5}}

    def published(self, task: str) -> dict[str, Any] | None:
        return {"offsets": {"in[0]": 4}}


def test_a_lookup_is_answered_while_the_loop_holds_the_gate_and_a_scan_when_it_serves(
    tmp_path: Path,
) -> None:
    backend = RocksDBBackend(tmp_path, cache_entries=100)
    directory = Directory(me="m1")
    directory.observe(Resume(1, {TASK: "m1"}))
    gate = StateGate()
    server = QueryServer(
        QueryService({OP: INFO}, directory, gate, OneTask(backend), None),
        "47200-47299",
        "127.0.0.1",
        gate,
    )
    gate.enter()  # the loop works (a long snapshot, a restore) and serves nothing
    scanned: list[Any] = []

    def get(path: str) -> Any:
        with urllib.request.urlopen(server.url + path, timeout=10) as resp:
            return json.loads(resp.read())

    try:
        body = get(f"/state/{OP}/get?key=b")
        assert (body["value"], body["position"]) == (2, {"offsets": {"in[0]": 4}})
        scan = threading.Thread(target=lambda: scanned.append(get(f"/state/{OP}/scan")))
        scan.start()
        deadline = time.monotonic() + 10
        while not gate._queue and time.monotonic() < deadline:  # waits for the loop
            time.sleep(0.001)
        assert scanned == [] and len(gate._queue) == 1
        while scan.is_alive() and time.monotonic() < deadline:
            gate.serve()  # between two feeds
            scan.join(0.01)
        assert [e["key"] for e in scanned[0]["entries"]] == ["a", "b"]
        assert scanned[0]["tasks"][TASK]["position"] == {"offsets": {"in[0]": 5}}
        # A restore holds the loop up longest: "moving" at once, not after it.
        directory.observe(Restore(2, None))
        with pytest.raises(urllib.error.HTTPError) as moving:
            get(f"/state/{OP}/get?key=b")
        assert moving.value.code == 503 and json.loads(moving.value.read())["error"] == "moving"
    finally:
        gate.leave()
        server.close()
        backend.close()
