"""A worker started right after the broker leading ``<app>.control`` is killed (kill -9,
3-node cluster, replication factor 3, min ISR 2): it joins and the job's
``read_committed`` output is exact.

Each start-up step meets the dead broker: the consumer's first metadata still names
it as the control topic's leader (the controller fences it only after its session
timeout), so the first watermark query goes to it and times out; without a metadata
refresh every further ask went there too, and the worker died after 30 s with
``Failed to get watermark offsets: Local: Timed out`` (found by
``test_cluster_chaos.py``).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from integration.e2e.crash import run_job
from integration.e2e.harness import ControlLog, JobSettings, JobUnderTest, wait_until
from integration.e2e.scenarios import wordcount
from integration.test_production_kafka import _check, _no_tracebacks
from kstream.dev.localcluster import KafkaCluster

pytestmark = pytest.mark.integration

SEED = 4242


def test_a_worker_started_right_after_the_control_leader_is_killed_joins(
    kafka_cluster: KafkaCluster, tmp_path: Path
) -> None:
    rng = random.Random(SEED)
    scenario = wordcount(rng, per_partition=150, late=0)
    settings = JobSettings(
        workers=2, coordinator="auto", interval=0.5, session_timeout=6.0, heartbeat_timeout=6.0
    )
    new_slot = settings.workers  # a third worker, started during the outage

    def strike(job: JobUnderTest, control: ControlLog | None) -> None:
        assert control is not None
        wait_until("a completed checkpoint", lambda: bool(control.completed_ids()), 90.0,
                   lambda: f"live: {sorted(job.current)}")  # fmt: skip
        node = kafka_cluster.leader(f"{job.app}.control")
        kafka_cluster.kill(node)
        print(f"[start-outage] kill -9 broker node {node + 1} (leads {job.app}.control)")
        p = job.start_worker(new_slot)  # at once: its metadata still names the dead leader
        # It joins: the group gives it partitions, and it takes part in checkpoints.
        job.wait_for_line(p, "assignment changed: [(", 120.0)
        control.wait_for_more(
            2, "two checkpoints complete with the new worker", 120.0, job.assert_alive
        )
        kafka_cluster.start_node(node)
        kafka_cluster.wait_in_sync(timeout=120.0)

    result = run_job(
        kafka_cluster.bootstrap,
        scenario,
        tmp_path,
        seed=SEED,
        settings=settings,
        plan=[],
        rate=20.0,
        gate_late=False,
        drain_timeout=180.0,
        during=strike,
    )
    assert result.job is not None
    _no_tracebacks(result.job)
    _check(kafka_cluster, result, scenario)
    (joined,) = [p for p in result.job.procs if p.role == f"worker-{new_slot}"]
    assert joined.popen.returncode == 0, joined.text()[-3000:]
