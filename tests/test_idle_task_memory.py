"""What an idle task holds, structurally (issue 41 item 6: RSS per idle task <= 1 MB at
256 tasks per worker; benchmarks/SCALING.md says where the memory goes): no RocksDB
column family its operators do not have, a table cache of one shard, no instance dict
per input channel."""

from __future__ import annotations

from pathlib import Path

from kstream.api import Topology, Tumbling, WatermarkStrategy
from kstream.plan.model import JobPlan
from kstream.plan.planner import plan_job
from kstream.runtime.gate import InputGate
from kstream.runtime.task import Task
from kstream.state.base import TableSpec
from kstream.state.rocksdb import RocksDBBackend


def _plan(partitions: int) -> JobPlan:
    topology = Topology("app")
    (
        topology.source("in", key_serde="bytes", value_serde="json",
                        watermark=WatermarkStrategy(max_out_of_orderness_ms=0))
        .key_by(lambda e: e["user"], key_serde="str", partitions=partitions)
        .window(Tumbling(60_000))
        .count()
        .to("out", key_serde="str", value_serde="json")
    )  # fmt: skip
    return plan_job(topology, "app", {"in": partitions})


def test_a_new_task_s_db_holds_only_its_operators_tables(tmp_path: Path) -> None:
    """The benchmark's job (benchmarks/procs_per_task.py): the stateless first stage's
    DB has no column family, the window stage's its window's two; before, each also had
    task.firing and task.watermarks (~270 KB of RSS each, with their filters)."""
    plan = _plan(2)
    tables = {}
    for spec in plan.tasks:
        backend = RocksDBBackend(tmp_path / spec.task_id)
        Task(plan, spec, backend)
        tables[spec.task_id] = backend.stored_tables()
        backend.close()
    assert tables == {
        "stage0-0": [],
        "stage0-1": [],
        "stage1-0": ["stage1.window0.acc", "stage1.window0.meta"],
        "stage1-1": ["stage1.window0.acc", "stage1.window0.meta"],
    }


def test_channels_have_no_instance_dict() -> None:
    """A task behind a repartition topic of P partitions has P channels per partition:
    P x P per worker's downstream tasks (16 384 at 128 partitions), 56 bytes less each."""
    plan = _plan(4)
    spec = next(s for s in plan.tasks if s.task_id == "stage1-0")
    gate = InputGate(plan, spec, 0.0, {})
    assert len(gate.channels) == 4  # one per upstream task of its one partition
    assert not any(hasattr(c, "__dict__") for c in gate.channels.values())


def test_a_task_s_db_keeps_its_open_files_in_one_shard(tmp_path: Path) -> None:
    """RocksDB's default is 64 shards of the table cache, ~25 KB per DB at open."""
    backend = RocksDBBackend(tmp_path / "t")
    backend.table(TableSpec("counts")).put(("k",), 1)  # (a DB opens once state is written)
    backend.close()
    options = max((tmp_path / "t" / "db").glob("OPTIONS-*")).read_text()
    assert "  table_cache_numshardbits=0\n" in options
