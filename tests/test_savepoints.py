"""Savepoints and starting from a chosen state, no broker: the coordinator's savepoint
decisions with a fake clock, the store's savepoint layout, retention around it, the
import of a checkpoint or savepoint (also of another app), and a worker's StopJob."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from kstream.api import Topology, Tumbling, WatermarkStrategy
from kstream.checkpointstorage.file import FileStore
from kstream.checkpointstorage.layout import manifest_path, shared_path
from kstream.checkpointstorage.metadata import (
    CheckpointMetadata,
    MetadataError,
    TaskSnapshot,
    completed_ids,
    read_metadata,
    write_metadata,
)
from kstream.checkpointstorage.savepoints import (
    create_savepoint,
    delete_savepoint,
    list_savepoints,
    read_savepoint,
)
from kstream.checkpointstorage.startfrom import import_start
from kstream.cli import main
from kstream.cli.state import dump_state
from kstream.config import ConfigError, JobConfig, RestartStrategy, StartFrom
from kstream.hosting.coordinator import run_coordinator
from kstream.plan import plan_job
from kstream.plan.compat import IncompatibleStateError
from kstream.plan.operators import describe
from kstream.protocol.commands import ApplyRetention, CreateSavepoint, Finish, Send, WriteMetadata
from kstream.protocol.failover import JobPhase
from kstream.protocol.messages import (
    CheckpointCompleted,
    CheckpointRequest,
    JobFailed,
    JobStopped,
    Message,
    Restore,
    Resume,
    SavepointRequest,
    StopJob,
    TaskFailed,
    TaskReady,
    WorkerStopped,
    decode,
    encode,
)
from kstream.protocol.worker import WorkerProtocol
from kstream.protocol.workerevents import Exit, StopRequested
from kstream.runtime.task import Task
from kstream.snapshots.retention import apply_retention
from kstream.snapshots.upload import FileEntry, SnapshotManifest, SnapshotUploader
from kstream.state.rocksdb import RocksDBBackend
from tests.conftest import Kit
from tests.test_coordinator import Harness, messages, triggers
from tests.test_coordinator_run import Event, FakeTransport

DESC = {"version": 1, "operators": {"w": {"kind": "window"}}, "stages": {"stage0": 1}}


def test_messages_round_trip() -> None:
    for msg in (SavepointRequest("sp-1", True, "cli@host"), StopJob(3, "stop with savepoint")):
        assert decode(encode(msg)) == msg


def test_savepoint_is_the_next_checkpoint() -> None:
    h = Harness(tasks=["a"], interval=100.0)
    h.c.description = DESC
    h.start(0.0)
    assert h.send(SavepointRequest("sp-1", False, "cli"), 1.0) == []
    assert triggers(h.tick(1.1)) == [1]  # requested: no waiting for the interval
    out = h.ack(1, "a", 1.2)
    assert [type(c) for c in out] == [WriteMetadata, Send, CreateSavepoint, ApplyRetention]
    sp = out[2]
    assert isinstance(sp, CreateSavepoint) and sp.name == "sp-1"
    assert sp.metadata.checkpoint_id == 1 and sp.metadata.description == DESC
    h.ack(2, "a", 1.3)
    assert not any(isinstance(c, CreateSavepoint) for c in h.executed[len(out) :])


def test_stop_with_savepoint_stops_workers_before_the_trigger_then_finishes() -> None:
    h = Harness(tasks=["a"], interval=1.0, max_concurrent=1)
    h.start(0.0)
    assert triggers(h.tick(1.0)) == [1]  # in flight before the request: not the savepoint
    assert messages(h.send(SavepointRequest("last", True, "cli"), 1.1)) == [
        StopJob(0, "stop with savepoint last", after=1)
    ]
    out = h.ack(1, "a", 1.2)
    assert not any(isinstance(c, CreateSavepoint | Finish) for c in out)
    assert triggers(h.tick(1.3)) == [2]  # triggered after StopJob on the control topic
    out = h.ack(2, "a", 1.4)
    assert [type(c) for c in out] == [
        WriteMetadata,
        Send,
        CreateSavepoint,
        ApplyRetention,
        Send,
        Finish,
    ]
    reason = "stopped with savepoint last (checkpoint 2)"
    # Sinks publish, workers exit; the control topic says the job stopped, and why.
    assert messages(out) == [CheckpointCompleted(2, 0), JobStopped(0, reason)]
    assert out[-1] == Finish(reason)
    assert h.c.phase is JobPhase.STOPPED
    # A worker's graceful-stop request that crossed the completion triggers nothing.
    assert h.send(CheckpointRequest("m", 0, "graceful stop"), 1.5) == []
    assert h.tick(100.0) == []
    assert h.send(SavepointRequest("again", False, "cli"), 1.5) == []


def test_a_savepoint_asked_for_while_the_job_restores_is_made_once_it_runs() -> None:
    """Refused, the request left `kstream savepoint` waiting out its timeout (seen in CI:
    a savepoint asked for just as the job failed over)."""
    h = Harness(tasks=["a"], history=[], interval=100.0)  # a first start: restoring
    h.start(0.0)
    assert h.send(SavepointRequest("sp", True, "cli"), 0.1) == []  # waits for the restore
    assert any(isinstance(m, Restore) for m in messages(h.tick(1.0)))
    assert h.c.phase is JobPhase.RESTORING
    assert triggers(h.tick(1.1)) == []  # nothing is triggered while the job restores
    attempt = h.c.attempt
    out = h.send(TaskReady(attempt, "a", "w1", 1), 1.2)
    assert messages(out) == [
        Resume(attempt, {"a": "w1"}),
        StopJob(attempt, "stop with savepoint sp", after=0),
    ]
    n = triggers(h.tick(1.3))  # asked for: no waiting for the interval
    assert len(n) == 1
    out = h.ack(n[0], "a", 1.4, attempt=attempt)
    assert [type(c) for c in out] == [
        WriteMetadata, Send, CreateSavepoint, ApplyRetention, Send, Finish
    ]  # fmt: skip
    assert h.c.phase is JobPhase.STOPPED
    assert h.send(SavepointRequest("again", False, "cli"), 1.5) == []  # stopped: refused


def test_a_stop_with_savepoint_crossed_by_a_failover_stops_the_new_attempt() -> None:
    """Its StopJob went to the attempt the job then failed over from; the workers of the
    new attempt must be told again, and the savepoint is one of theirs."""
    h = Harness(tasks=["a"], interval=100.0)
    h.start(0.0)
    assert messages(h.send(SavepointRequest("sp", True, "cli"), 0.1)) == [
        StopJob(0, "stop with savepoint sp", after=0)
    ]
    assert triggers(h.tick(0.2)) == [1]
    h.send(TaskFailed("a", "w1", 0, "boom"), 0.3)  # before checkpoint 1 completed
    assert any(isinstance(m, Restore) for m in messages(h.tick(1.0)))
    attempt = h.c.attempt
    assert attempt == 1
    out = h.send(TaskReady(attempt, "a", "w1", 1), 1.1)
    assert messages(out) == [Resume(1, {"a": "w1"}), StopJob(1, "stop with savepoint sp", after=1)]
    n = triggers(h.tick(1.2))
    assert len(n) == 1 and n[0] > 1
    out = h.ack(n[0], "a", 1.3, attempt=1)
    assert [type(c) for c in out] == [
        WriteMetadata, Send, CreateSavepoint, ApplyRetention, Send, Finish
    ]  # fmt: skip


def test_worker_stops_gracefully_on_stop_job_of_its_attempt() -> None:
    p = WorkerProtocol("m", now=0.0)
    assert p.handle(StopJob(5, "old attempt"), 0.0) == []
    assert not p.stopping
    acts = p.handle(StopJob(0, "stop with savepoint x"), 0.0)
    assert p.stopping
    why = "stopping: nothing runs here, so nothing is left to commit"
    assert acts == [Send(WorkerStopped("m", 0, why)), Exit(0, why)]
    assert p.handle(StopRequested(), 0.1) == []


# -- the store ---------------------------------------------------------------------------


def _checkpoint(store: FileStore, app: str, n: int, files: dict[str, bytes]) -> CheckpointMetadata:
    """A completed checkpoint ``n`` of ``app`` with one task whose manifest names ``files``."""
    for sha, data in files.items():
        store.put_bytes(shared_path(app, sha), data)
    handle = manifest_path(app, "stage0-0", f"chk-{n}")
    entries = tuple(
        FileEntry(sha, len(data), sha, shared_path(app, sha)) for sha, data in files.items()
    )
    manifest = SnapshotManifest(app, "stage0-0", n, f"chk-{n}", 0, 1.0, 1, (), entries)
    store.put_bytes(handle, manifest.to_json())
    meta = CheckpointMetadata(n, 0, 1.0, 2.0, {"stage0-0": TaskSnapshot(handle, {"in:0": n})})
    write_metadata(store, app, meta)
    return meta


def test_savepoint_copies_manifests_and_writes_metadata_last(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    meta = _checkpoint(store, "app", 4, {"s1": b"x"})
    path = create_savepoint(store, "app", "sp-4", meta)
    assert path == "app/savepoints/sp-4"
    sp = read_savepoint(store, path + "/")
    assert sp.checkpoint_id == 4
    assert sp.tasks["stage0-0"].handle == "app/savepoints/sp-4/tasks/stage0-0.json"
    assert store.get_bytes(sp.tasks["stage0-0"].handle) == store.get_bytes(
        meta.tasks["stage0-0"].handle
    )
    assert [s.name for s in list_savepoints(store, "app")] == ["sp-4"]
    with pytest.raises(ValueError):
        create_savepoint(store, "app", "a/b", meta)
    assert delete_savepoint(store, path) == 2
    assert list_savepoints(store, "app") == []
    with pytest.raises(MetadataError, match="no savepoint"):
        delete_savepoint(store, path)


def test_retention_keeps_what_a_savepoint_needs(tmp_path: Path) -> None:
    """Shared files only a savepoint references outlive their checkpoints; after the
    savepoint is deleted the next retention pass collects them."""
    store = FileStore(tmp_path)
    first = _checkpoint(store, "app", 1, {"old": b"1"})
    create_savepoint(store, "app", "sp", first)
    for n in (2, 3):
        _checkpoint(store, "app", n, {f"new{n}": b"2"})
    apply_retention(store, "app", 1, grace_seconds=0.0)
    assert completed_ids(store, "app") == [3]
    assert store.exists(shared_path("app", "old"))  # the savepoint needs it
    assert not store.exists(shared_path("app", "new2"))
    delete_savepoint(store, "app/savepoints/sp")
    apply_retention(store, "app", 1, grace_seconds=0.0)
    assert not store.exists(shared_path("app", "old"))


def _plan_description(size_ms: int = 1000) -> dict[str, object]:
    t = Topology("wc")
    t.source("in", keyed=True, watermark=WatermarkStrategy(0)).window(
        Tumbling(size_ms), name="counts"
    ).count().map(lambda r: r.value).to("out")
    return describe(plan_job(t, "wc", {"in": 1}))


def test_start_from_a_savepoint_of_another_app_imports_it_once(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    desc = _plan_description()
    src = _checkpoint(store, "blue", 7, {"s": b"x"})

    path = create_savepoint(store, "blue", "sp-7", replace(src, description=desc))
    start = StartFrom(savepoint=path)
    meta = import_start(store, "green", start, next_id=1, attempt=0, description=desc, now=9.0)
    assert meta is not None
    got = read_metadata(store, "green", 1)
    assert got.origin == "savepoint blue/savepoints/sp-7"
    assert got.tasks["stage0-0"].handle == "blue/savepoints/sp-7/tasks/stage0-0.json"
    assert got.tasks["stage0-0"].offsets == {"in:0": 7}  # source positions come from it
    # A restarted coordinator with the same flag continues from the job's own state.
    assert (
        import_start(store, "green", start, next_id=5, attempt=1, description=desc, now=10) is None
    )


def test_start_from_refuses_state_that_does_not_fit(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    _checkpoint(store, "app", 3, {"s": b"x"})  # no description: before stable ids
    start = StartFrom(checkpoint="3")
    desc = _plan_description()
    with pytest.raises(IncompatibleStateError, match="taken before stable operator ids"):
        import_start(store, "app", start, next_id=4, attempt=0, description=desc, now=1.0)
    assert completed_ids(store, "app") == [3]  # nothing written
    meta = read_metadata(store, "app", 3)

    write_metadata(store, "app", replace(meta, checkpoint_id=5, description=_plan_description(10)))
    with pytest.raises(IncompatibleStateError, match="operator 'counts': its window changed"):
        import_start(
            store,
            "app",
            StartFrom(checkpoint="app:5"),
            next_id=6,
            attempt=0,
            description=desc,
            now=1,
        )
    with pytest.raises(MetadataError):
        import_start(
            store, "app", StartFrom(checkpoint="9"), next_id=6, attempt=0, description=desc, now=1
        )
    ok = import_start(
        store,
        "app",
        StartFrom(checkpoint="3", allow_non_restored_state=True),
        next_id=6,
        attempt=0,
        description=desc,
        now=1.0,
    )
    assert ok is not None and ok.checkpoint_id == 6


def test_start_from_options_are_validated() -> None:
    with pytest.raises(ConfigError, match="not both"):
        StartFrom(checkpoint="1", savepoint="a/savepoints/b")
    with pytest.raises(ConfigError, match="ID or APP:ID"):
        StartFrom(checkpoint="latest")
    assert StartFrom(checkpoint="other:12").given and not StartFrom().given


def test_state_dump_reads_an_operators_keyed_state_from_the_store(
    tmp_path: Path, kit: type[Kit]
) -> None:
    """The window counts of a task snapshot, read offline from the store by operator id."""
    t = Topology("wc")
    t.source("in", keyed=True, watermark=WatermarkStrategy(0)).window(
        Tumbling(1000), name="counts"
    ).count().map(lambda r: r.value).to("out")
    plan = plan_job(t, "wc", {"in": 1})
    backend = RocksDBBackend(tmp_path / "task")
    task = Task(plan, "stage0-0", backend)
    task.feed_source("in", 0, kit.records([("a", 1, 100), ("b", 1, 200), ("a", 1, 300)]), 0.0)
    backend.flush()
    store = FileStore(tmp_path / "store")
    handle = SnapshotUploader(store, "wc", "stage0-0").upload(backend.snapshot_sync(1))
    meta = CheckpointMetadata(
        1, 0, 1.0, 2.0, {"stage0-0": TaskSnapshot(handle.result(30).manifest_path)}, describe(plan)
    )
    rows = dump_state(store, meta, "counts", None, tmp_path / "dump")
    assert [(r["table"], r["key"], r["value"]) for r in rows] == [
        ("acc", [1000, 0, "a"], 2),
        ("acc", [1000, 0, "b"], 1),
        ("meta", ["wm"], 300),  # the operator's watermark
    ]
    assert [r["key"] for r in dump_state(store, meta, "counts", "b", tmp_path / "d2")] == [
        [1000, 0, "b"]
    ]
    with pytest.raises(ValueError, match=r"no stateful operator 'nope' .*operators: counts"):
        dump_state(store, meta, "nope", None, tmp_path / "d3")
    backend.close()


# -- the coordinator process: what it restores at start -----------------------------------


def _run_coordinator(
    tmp_path: Path,
    start: StartFrom,
    description: dict[str, object],
    restart: RestartStrategy | None = None,
) -> list[Message]:
    events: list[Event] = []
    transport = FakeTransport(events, lambda m: [])
    code = run_coordinator(
        JobConfig("app", "unused:9092", start=start, restart=restart or RestartStrategy()),
        frozenset({"stage0-0"}),
        transport=transport,
        store=FileStore(tmp_path),
        clock=lambda: transport.now,
        should_stop=lambda: transport.now > 1002.0,
        poll_timeout=0.25,
        description=description,
    )
    return [code, *transport.sent()]  # type: ignore[list-item]


def test_the_coordinator_refuses_a_latest_checkpoint_of_an_incompatible_topology(
    tmp_path: Path,
) -> None:
    store = FileStore(tmp_path)
    meta = _checkpoint(store, "app", 3, {"s": b"x"})
    store.delete("app/checkpoints/chk-3.json")
    write_metadata(store, "app", replace(meta, description=_plan_description(1000)))
    assert _run_coordinator(tmp_path, StartFrom(), _plan_description(2000)) == [2]  # nothing sent
    code, *sent = _run_coordinator(tmp_path, StartFrom(), _plan_description(1000))
    assert code == 0 and sent  # the same topology runs on


def test_the_coordinator_restores_an_imported_savepoint_at_once(tmp_path: Path) -> None:
    """The control topic says the (previous version's) job was running: the savepoint is
    still restored at once, as the app's next checkpoint, by a new attempt."""
    store = FileStore(tmp_path)
    desc = _plan_description()
    src = replace(_checkpoint(store, "app", 4, {"s": b"x"}), description=desc)
    path = create_savepoint(store, "app", "v1", src)
    code, *sent = _run_coordinator(tmp_path, StartFrom(savepoint=path), desc)
    assert code == 0
    assert sent[0] == Restore(1, 5)
    assert read_metadata(store, "app", 5).origin == "savepoint app/savepoints/v1"


def test_a_start_from_a_savepoint_is_a_first_start_not_a_restart(tmp_path: Path) -> None:
    """--max-restarts 0 allows no restart, and starting from a savepoint is none (it was
    counted as one: 'starting from savepoint ...; restart strategy exhausted')."""
    store = FileStore(tmp_path)
    desc = _plan_description()
    src = replace(_checkpoint(store, "app", 4, {"s": b"x"}), description=desc)
    path = create_savepoint(store, "app", "v1", src)
    code, *sent = _run_coordinator(
        tmp_path, StartFrom(savepoint=path), desc, RestartStrategy(max_restarts=0)
    )
    assert code == 0
    assert sent[0] == Restore(1, 5)
    assert not [m for m in sent if isinstance(m, JobFailed)]


def test_savepoints_and_state_dump_commands(tmp_path: Path, kit: type[Kit]) -> None:
    t = Topology("wc")
    t.source("in", keyed=True, watermark=WatermarkStrategy(0)).window(
        Tumbling(1000), name="counts"
    ).count().map(lambda r: r.value).to("out")
    plan = plan_job(t, "wc", {"in": 1})
    backend = RocksDBBackend(tmp_path / "task")
    Task(plan, "stage0-0", backend).feed_source("in", 0, kit.records([("k", 1, 5)]), 0.0)
    backend.flush()
    store = FileStore(tmp_path / "store")
    up = SnapshotUploader(store, "wc", "stage0-0").upload(backend.snapshot_sync(1)).result(30)
    backend.close()
    meta = CheckpointMetadata(
        3, 0, 1.0, 2.0, {"stage0-0": TaskSnapshot(up.manifest_path)}, describe(plan)
    )
    write_metadata(store, "wc", meta)
    create_savepoint(store, "wc", "before-v2", meta)
    url = f"file://{tmp_path / 'store'}"
    runner = CliRunner()
    listed = runner.invoke(main, ["savepoints", "list", "--app-id", "wc", "--store", url])
    assert listed.exit_code == 0 and listed.output.startswith(
        "wc/savepoints/before-v2  checkpoint 3  "
    )
    for where in (["--checkpoint", "3"], ["--savepoint", "wc/savepoints/before-v2"], []):
        dumped = runner.invoke(
            main,
            [
                "state",
                "dump",
                "--app-id",
                "wc",
                "--store",
                url,
                "--operator",
                "counts",
                "--key",
                "k",
                *where,
            ],
        )
        assert dumped.exit_code == 0, dumped.output
        assert dumped.stdout.splitlines() == [
            '{"key": [1000, 0, "k"], "table": "acc", "task": "stage0-0", "value": 1}'
        ]
    bad = runner.invoke(
        main, ["state", "dump", "--app-id", "wc", "--store", url, "--operator", "x"]
    )
    assert bad.exit_code == 2 and "operators: counts" in bad.output
    gone = runner.invoke(main, ["savepoints", "delete", "wc/savepoints/before-v2", "--store", url])
    assert gone.exit_code == 0
    assert list_savepoints(store, "wc") == []
