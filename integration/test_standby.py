"""Standby copies against a real broker (``kstream worker --standby-replicas 1``): two
workers, kill -9 of one; the survivor restores the tasks that move to it from its
standby copies and downloads nothing — without standby copies it downloads them."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from integration.cli_job import CLI, CliJob, keyed_count_job
from kstream.kafka.clients import make_producer

RESUMED = re.compile(r"attempt (\d+) resumed: running \[([^\]]*)\]")
RESTORED = re.compile(
    r"task (\S+) restored checkpoint (\d+) in \S+ ms \(RestoreStats\(.*?"
    r"files_downloaded=(\d+), bytes_downloaded=(\d+)"
)


def _worker(topology: Path, bootstrap: str, app: str, tmp: Path, name: str, n: int) -> CliJob:
    args = [*CLI, "-v", "worker", str(topology), "--bootstrap", bootstrap, "--app-id", app,
            "--store", f"file://{tmp}/store", "--state-dir", str(tmp / f"state-{name}"),
            "--interval", "1", "--session-timeout", "6", "--heartbeat-timeout", "6",
            "--restart-delay", "0.2", "--standby-replicas", str(n)]  # fmt: skip
    return CliJob(args, tmp / f"{name}.log")


def _running(job: CliJob) -> set[str]:
    found = RESUMED.findall(job.log())
    if not found:
        return set()
    return {t.strip().strip("'") for t in found[-1][1].split(",") if t.strip()}


@pytest.mark.parametrize("replicas", [0, 1])
def test_after_a_kill_the_survivor_restores_the_moved_tasks_from_its_standby_copies(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path, replicas: int
) -> None:
    src, _out, app, topology = keyed_count_job(kafka_bootstrap, unique_name, tmp_path)
    producer = make_producer(kafka_bootstrap, extra={"linger.ms": 5})
    for i in range(4000):  # state in every count task: 400 users, one open window
        value = json.dumps({"user": f"u{i % 400}", "t": 1_000_000 + i % 500}).encode()
        producer.produce(src, value, None, partition=i % 2)
    assert producer.flush(60) == 0
    a = _worker(topology, kafka_bootstrap, app, tmp_path, "a", replicas)
    b = _worker(topology, kafka_bootstrap, app, tmp_path, "b", replicas)
    try:

        def split() -> bool:  # each runs some tasks, all 4 between them
            ra, rb = _running(a), _running(b)
            return bool(ra and rb and not ra & rb and len(ra | rb) == 4 and b.proc.poll() is None)

        a.wait_until(split, "the tasks split between a and b", 120.0)
        moved = _running(b)
        copies = [tmp_path / "state-a" / app / t / "snapshots" for t in sorted(moved)]
        if replicas:  # a keeps a copy of each of b's tasks
            a.wait_until(
                lambda: all(any(c.glob("*.standby")) for c in copies), "standby copies", 60.0
            )
        completed = tmp_path / "store" / app / "checkpoints"
        a.wait_until(lambda: len(list(completed.glob("chk-*.json"))) >= 3, "checkpoints", 60.0)
        if not replicas:
            assert not any(c.exists() and any(c.glob("*.standby")) for c in copies)
        seen = len(a.log())
        b.kill()
        a.wait_until(lambda: _running(a) == moved | _running(a) and moved <= _running(a),
                     "the moved tasks running on a", 120.0)  # fmt: skip
        restored = {
            m.group(1): (int(m.group(3)), int(m.group(4)))
            for m in RESTORED.finditer(a.log()[seen:])
        }
        assert moved <= restored.keys(), restored
        downloaded = {t: restored[t] for t in moved}
        if replicas:
            assert downloaded == {t: (0, 0) for t in moved}
        else:  # the counts' tasks download their state; the key_by stage's have none
            assert all(
                (files > 0 and size > 0) == t.startswith("stage1")
                for t, (files, size) in downloaded.items()
            ), downloaded
    finally:
        for job in (a, b):
            job.kill()
