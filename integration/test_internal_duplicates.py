"""A second copy of a record in a repartition topic is counted once.

The worker's idempotent producer can write a record twice when a broker leaves with
its batch in flight (seen once in a rolling restart of the three-broker cluster under
load: a word counted twice, no failover). Here the copies are appended by hand, as
that producer's retry appends them: the same key, value, timestamp and headers, at a
later offset, while the job runs in the same attempt.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from integration.cli_job import CliJob, keyed_count_job, run_args
from integration.edge_tools import Read, read_all
from kstream.kafka.clients import make_producer
from kstream.names import repartition_topic

pytestmark = pytest.mark.integration


def _data(records: list[Read]) -> list[Read]:
    return [r for r in records if not any(name == "ks.event" for name, _ in r.headers)]


def test_a_record_written_twice_to_a_repartition_topic_is_counted_once(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    src, out, app, topology = keyed_count_job(kafka_bootstrap, unique_name, tmp_path)
    producer = make_producer(kafka_bootstrap)

    def send(events: list[tuple[str, int]]) -> None:
        for i, (user, t) in enumerate(events):
            value = json.dumps({"user": user, "t": t}).encode()
            producer.produce(src, value, None, partition=i % 2)
        assert producer.flush(30) == 0

    send([("ann", 100), ("bob", 200), ("ann", 300), ("bob", 400)])
    job = CliJob(run_args(topology, kafka_bootstrap, app, tmp_path), tmp_path / "run.log")
    try:
        internal = repartition_topic(app, "stage0")
        job.wait_until(
            lambda: len(_data(read_all(kafka_bootstrap, internal, read_committed=False))) == 4,
            "the four records in the repartition topic",
            120.0,
        )
        first = _data(read_all(kafka_bootstrap, internal, read_committed=False))
        assert all(("ks.seq" in dict(r.headers)) for r in first)
        for r in first[:3]:  # the copies a producer's retry would append
            assert r.timestamp is not None
            headers: list[tuple[str, str | bytes | None]] = list(r.headers)
            producer.produce(
                internal, r.value, r.key, partition=r.partition, timestamp=r.timestamp,
                headers=headers,
            )  # fmt: skip
        assert producer.flush(30) == 0
        send([("ann", 1500), ("bob", 1600), ("ann", 5000), ("bob", 5000)])  # closes [0, 2000)

        def counts() -> list[list[object]]:
            rows = [json.loads(r.value) for r in read_all(kafka_bootstrap, out) if r.value]
            return sorted(rows)

        job.wait_until(lambda: len(counts()) >= 4, "the windows up to 2000", 120.0)
        assert counts() == [["ann", 0, 2], ["ann", 1000, 1], ["bob", 0, 2], ["bob", 1000, 1]]
        assert "attempt 2" not in job.log()  # read in the same attempt, not dropped as stale
        code, _ = job.stop()
        assert code == 0, job.tail()
    finally:
        job.kill()
