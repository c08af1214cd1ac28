"""A cooperative worker whose partitions a joiner takes while it restores releases those
tasks (docs/design.md §6.8), on a real broker.

Workers that start together join the group one after the other, so the first ones ready
their tasks and may be named their owners in a ``Resume`` they have not read yet when a
later member's join takes some of them. Before, such a revocation released nothing, the
joiner's heartbeat named tasks the ``Resume`` gave another member, and the job restored
every task once more (attempt 2) — rare, more often on a busy machine, and decided by
milliseconds: ``tests/test_start_release.py`` replays both orders of the control topic
exactly. Here a real worker meets that revocation during its restore, every time: two
workers of a job without a shuffle, run with cooperative assignment, are in the group
before the coordinator starts; one is frozen (SIGSTOP), so the restore waits for it; a
third worker joins, and the group's rebalance waits for the frozen one too; thawed, it
readies its tasks and its partitions are revoked before the ``Resume``. It releases the
tasks taken; the coordinator, still restoring, waits for their new owner's readiness (or,
had it resumed, would carry them for the joiner to adopt). The job resumes once, never
restores again, every worker runs tasks, and the output is exact.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import ConsumerGroupState

from integration.carryjob import PARTITIONS, RATE, CarryJob
from kstream.kafka.clients import AdminClient, make_admin

SESSION = 45


def held_partitions(log: str) -> set[int]:
    """The partitions a worker's log says it holds now (its latest assignment)."""
    changes = re.findall(r"assignment changed: \[([^\]]*)\]", log)
    return {int(p) for p in re.findall(r", (\d+)\)", changes[-1])} if changes else set()


def rebalancing(admin: AdminClient, group: str) -> bool:
    """Whether ``group`` waits for its members to rejoin (a new member asked to join)."""
    futures = admin.describe_consumer_groups([group], request_timeout=10)
    return futures[group].result(timeout=15).state is ConsumerGroupState.PREPARING_REBALANCING


def test_a_worker_restoring_when_a_joiner_takes_its_partitions_releases_them_no_restore(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    # (a session long enough for the frozen worker to stay in the group meanwhile)
    job = CarryJob(
        kafka_bootstrap,
        unique_name,
        tmp_path,
        SESSION,
        cooperative=True,
        workers=2,
        coordinator=False,
    )
    first, frozen = job.workers
    try:

        def both_given_partitions() -> bool:
            held = [held_partitions(w.log()) for w in job.workers]
            return all(held) and not held[0] & held[1] and len(held[0] | held[1]) == PARTITIONS

        first.wait_until(both_given_partitions, "both workers given partitions", 60)
        frozen.proc.send_signal(signal.SIGSTOP)
        job.start_coordinator()
        first.wait_for(r"attempt 1: restored \d+ task\(s\)", 60)  # (its readies follow)
        joiner = job.add_worker()
        admin = make_admin(kafka_bootstrap)  # (kept: its futures end with it)
        joiner.wait_until(lambda: rebalancing(admin, job.app), "the joiner's rebalance", 60)
        frozen.proc.send_signal(signal.SIGCONT)
        job.settled()
        releasers = [w for w in (first, frozen) if "during the restore" in w.log()]
        assert releasers, "no worker released tasks during its restore: " + frozen.tail()
        job.start_feed()
        job.coordinator.wait_until(lambda: job.produced >= 2 * RATE, "two seconds of input", 30)
        job.stop_feed()
        job.assert_exact()
        log = job.coordinator.log()
        assert re.findall(r"resuming attempt (\d+)", log) == ["1"], job.coordinator.tail()
        assert "failover (attempt" not in log, job.coordinator.tail()
        # (a joiner that learnt the restore from the control topic's history logs none)
        restores = [re.findall(r"restore: attempt (\d+)", w.log()) for w in job.workers]
        assert all(set(r) <= {"1"} for r in restores), restores
        assert [job.processed_twice(w) for w in job.workers] == [0, 0, 0]
    finally:
        job.close()
