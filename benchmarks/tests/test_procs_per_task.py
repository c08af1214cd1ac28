"""procs_per_task's kinds of threads and descriptors (``--detail``)."""

from __future__ import annotations

from benchmarks.procs_per_task import _by_kind, fd_kind, thread_kind


def test_thread_kinds_drop_what_differs_per_task_or_pool_thread() -> None:
    assert [
        thread_kind(n)
        for n in ("upload-stage1-7_0", "put-stage0-12_3", "rdk:broker12", "rdk:broker-3",
                  "rocksdb-checkpoint_1", "transfer_0", "rdk:main", "MainThread")
    ] == ["upload-*", "put-*", "rdk:brokerN", "rdk:broker-N", "rocksdb-checkpoint",
          "transfer", "rdk:main", "MainThread"]  # fmt: skip


def test_descriptor_kinds() -> None:
    state = "/tmp/w/state-app"
    assert [
        fd_kind(t, state)
        for t in ("socket:[123]", "pipe:[9]", "anon_inode:[eventfd]", "/usr/lib/x.so",
                  f"{state}/app/stage1-0/db/000012.sst", f"{state}/app/stage1-0/db/LOCK",
                  f"{state}/app/stage1-0/db/MANIFEST-000005", f"{state}/app/stage1-0/db",
                  f"{state}/app/stage1-0/db/000004.log")
    ] == ["socket", "pipe", "anon_inode:[eventfd]", "other file", "state:sst", "state:LOCK",
          "state:MANIFEST", "state:dir", "state:log"]  # fmt: skip


def test_by_kind_table_orders_by_the_last_column() -> None:
    text = _by_kind("threads", [(4, {"a": 1, "b": 2}), (64, {"a": 9, "c": 1})])
    assert text.splitlines() == [
        "",
        "| threads by kind | 4 tasks | 64 tasks |",
        "|---|---|---|",
        "| a | 1 | 9 |",
        "| c | 0 | 1 |",
        "| b | 2 | 0 |",
    ]
