"""A worker frozen in the middle of publishing a checkpoint cannot publish it once it
thaws: its tasks have a new owner, who published that output already (issue 41).

A worker's exactly-once sinks share one transactional producer, so fencing is no longer
one transactional id per task but the worker's group membership (docs/design.md §7.1):
the transaction adds the tasks' input offsets with the group metadata of the worker's
assignment, and the broker refuses it once the group moved on.

Worker A is stopped (SIGSTOP: threads, heartbeats and all, as a long GC pause or a
frozen VM) at the point where checkpoint *n* completed and its exactly-once output is
due, before the transaction. The group removes it; worker B restores *n*, publishes
its output (no marker says it is out) and goes on. A is then continued (SIGCONT) and
released (SIGUSR1) from its pause: it opens the transaction for *n* — the one that, with
no fencing, publishes *n* a second time. The broker refuses the offsets, the worker
says its tasks moved, rejoins, and the job goes on with both. The output, read
``read_committed``, is every input record exactly once.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from integration.cli_job import CLI
from integration.e2e.harness import REPO, wait_until
from integration.edge_tools import read_all
from integration.steadyfeed import SteadyFeed, wait_for_line
from kstream.kafka.clients import TopicSpec, ensure_topics, make_admin

pytestmark = pytest.mark.integration

PARTITIONS = 4

TOPOLOGY = """
from kstream.api import Topology

topology = Topology("zombie")
(
    topology.source({src!r}, value_serde="str")
    .map(lambda v: v.upper())
    .to({out!r}, key_serde="str", value_serde="str")
)
"""


def _worker(
    topology: Path, bootstrap: str, app: str, tmp: Path, name: str, *extra: str
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*CLI, "-v", "worker", str(topology), "--bootstrap", bootstrap, "--app-id", app,
         "--store", f"file://{tmp}/store", "--state-dir", str(tmp / f"state-{name}"),
         "--interval", "0.5", "--session-timeout", "6", "--heartbeat-timeout", "6",
         "--restart-delay", "0.2", *extra],
        cwd=REPO, env=dict(os.environ), stdout=(tmp / f"{name}.log").open("ab"),
        stderr=subprocess.STDOUT,
    )  # fmt: skip


def _count(log: Path, text: str) -> int:
    return log.read_text(errors="replace").count(text)


def test_a_frozen_worker_cannot_publish_a_checkpoint_its_tasks_new_owner_published(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    src, out, app = unique_name("in"), unique_name("out"), unique_name("zombie")
    ensure_topics(make_admin(kafka_bootstrap), [TopicSpec(src, PARTITIONS), TopicSpec(out, 2)])
    topology = tmp_path / "zombie.py"
    topology.write_text(TOPOLOGY.format(src=src, out=out))
    log_a, log_b = tmp_path / "a.log", tmp_path / "b.log"
    all_tasks = f"running {[f'stage0-{p}' for p in range(PARTITIONS)]}"

    def outputs() -> list[bytes]:
        return sorted(r.value for r in read_all(kafka_bootstrap, out) if r.value is not None)

    b = _worker(topology, kafka_bootstrap, app, tmp_path, "b")
    a: subprocess.Popen[bytes] | None = None
    try:
        wait_for_line(b, log_b, "coordinator election: elected", 90)  # A never coordinates
        a = _worker(
            topology, kafka_bootstrap, app, tmp_path, "a", "--debug-pause-at", "before-sink-commit"
        )
        with SteadyFeed(kafka_bootstrap, src, lambda i: (i % PARTITIONS, f"v{i}"), 10) as feed:
            # A has a completed checkpoint's output due for its tasks, before the transaction.
            wait_for_line(a, log_a, "paused at before-sink-commit", 120)
            alone = _count(log_b, all_tasks)
            a.send_signal(signal.SIGSTOP)
            # The group removes A; B runs every task, restored from a checkpoint at or
            # after the one A holds, and publishes (what A held included).
            wait_until("B runs every task", lambda: _count(log_b, all_tasks) > alone, 120,
                       lambda: f"{_count(log_b, all_tasks)} restores of all")  # fmt: skip
            published = len(outputs())
            wait_until("B publishes more", lambda: len(outputs()) > published, 60,
                       lambda: f"{len(outputs())} records")  # fmt: skip
            a.send_signal(signal.SIGCONT)
            a.send_signal(signal.SIGUSR1)  # out of the pause: the stale owner's transaction
            wait_for_line(a, log_a, "the group no longer counts this worker as the owner", 60)
            rejoined = _count(log_a, "resumed: running")
            wait_until("A runs again", lambda: _count(log_a, "resumed: running") > rejoined,
                       120, lambda: "A idle")  # fmt: skip
        expected = sorted(f"V{i}".encode() for i in range(feed.produced))
        wait_until("every record published", lambda: len(outputs()) >= len(expected), 120,
                   lambda: f"{len(outputs())} records")  # fmt: skip
        for proc in (a, b):
            proc.send_signal(signal.SIGTERM)
        for proc in (a, b):
            assert proc.wait(60) == 0
    finally:
        for w in (a, b):
            if w is not None and w.poll() is None:
                w.send_signal(signal.SIGCONT)
                w.kill()
                w.wait(10)
    got = outputs()
    assert len(got) == len(set(got)), f"{len(got) - len(set(got))} records published twice"
    assert got == expected
