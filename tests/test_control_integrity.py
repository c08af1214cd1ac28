"""Control-topic integrity: signed coordinator messages, store-verified completions,
recovery from authority only, `kstream run` stopping with its coordinator."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kstream.api import Topology
from kstream.checkpointstorage.controlkey import ensure_key, load_key
from kstream.checkpointstorage.file import FileStore
from kstream.checkpointstorage.metadata import (
    CheckpointMetadata,
    TaskSnapshot,
    completion_backing,
    write_metadata,
)
from kstream.hosting import embedded
from kstream.hosting.coordinator import CommandExecutor, _is_manifest_of
from kstream.plan import plan_job
from kstream.plan.fingerprint import fingerprint
from kstream.protocol.messages import (
    AcknowledgeCheckpoint,
    CheckpointCompleted,
    DeclineCheckpoint,
    Resume,
    TaskFailed,
    TaskReady,
    TriggerCheckpoint,
    decode,
    encode,
)
from kstream.protocol.recovery import recover
from kstream.protocol.signing import sign, verify

KEY = b"k" * 32


def test_only_messages_signed_with_the_key_verify() -> None:
    data = sign(encode(CheckpointCompleted(5, 2)), KEY, 3, 1)
    assert verify(data, KEY) == (3, 1)
    assert decode(data) == CheckpointCompleted(5, 2)
    assert verify(data, b"x" * 32) is None  # another job's key
    assert verify(encode(CheckpointCompleted(5, 2)), KEY) is None  # unsigned (a plain client)
    forged = data.replace(b'"checkpoint_id":5', b'"checkpoint_id":9')
    assert verify(forged, KEY) is None  # tampered


def test_the_key_is_created_once_in_the_store(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    assert load_key(store, "app") is None
    key = ensure_key(store, "app")
    assert len(key) == 32 and ensure_key(store, "app") == key == load_key(store, "app")


def test_workers_reports_never_raise_ids_or_attempts_on_recovery() -> None:
    huge = 10**12
    history: list[Any] = [
        TriggerCheckpoint(4, 1, 0),
        Resume(1, {"a": "w1"}),
        AcknowledgeCheckpoint(huge, "a", huge, TaskSnapshot("x")),
        DeclineCheckpoint(huge, "a", huge, "x"),
        TaskReady(huge, "a", "w9", 1),
        TaskFailed("a", "w9", huge, "forged"),
    ]
    st = recover(history, [3], None)
    assert (st.max_checkpoint_id, st.attempt, st.unhandled_failure) == (4, 1, "")


def test_a_worker_acts_only_on_completions_the_store_holds(tmp_path: Path) -> None:
    t = Topology("app")
    t.source("in").to("out")
    plan = fingerprint(plan_job(t, "app", {"in": 1})).digest
    store, snap = FileStore(tmp_path), {"a": TaskSnapshot("h")}
    write_metadata(store, "app", CheckpointMetadata(7, 2, 0.0, 1.0, snap, plan=plan))
    write_metadata(store, "app", CheckpointMetadata(8, 2, 0.0, 1.0, snap, plan="other-plan"))

    def why(checkpoint_id: int, attempt: int) -> str | None:
        backing = completion_backing(store, "app", checkpoint_id, attempt, plan)
        return backing if isinstance(backing, str) else None

    assert (why(10**12, 2) or "").startswith("no valid metadata in the store")  # forged
    assert why(7, 3) == "its metadata is of attempt 2, the message says 3"
    assert why(8, 2) == f"it was taken with plan other-plan, ours is {plan}"
    assert why(7, 2) is None


def test_cleanup_deletes_only_manifests_of_the_aborted_checkpoint(tmp_path: Path) -> None:
    assert _is_manifest_of("app", "app/tasks/stage0-1/chk-5.json", 5)
    assert not _is_manifest_of("app", "app/tasks/stage0-1/chk-6.json", 5)
    assert not _is_manifest_of("app", "app/checkpoints/chk-5.json", 5)
    assert not _is_manifest_of("app", "app/tasks/../checkpoints/chk-5.json", 5)
    assert not _is_manifest_of("app", "other/tasks/t/chk-5.json", 5)
    store = FileStore(tmp_path)
    store.put_bytes("app/checkpoints/chk-5.json", b"{}")
    store.put_bytes("app/tasks/t/chk-5.json", b"{}")
    ex = CommandExecutor.__new__(CommandExecutor)
    ex.store, ex.app_id = store, "app"
    ex._cleanup(5, ("app/checkpoints/chk-5.json", "app/tasks/t/chk-5.json"))
    assert store.exists("app/checkpoints/chk-5.json")  # a forged ack's handle: kept
    assert not store.exists("app/tasks/t/chk-5.json")


def test_kstream_run_exits_non_zero_when_its_coordinator_thread_dies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def dying_coordinator(*_a: Any, **_k: Any) -> int:
        raise RuntimeError("coordinator bug")

    monkeypatch.setattr(embedded, "coordinate", dying_coordinator)
    monkeypatch.setattr(embedded.Coordination, "of", lambda plan: None)
    stop = threading.Event()

    def run() -> int:
        stop.wait(20.0)  # a worker runs until stopped
        return 0

    worker: Any = SimpleNamespace(
        checkpointed=True,
        cfg=None,
        plan=SimpleNamespace(expected_tasks=frozenset({"a"})),
        stop_event=stop,
        run=run,
    )
    assert embedded.run_embedded(worker) == 1
    assert stop.is_set()


def test_kstream_run_stops_gracefully_when_its_coordinator_finishes_a_stop_with_savepoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A coordinator that ended cleanly (``savepoint --stop``) has published the final
    checkpoint's completion: the worker must read it and publish its output, not be
    stopped at once (which lost "stopping: the final checkpoint completed")."""
    monkeypatch.setattr(embedded, "coordinate", lambda *_a, **_k: 0)
    monkeypatch.setattr(embedded.Coordination, "of", lambda plan: None)
    stop, graceful = threading.Event(), threading.Event()

    def run() -> int:
        assert graceful.wait(20.0)  # the worker drains and ends on its own
        return 0

    worker: Any = SimpleNamespace(
        checkpointed=True,
        cfg=None,
        plan=SimpleNamespace(expected_tasks=frozenset({"a"})),
        stop_event=stop,
        request_stop=graceful.set,
        run=run,
    )
    assert embedded.run_embedded(worker) == 0
    assert graceful.is_set()
