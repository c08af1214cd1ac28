"""A scaled-down production cluster under chaos, in CI: 3 brokers (``kafka_cluster``),
checkpoints in S3 (``s3_server``), 3 workers electing their coordinator (no
coordinator process), input fed live with late events, and kill -9 of workers (a
random one, then the coordinator's host) and of a broker (the one leading the control
topic, during a checkpoint, with another worker killed while it is down). The
``read_committed`` output must equal the fault-free output computed from the input
in plain Python (the late events, written once output was committed, dropped): 0
lost, 0 duplicated, 0 unexpected.

What it adds to its neighbours: ``test_production_kafka.py`` kills brokers under a
coordinator process with a file store, ``test_multihost.py`` kills the elected
coordinator's host on one broker, ``test_e2e_crash.py`` kills workers on one broker;
here the same job meets all of them at once.

The worker killed while the broker is down is restarted at once: its start meets
the dead broker (the control topic's leader in its first metadata, a DescribeConfigs
to a dead controller), found here and fixed (``test_start_during_broker_outage.py``).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from integration.e2e.crash import run_job
from integration.e2e.harness import ControlLog, JobSettings, JobUnderTest, wait_until
from integration.e2e.scenarios import wordcount
from integration.s3server import S3Server
from integration.test_production_kafka import _check, _checkpoint_in_flight, _no_tracebacks
from kstream.dev.localcluster import LocalCluster

pytestmark = pytest.mark.integration

SEED = 3737


def test_workers_and_a_broker_killed_under_live_input_with_late_events(
    kafka_cluster: LocalCluster, s3_server: S3Server, tmp_path: Path
) -> None:
    rng = random.Random(SEED)
    scenario = wordcount(rng, per_partition=240, late=8)
    settings = JobSettings(
        workers=3,
        coordinator="auto",
        interval=0.5,
        session_timeout=6.0,
        heartbeat_timeout=6.0,
        store_url=s3_server.fresh_url("chaos"),
        store_options=s3_server.options(),
    )

    def strike(job: JobUnderTest, control: ControlLog | None) -> None:
        assert control is not None
        wait_until("a worker hosts the coordinator", lambda: job.coordinator_host() is not None,
                   60.0, lambda: f"live: {sorted(job.current)}")  # fmt: skip
        host = job.coordinator_host()
        assert host is not None
        job.kill(host, "the elected coordinator's host")
        job.start_worker(int(host.removeprefix("worker-")))
        wait_until("a worker hosts the coordinator again",
                   lambda: job.coordinator_host() is not None, 90.0,
                   lambda: f"live: {sorted(job.current)}")  # fmt: skip
        node = kafka_cluster.leader(f"{job.app}.control")
        base = max(control.completed_ids(), default=0)
        wait_until("a checkpoint in flight after the takeover",
                   lambda: max(control.completed_ids(), default=0) > base
                   and _checkpoint_in_flight(control) is not None, 90.0,
                   lambda: f"completed {control.completed_ids()[-3:]}")  # fmt: skip
        kafka_cluster.kill(node)
        print(f"[chaos] kill -9 broker node {node + 1} (leads {job.app}.control)", flush=True)
        slot = rng.randrange(settings.workers)
        job.kill(f"worker-{slot}", "a random worker while a broker is down")
        job.start_worker(slot)  # at once: it starts while the broker is down
        control.wait_for_more(
            2, "two checkpoints complete with the broker down", 120.0, job.assert_alive
        )
        kafka_cluster.start_node(node)
        kafka_cluster.wait_in_sync(timeout=120.0)

    result = run_job(
        kafka_cluster.bootstrap,
        scenario,
        tmp_path,
        seed=SEED,
        settings=settings,
        plan=["worker"],
        rate=20.0,
        gate_late=True,
        drain_timeout=180.0,
        during=strike,
    )
    assert result.job is not None
    _no_tracebacks(result.job)
    _check(kafka_cluster, result, scenario)
    assert len(result.job.kills) == 3
