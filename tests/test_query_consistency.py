"""Query consistency as a state machine: ``latest`` answers every write so far (also
those no checkpoint holds yet), ``checkpointed`` exactly the state of the newest
completed checkpoint — what a restore brings back — whatever happened since."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kstream.checkpointstorage.file import FileStore
from kstream.checkpointstorage.metadata import CheckpointMetadata, TaskSnapshot, write_metadata
from kstream.protocol.messages import CheckpointCompleted, Resume
from kstream.query.gate import StateGate
from kstream.query.operators import OperatorInfo
from kstream.query.read import Tables
from kstream.query.routing import Directory
from kstream.query.service import QueryService
from kstream.query.stored import StoredState
from kstream.serde import serde_by_name
from kstream.snapshots.upload import SnapshotUploader
from kstream.state.base import StateTable, TableSpec
from kstream.state.rocksdb import RocksDBBackend

APP, TASK, OP = "app", "stage1-0", "totals"
INFO = OperatorInfo(OP, "rolling", "stage1", 1, "str", serde_by_name("str"), "crc32")


class OneTask:
    """The worker's side for one running task on ``backend``."""

    def __init__(self, backend: RocksDBBackend) -> None:
        self.backend = backend
        self.table: StateTable = backend.table(TableSpec(f"{OP}.acc"))

    def running(self, task: str) -> bool:
        return task == TASK

    def tables(self, task: str, operator: str) -> Tables | None:
        table = self.table
        return Tables.opened(operator, {f"{OP}.acc": table}) if task == TASK else None

    def position(self, task: str) -> dict[str, Any]:
        return {"offsets": {"in[0]": 17}}

    def published(self, task: str) -> dict[str, Any] | None:
        return self.position(task)


class Job:
    """A task's state, its checkpoints in a file store, and a query service over both."""

    def __init__(self, root: Path) -> None:
        self.store = FileStore(root / "store")
        self.backend = RocksDBBackend(root / "task", cache_entries=3)
        self.local = OneTask(self.backend)
        self.uploader = SnapshotUploader(self.store, APP, TASK)
        self.directory = Directory(me="m1")
        self.directory.observe(Resume(0, {TASK: "m1"}))
        self.stored = StoredState(self.store, APP, root / "query")
        self.service = QueryService(
            {OP: INFO}, self.directory, StateGate(), self.local, self.stored
        )
        self.checkpoints = 0

    def checkpoint(self) -> None:
        """Snapshot, upload, complete (the coordinator's metadata, then its announcement)."""
        self.checkpoints += 1
        n = self.checkpoints
        snap = self.backend.snapshot_sync(n, background=True, deltas=True)
        handle = self.uploader.upload(snap, positions={"in-0": n}).result(timeout=30)
        meta = CheckpointMetadata(n, 0, 1.0, 2.0, {TASK: TaskSnapshot(handle.manifest_path)})
        write_metadata(self.store, APP, meta)
        self.directory.observe(CheckpointCompleted(n, 0))

    def get(self, key: str, consistency: str) -> dict[str, Any]:
        answer = self.service.answer("get", OP, {"key": key, "consistency": consistency}, False)
        assert answer.status == 200, answer.body
        return answer.body

    def close(self) -> None:
        self.uploader.close()
        self.stored.close()
        self.backend.close()


def test_latest_sees_uncommitted_writes_and_checkpointed_the_last_completed_checkpoint(
    tmp_path: Path,
) -> None:
    job = Job(tmp_path)
    job.local.table.put(("a",), 1)
    job.local.table.put(("b",), 1)
    job.checkpoint()
    job.local.table.put(("a",), 2)
    job.local.table.put(("c",), 5)
    job.local.table.delete(("b",))
    assert job.get("a", "latest") | {"position": None} == {
        "operator": OP, "query": "get", "consistency": "latest", "task": TASK, "worker": "m1",
        "found": True, "value": 2, "position": None,
    }  # fmt: skip
    assert job.get("a", "latest")["position"] == {"offsets": {"in[0]": 17}}
    assert job.get("a", "checkpointed")["value"] == 1
    assert job.get("a", "checkpointed")["position"] == {"checkpoint": 1}
    assert job.get("b", "checkpointed")["value"] == 1  # deleted since: not in checkpoint 1
    assert job.get("b", "latest")["found"] is False
    assert job.get("c", "checkpointed")["found"] is False
    job.checkpoint()
    assert [job.get(k, "checkpointed").get("value") for k in "abc"] == [2, None, 5]
    # Time travel through the live service: any retained checkpoint.
    old = job.service.answer("get", OP, {"key": "a", "checkpoint": "1"}, False)
    assert (old.body["value"], old.body["position"]) == (1, {"checkpoint": 1})
    job.close()


ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.sampled_from("abcde"), st.integers(0, 99)),
        st.tuples(st.just("delete"), st.sampled_from("abcde"), st.just(0)),
        st.tuples(st.just("checkpoint"), st.just(""), st.just(0)),
        st.tuples(st.just("query"), st.just(""), st.just(0)),
    ),
    max_size=30,
)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=ops)
def test_both_levels_match_their_model_after_any_history(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, str, int]]
) -> None:
    job = Job(tmp_path_factory.mktemp("job"))
    latest: dict[str, int] = {}
    completed: dict[str, int] | None = None
    for kind, key, value in [*ops, ("query", "", 0)]:
        if kind == "put":
            job.local.table.put((key,), value)
            latest[key] = value
        elif kind == "delete":
            job.local.table.delete((key,))
            latest.pop(key, None)
        elif kind == "checkpoint":
            job.checkpoint()
            completed = dict(latest)
        else:
            for k in "abcde":
                assert job.get(k, "latest").get("value") == latest.get(k)
                # Read beside the loop (peek): the same, or "read it under the gate".
                beside = job.service.answer_concurrent("get", OP, {"key": k}, False)
                assert beside is None or beside.body == job.get(k, "latest")
                if completed is None:
                    no = job.service.answer(
                        "get", OP, {"key": k, "consistency": "checkpointed"}, False
                    )
                    assert no.status == 404 and "no completed checkpoint" in no.body["error"]
                else:
                    assert job.get(k, "checkpointed").get("value") == completed.get(k)
    job.close()
