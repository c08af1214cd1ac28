"""Aggregation accumulators with an Avro schema (``aggregate(..., schema=...)``, windows
and rolling): stored as versioned Avro as a process function's ``ValueState(schema=...)``
is (kstream.operators.stateschema); v1's accumulators continue under a compatible v2, an
incompatible v3 is refused naming the operator, the state and the field — at the
operator's open, and before the job starts by the plan descriptions
(kstream.plan.compat)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from kstream.api import Session, Topology, Tumbling, WatermarkStrategy
from kstream.api.process import StateSpec, ValueState
from kstream.api.windows import WindowSpec
from kstream.operators.stateschema import StateSchemaError
from kstream.plan import plan_job
from kstream.plan.compat import incompatibilities
from kstream.plan.model import JobPlan
from kstream.plan.operators import describe
from kstream.runtime.task import Task
from kstream.state.memory import MemoryBackend
from tests.conftest import Kit

V1 = {"type": "record", "name": "Acc", "fields": [{"name": "n", "type": "int"}]}
V2 = {
    "type": "record",
    "name": "Acc",
    "fields": [
        {"name": "n", "type": "long"},  # promoted
        {"name": "total", "type": "int", "default": 0},  # added with a default
    ],
}
V3 = {
    "type": "record",
    "name": "Acc",
    "fields": [{"name": "n", "type": "long"}, {"name": "region", "type": "string"}],
}
INIT: dict[Any, Any] = {
    None: lambda: {"n": 0},
    "v1": lambda: {"n": 0},
    "v2": lambda: {"n": 0, "total": 0},
    "v3": lambda: {"n": 0, "region": "eu"},
}
SCHEMA = {None: None, "v1": V1, "v2": V2, "v3": V3}


def add(acc: dict[str, Any], v: int) -> dict[str, Any]:
    out = {**acc, "n": acc["n"] + 1}
    if "total" in acc:
        out["total"] = acc["total"] + v
    return out


def merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = {**a, "n": a["n"] + b["n"]}
    if "total" in a:
        out["total"] = a["total"] + b["total"]
    return out


def windowed(version: str | None, window: WindowSpec | None = None) -> JobPlan:
    t = Topology("acc")
    s = t.source("events", keyed=True, watermark=WatermarkStrategy(0))
    res = s.window(window or Tumbling(1000), name="sums").aggregate(
        INIT[version], add, merge, schema=SCHEMA[version]
    )
    res.map(lambda r: [r.key, r.start, r.end, r.value]).to("out")
    return plan_job(t, "acc", {"events": 1})


def rolling(version: str | None) -> JobPlan:
    t = Topology("acc")
    s = t.source("events", keyed=True, watermark=WatermarkStrategy(0))
    s.aggregate(INIT[version], add, name="sums", schema=SCHEMA[version]).to("out")
    return plan_job(t, "acc", {"events": 1})


def test_a_window_accumulator_written_with_v1_continues_under_v2(kit: type[Kit]) -> None:
    backend = MemoryBackend()
    v1 = Task(windowed("v1"), "stage0-0", backend)
    v1.feed_source("events", 0, kit.records([("a", 1, 100), ("a", 2, 200)]), 0.0)
    assert kit.sink(v1.drain(), "out") == []
    ((_, stored),) = backend.tables()["sums.acc"].scan()
    assert isinstance(stored, str)  # versioned Avro (base64), not the JSON accumulator
    v2 = Task(windowed("v2"), "stage0-0", backend)  # a restore into the next version
    v2.feed_source("events", 0, kit.records([("a", 5, 300), ("a", 1, 1500)], 2), 0.0)
    assert kit.sink(v2.drain(), "out") == [("a", ["a", 0, 1000, {"n": 3, "total": 5}], 999)]


def test_a_session_accumulator_written_with_v1_continues_under_v2(kit: type[Kit]) -> None:
    backend = MemoryBackend()
    v1 = Task(windowed("v1", Session(500)), "stage0-0", backend)
    v1.feed_source("events", 0, kit.records([("a", 1, 100), ("a", 2, 200)]), 0.0)
    assert kit.sink(v1.drain(), "out") == []
    v2 = Task(windowed("v2", Session(500)), "stage0-0", backend)
    v2.feed_source("events", 0, kit.records([("a", 5, 300), ("b", 1, 2000)], 2), 0.0)
    assert kit.sink(v2.drain(), "out") == [("a", ["a", 100, 800, {"n": 3, "total": 5}], 799)]


def test_a_rolling_accumulator_written_with_v1_continues_under_v2(kit: type[Kit]) -> None:
    backend = MemoryBackend()
    v1 = Task(rolling("v1"), "stage0-0", backend)
    v1.feed_source("events", 0, kit.records([("a", 1, 100), ("a", 2, 200)]), 0.0)
    assert kit.sink(v1.drain(), "out") == [("a", {"n": 1}, 100), ("a", {"n": 2}, 200)]
    v2 = Task(rolling("v2"), "stage0-0", backend)
    v2.feed_source("events", 0, kit.records([("a", 5, 300)], 2), 0.0)
    assert kit.sink(v2.drain(), "out") == [("a", {"n": 3, "total": 5}, 300)]


@pytest.mark.parametrize("job", [windowed, rolling])
def test_an_incompatible_accumulator_schema_is_refused_at_open(kit: type[Kit], job: Any) -> None:
    backend = MemoryBackend()
    v1 = Task(job("v1"), "stage0-0", backend)
    v1.feed_source("events", 0, kit.records([("a", 1, 100)]), 0.0)
    v1.drain()
    with pytest.raises(StateSchemaError) as e:
        Task(job("v3"), "stage0-0", backend)
    msg = str(e.value)
    assert msg.startswith("operator 'sums', state 'accumulator': the restored state holds values")
    assert "field 'region' (string) is new and has no default" in msg


@pytest.mark.parametrize("job", [windowed, rolling])
def test_the_start_up_check_compares_accumulator_schemas(job: Any) -> None:
    v1 = describe(job("v1"))
    assert incompatibilities(v1, describe(job("v2"))) == []
    (problem,) = incompatibilities(v1, describe(job("v3")))
    assert problem.startswith(
        "operator 'sums', state 'accumulator': the checkpoint holds values of schema version "
    )
    assert "field 'region' (string) is new and has no default, so stored values cannot be " in (
        problem
    )
    (problem,) = incompatibilities(describe(job(None)), v1)
    assert problem.startswith(
        "operator 'sums', state 'accumulator': its values are stored as JSON but it has a "
        "schema now"
    )
    (problem,) = incompatibilities(v1, describe(job(None)))
    assert "its values are stored as Avro but it has no schema now" in problem


def process_job(schema: Any) -> JobPlan:
    t = Topology("p")
    state: dict[str, StateSpec] = {"tally": ValueState(schema=schema)}
    t.source("in", keyed=True).process(lambda *a: None, state=state, name="f").to("out")
    return plan_job(t, "p", {"in": 1})


def test_the_start_up_check_compares_process_state_schemas() -> None:
    v1 = describe(process_job(V1))
    assert incompatibilities(v1, describe(process_job(V2))) == []
    (problem,) = incompatibilities(v1, describe(process_job(V3)))
    assert problem.startswith("operator 'f', state 'tally': the checkpoint holds values of schema")
    assert "field 'region' (string) is new and has no default" in problem


def test_a_description_from_before_schemas_were_described_restores() -> None:
    """Version 1 of the description says nothing about schemas: not compared (the
    operator's open still checks the stored history)."""
    old = copy.deepcopy(describe(process_job(V1)))
    old["version"] = 1
    for op in old["operators"].values():
        op.pop("schemas", None)
    assert incompatibilities(old, describe(process_job(V3))) == []
    assert describe(process_job(None))["operators"]["f"].keys() == {
        "kind", "stage", "key serde", "state"
    }  # fmt: skip


def test_queries_read_avro_typed_state_as_values(kit: type[Kit]) -> None:
    """A query (kstream.query) reads accumulators and process state stored as versioned
    Avro as the values they are, each with its writer schema (v1's and v2's alike)."""
    from kstream.query.operators import of_plan
    from kstream.query.read import Query, Tables, read

    def ask(plan: JobPlan, backend: MemoryBackend, op: str, **params: Any) -> dict[str, Any]:
        (info,) = of_plan(plan).values()
        q = Query.from_params(op, info.id, {k: str(v) for k, v in params.items()})
        return read(info, q, Tables.opened(info.id, backend.tables()))

    backend = MemoryBackend()
    Task(windowed("v1"), "stage0-0", backend).feed_source(
        "events", 0, kit.records([("a", 1, 100)]), 0.0
    )
    v2 = windowed("v2")
    Task(v2, "stage0-0", backend).feed_source("events", 0, kit.records([("b", 5, 200)], 1), 0.0)
    assert ask(v2, backend, "windows", key="a")["windows"] == [
        {"start": 0, "end": 1000, "value": {"n": 1}}  # as v1 wrote it
    ]
    assert ask(v2, backend, "windows", key="b")["windows"] == [
        {"start": 0, "end": 1000, "value": {"n": 1, "total": 5}}
    ]
    backend = MemoryBackend()
    sessions = windowed("v1", Session(500))
    Task(sessions, "stage0-0", backend).feed_source("events", 0, kit.records([("a", 1, 100)]), 0.0)
    assert ask(sessions, backend, "windows", key="a")["windows"] == [
        {"start": 100, "end": 600, "value": {"n": 1}}
    ]
    backend = MemoryBackend()
    totals = rolling("v2")
    Task(totals, "stage0-0", backend).feed_source("events", 0, kit.records([("a", 5, 100)]), 0.0)
    assert ask(totals, backend, "get", key="a") == {"found": True, "value": {"n": 1, "total": 5}}


def test_state_dump_shows_accumulators_as_values(tmp_path: Path, kit: type[Kit]) -> None:
    """`kstream state dump` of an accumulator stored as versioned Avro: the values."""
    from kstream.checkpointstorage.file import FileStore
    from kstream.checkpointstorage.metadata import CheckpointMetadata, TaskSnapshot
    from kstream.cli.state import dump_state
    from kstream.snapshots.upload import SnapshotUploader
    from kstream.state.rocksdb import RocksDBBackend

    plan = windowed("v2")
    backend = RocksDBBackend(tmp_path / "task")
    Task(plan, "stage0-0", backend).feed_source("events", 0, kit.records([("a", 5, 100)]), 0.0)
    backend.flush()
    store = FileStore(tmp_path / "store")
    handle = SnapshotUploader(store, "acc", "stage0-0").upload(backend.snapshot_sync(1))
    task = {"stage0-0": TaskSnapshot(handle.result(30).manifest_path)}
    meta = CheckpointMetadata(1, 0, 1.0, 2.0, task, describe(plan))
    rows = dump_state(store, meta, "sums", "a", tmp_path / "dump")
    assert [(r["table"], r["key"], r["value"]) for r in rows] == [
        ("acc", [1000, 0, "a"], {"n": 1, "total": 5})
    ]
    backend.close()
