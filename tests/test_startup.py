"""The start-up checks every mode shares (kstream.hosting.startup), without Kafka: what
`kstream run`, `kstream worker` (either coordinator) and `kstream coordinator` refuse
before they start anything, with which line and exit code (issue 37)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kstream.api import Topology, Tumbling, WatermarkStrategy
from kstream.checkpointstorage.base import StoreError
from kstream.checkpointstorage.file import FileStore
from kstream.checkpointstorage.metadata import CheckpointMetadata, TaskSnapshot, write_metadata
from kstream.checkpointstorage.savepoints import create_savepoint
from kstream.checkpointstorage.startfrom import import_start
from kstream.config import CheckpointingConfig, JobConfig, StartFrom
from kstream.hosting import election as election_module
from kstream.hosting.coordinator import EXIT_FAILED, EXIT_USAGE
from kstream.hosting.election import ElectedCoordinator
from kstream.hosting.startup import Coordination, StartRefused, check_start
from kstream.plan import plan_job
from kstream.plan.operators import describe
from tests.test_savepoints import _checkpoint as with_manifest


def _plan(size_ms: int = 1000) -> Any:
    t = Topology("wc")
    t.source("in", keyed=True, watermark=WatermarkStrategy(0)).window(
        Tumbling(size_ms), name="counts"
    ).count().map(lambda r: r.value).to("out")
    return plan_job(t, "wc", {"in": 1})


def _job(tmp_path: Path, start: StartFrom | None = None, **kw: Any) -> JobConfig:
    return JobConfig(
        "wc", "k:9092", store_url=f"file://{tmp_path}", start=start or StartFrom(), **kw
    )


def _checkpoint(
    store: FileStore, n: int, size_ms: int | None, app: str = "wc"
) -> CheckpointMetadata:
    """Checkpoint ``n`` of ``app`` taken under the plan with windows of ``size_ms``
    (None: before operator descriptions existed)."""
    desc = None if size_ms is None else describe(_plan(size_ms))
    meta = CheckpointMetadata(n, 0, 1.0, 2.0, {"stage0-0": TaskSnapshot("x", {"in:0": n})}, desc)
    write_metadata(store, app, meta)
    return meta


def _refusal(job: JobConfig, store: Any = None) -> tuple[int, str]:
    with pytest.raises(StartRefused) as e:
        check_start(job, describe(_plan()), store)
    return e.value.code, str(e.value)


WINDOW_CHANGED = (
    "operator 'counts': its window changed from 'Tumbling(size_ms=2000, offset_ms=0)' to "
    "'Tumbling(size_ms=1000, offset_ms=0)'; its state cannot be read as the new one (give the changed "
    "operator a new name=... to start it empty)"
)


def test_the_latest_checkpoint_under_a_changed_window_is_refused(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    _checkpoint(store, 1, 1000)
    _checkpoint(store, 3, 2000)
    assert _refusal(_job(tmp_path)) == (
        EXIT_USAGE,
        f"checkpoint 3 cannot be restored under this topology: {WINDOW_CHANGED}",
    )


def test_a_checkpoint_that_fits_or_none_at_all_starts(tmp_path: Path) -> None:
    check_start(_job(tmp_path), describe(_plan()))  # a new job
    _checkpoint(FileStore(tmp_path), 3, 1000)
    check_start(_job(tmp_path), describe(_plan()))
    # Without checkpointing nothing is restored, and the store is not asked.
    off = _job(tmp_path / "nowhere", checkpointing=CheckpointingConfig(enabled=False))
    check_start(off, describe(_plan(5)), _BrokenStore())


def test_a_checkpoint_without_description_is_refused_unless_allowed(tmp_path: Path) -> None:
    _checkpoint(FileStore(tmp_path), 2, None)
    assert _refusal(_job(tmp_path)) == (
        EXIT_USAGE,
        "checkpoint 2 cannot be restored under this topology: it was taken before stable "
        "operator ids, so its state would not be found (pass --allow-non-restored-state to "
        "start with empty state at its source positions)",
    )
    check_start(_job(tmp_path, StartFrom(allow_non_restored_state=True)), describe(_plan()))


def test_a_missing_from_checkpoint_is_refused(tmp_path: Path) -> None:
    _checkpoint(FileStore(tmp_path), 3, 1000)
    code, line = _refusal(_job(tmp_path, StartFrom(checkpoint="999999")))
    assert (code, line) == (
        EXIT_USAGE,
        f"cannot start from checkpoint 999999 of wc: checkpoint 999999 of 'wc': "
        f"file://{tmp_path}/wc/checkpoints/chk-999999.json does not exist (see `kstream "
        "checkpoints list` or `kstream savepoints list`)",
    )


def test_from_checkpoint_is_checked_against_the_plan(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    _checkpoint(store, 3, 2000, app="old")
    _checkpoint(store, 4, 1000)  # the job's own latest fits: the flag's state is what counts
    assert _refusal(_job(tmp_path, StartFrom(checkpoint="old:3"))) == (
        EXIT_USAGE,
        f"checkpoint 3 of old cannot be restored under this topology: {WINDOW_CHANGED}",
    )


def test_from_savepoint_missing_unfit_fitting_and_imported_then_deleted(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    gone = StartFrom(savepoint="wc/savepoints/gone")
    assert _refusal(_job(tmp_path, gone))[0] == EXIT_USAGE
    assert _refusal(_job(tmp_path, gone))[1].startswith(
        "cannot start from savepoint wc/savepoints/gone: no savepoint at "
    )
    two_s, one_s = describe(_plan(2000)), describe(_plan())
    unfit = create_savepoint(
        store, "wc", "unfit", replace(with_manifest(store, "wc", 1, {"a": b"1"}), description=two_s)
    )
    assert _refusal(_job(tmp_path, StartFrom(savepoint=unfit))) == (
        EXIT_USAGE,
        f"savepoint wc/savepoints/unfit cannot be restored under this topology: {WINDOW_CHANGED}",
    )
    fits = create_savepoint(
        store, "wc", "fits", replace(with_manifest(store, "wc", 2, {"b": b"2"}), description=one_s)
    )
    job = _job(tmp_path, StartFrom(savepoint=fits))
    check_start(job, describe(_plan()))
    # Imported (as checkpoint 3), then the savepoint deleted: the job goes on from its own.
    desc = describe(_plan())
    assert import_start(store, "wc", job.start, next_id=3, attempt=0, description=desc, now=5.0)
    for p in store.list(fits):
        store.delete(p)
    check_start(job, desc)
    assert (
        import_start(store, "wc", job.start, next_id=4, attempt=0, description=desc, now=6.0)
        is None
    )


class _BrokenStore(FileStore):
    """A store whose every call fails as a wrong S3 secret does."""

    def __init__(self) -> None:
        super().__init__(Path("/nonexistent"))

    def list(self, prefix: str) -> list[str]:
        raise StoreError(f"listing s3://b/{prefix} failed: The request signature does not match")


def test_a_failing_store_is_one_line_and_exit_1(tmp_path: Path) -> None:
    assert _refusal(_job(tmp_path), _BrokenStore()) == (
        EXIT_FAILED,
        "the checkpoint store cannot be used: listing s3://b/wc/control.key failed: "
        "The request signature does not match",
    )


def test_the_elected_coordinator_runs_with_the_plan_and_a_refusal_stops_the_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The elected coordinator used to run without the plan's description: no check of
    the restored state, checkpoints without descriptions, --from-* ignored."""
    got: list[Coordination] = []

    def refusing(_job: JobConfig, coordination: Coordination, **_kw: Any) -> int:
        got.append(coordination)
        return EXIT_USAGE

    monkeypatch.setattr(election_module, "coordinate", refusing)
    stopped: list[bool] = []
    coordination = Coordination.of(_plan())
    elected = ElectedCoordinator(
        JobConfig("wc", "k:9092"), coordination, on_refused=lambda: stopped.append(True)
    )
    elected.election.assigned(True, 0.0)
    elected._start_coordinator(None)
    assert elected._coord is not None
    elected._coord.join(10.0)
    elected._reap()
    assert got == [coordination] and got[0].description == describe(_plan())
    assert stopped == [True] and elected.refused.is_set() and elected.job_failed.is_set()
    assert not elected.active  # not restarted: the state will not fit next time either


def test_every_mode_coordinates_through_one_function() -> None:
    """`kstream run`, the elected coordinator and `kstream coordinator` call
    kstream.hosting.startup.coordinate, nothing else calls run_coordinator."""
    root = Path(__file__).resolve().parent.parent / "kstream"
    callers = {
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if "run_coordinator(" in p.read_text() and p.name != "coordinator.py"
    }
    assert callers == {"hosting/startup.py"}
    for module in ("hosting/embedded.py", "hosting/election.py", "cli/coordinator.py"):
        assert "coordinate(" in (root / module).read_text()
    for module in ("cli/run.py", "cli/worker.py", "cli/coordinator.py"):
        assert "from kstream.cli.startup import prepare_job" in (root / module).read_text()


def test_a_bounded_run_checks_the_store_but_restores_no_checkpoint(tmp_path: Path) -> None:
    """A bounded run keeps its final state in the store (so a failing store is refused)
    and continues from that, not from a checkpoint (so none is compared)."""
    bounded = _job(tmp_path, checkpointing=CheckpointingConfig(enabled=False), bounded=True)
    assert _refusal(bounded, _BrokenStore())[0] == EXIT_FAILED
    _checkpoint(FileStore(tmp_path), 3, 2000)
    check_start(bounded, describe(_plan()))
