"""The query sidecar follows its snapshots in steps, between its answers: a view opened
in steps is the view opened at once; while a newer checkpoint is being opened, every
lookup reads the previous one whole; the server takes the steps on the thread that
answers, an answer waiting for one step at most (and going on when a step fails), and
no thread of the sidecar's own takes the GIL from it."""

from __future__ import annotations

import itertools
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from kstream.query.gate import StateGate
from kstream.query.operators import OperatorInfo
from kstream.query.pinned import PinnedViews, write_pending
from kstream.query.routing import Directory
from kstream.query.server import QueryServer, bind
from kstream.query.service import Answer, QueryService
from kstream.state import snapshotview
from kstream.state.base import TableSpec
from kstream.state.rocksdb import RocksDBBackend
from kstream.state.snapshotview import SnapshotView
from kstream.state.steps import Steps
from tests.test_query_sidecar import INFO, OP, TABLE, _Running, snapshot

KEYS = 3 * snapshotview.SPLIT  # a delta's writes: several steps


def steps_of(work: Steps[Any]) -> tuple[int, Any]:
    """How many steps ``work`` took, and its result."""
    n = 0
    while True:
        n += 1
        try:
            next(work)
        except StopIteration as done:
            return n, done.value


def counts(backend: RocksDBBackend, n: int) -> None:
    t = backend.table(TableSpec(TABLE))
    for i in range(KEYS):
        t.put((f"k{i:05d}",), n * 100_000 + i)


def test_a_view_opened_in_steps_is_the_view_opened_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    b = RocksDBBackend(tmp_path / "task", local_retained=5)
    t = b.table(TableSpec(TABLE))
    counts(b, 1)
    s1 = snapshot(b, 1)  # the base
    counts(b, 2)
    t.delete_range(("k00010",), ("k00020",))
    s2 = snapshot(b, 2)  # a delta
    counts(b, 3)
    t.delete(("k00005",))
    s3 = snapshot(b, 3)
    assert (s3.directory / "deltas").is_dir()
    keys = [(f"k{i:05d}",) for i in range(KEYS)]
    at_once = SnapshotView(s3.directory)
    n, stepped = steps_of(SnapshotView.opening(s3.directory))
    assert n > 2 * KEYS // snapshotview.SPLIT  # (each delta's writes in slices)
    v1 = SnapshotView(s1.directory)
    m, advanced = steps_of(SnapshotView.opening(s3.directory, v1))
    assert advanced.shares_base(v1) and m < n
    for view in (stepped, advanced):
        assert [view.table(TABLE).get(k) for k in keys] == [
            at_once.table(TABLE).get(k) for k in keys
        ]
    assert at_once.table(TABLE).get(("k00005",)) is None
    assert at_once.table(TABLE).get(("k00015",)) == 300_015  # (written again after the range)
    assert at_once.table(TABLE).get(("k00006",)) == 300_006
    # Given up half way, an opening leaves nothing open.
    closed: list[object] = []
    real_close = snapshotview._Base.close

    def close(base: Any) -> None:
        closed.append(base)
        real_close(base)

    monkeypatch.setattr(snapshotview._Base, "close", close)
    work = SnapshotView.opening(s2.directory)
    next(work)
    next(work)
    work.close()
    assert len(closed) == 1
    for view in (at_once, stepped, advanced):
        view.close()
    v1.close(base=False)
    b.close()


def test_lookups_read_the_previous_checkpoint_whole_while_the_next_is_opened(
    tmp_path: Path,
) -> None:
    b = RocksDBBackend(tmp_path / "task", local_retained=5)
    root = tmp_path / "pins"
    root.mkdir()
    threads = threading.active_count()
    views = PinnedViews(root).start()
    assert threading.active_count() == threads  # (followed by whoever takes its steps)
    keys = [(f"k{i:05d}",) for i in range(KEYS)]
    try:
        for n in (1, 2, 3):
            counts(b, n)
            write_pending(root, n, "w1", {"stage1-0": snapshot(b, n).directory})
            steps = 0
            while views.step():
                steps += 1
                cur = views.current
                view = cur.views.get("stage1-0")
                if cur.checkpoint != n:  # (not swapped yet: all of the previous one)
                    assert cur.checkpoint == (n - 1 if n > 1 else None)
                    want = [(n - 1) * 100_000 + i for i in range(KEYS)] if n > 1 else None
                    got = [view.table(TABLE).get(k) for k in keys] if view else None
                    assert got == want
            assert steps > KEYS // snapshotview.SPLIT or n == 1  # (a delta: in slices)
            assert views.current.checkpoint == n and not views.expects("stage1-0")
            view = views.current.views["stage1-0"]
            assert [view.table(TABLE).get(k) for k in keys] == [
                n * 100_000 + i for i in range(KEYS)
            ]
    finally:
        views.close()
        b.close()


class _Echo(QueryService):
    """Answers every lookup itself, saying on which thread."""

    front = True

    def answer_here(
        self, op: str, operator: str, params: dict[str, str], forwarded: bool
    ) -> Answer | None:
        return Answer(200, {"thread": threading.current_thread().name})


def test_the_server_takes_background_steps_between_its_answers() -> None:
    info: dict[str, OperatorInfo] = {OP: INFO}
    gate = StateGate()
    service = _Echo(info, Directory(coordinated=False), gate, _Running(), None)
    stepped_on: set[str] = set()
    steps = threading.Semaphore(0)
    calls = itertools.count()

    def endless() -> bool:  # work that is never done: answers still go between its steps
        stepped_on.add(threading.current_thread().name)
        steps.release()
        if next(calls) == 1:
            raise OSError("a step that fails")  # (logged: the answers and the work go on)
        return True

    server = QueryServer(service, 0, "127.0.0.1", gate, listener=bind(0, "127.0.0.1"),
                         background=endless)  # fmt: skip
    try:
        assert steps.acquire(timeout=10)
        for _ in range(3):
            url = f"{server.url}/state/{OP}/get?key=alice&consistency=checkpointed"
            with urllib.request.urlopen(url, timeout=10) as resp:
                assert resp.status == 200
                answered_on = resp.read().decode()
            assert steps.acquire(timeout=10)  # (and the work goes on after each answer)
        assert stepped_on == {"kstream-query"} and '"thread":"kstream-query"' in answered_on
    finally:
        server.close()
