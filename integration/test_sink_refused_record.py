"""An exactly-once output record the sink cannot write is never lost and never crashes
the worker.

The exactly-once sink buffers a checkpoint's output and produces it in the transaction
that publishes the checkpoint. A record over the producer's ``message.max.bytes`` (or
the topic's ``max.message.bytes``) fails that transaction. It used to crash the worker
process with a traceback at the commit. Now the task fails: the job restores its last
completed checkpoint, whose sink publishes the buffered epochs again, with the restart
strategy's backoff, until the limits allow the record (a topic's limit raised while it
runs is taken at the next try) or ``--max-restarts`` ends the job with the reason.
Raised limits publish the checkpoint's output exactly once. A bounded run stops with
the reason (exit 1, no traceback); its final state keeps the output, which the next
run publishes. The refused transaction is aborted at once: left open, it held
read_committed readers of the topic back until it timed out (seen as a read that never
reached the end after the failed bounded run).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from integration.cli_job import CliJob, run_args, run_to_end
from integration.edge_tools import read_all
from integration.kafkatools import set_max_message_bytes
from kstream.kafka.clients import AdminClient, TopicSpec, ensure_topics, make_producer

pytestmark = pytest.mark.integration

TOPOLOGY = """
from kstream.api import Topology

topology = Topology("bigout")
(
    topology.source("{src}", value_serde="str")
    .map(lambda v: v * {big} if v == "b" else v)
    .to("{out}", key_serde="str", value_serde="str")
)
"""

BIG = 2_000_000  # bytes: over librdkafka's default message.max.bytes (1 000 000)


def _job(
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    unique_name: Callable[[str], str],
    tmp: Path,
    big: int = BIG,
) -> tuple[Path, str, str]:
    """TOPOLOGY's file (``b`` made ``big`` bytes), its sink topic and its app id; ``a``,
    ``b``, ``c`` on its source."""
    src, out, app = unique_name("in"), unique_name("out"), unique_name("bigout")
    ensure_topics(kafka_admin, [TopicSpec(src, 1), TopicSpec(out, 1)])
    topology = tmp / "bigout_topology.py"
    topology.write_text(TOPOLOGY.format(src=src, out=out, big=big))
    p = make_producer(kafka_bootstrap)
    for value in (b"a", b"b", b"c"):
        p.produce(src, value)
    assert p.flush(30) == 0
    return topology, out, app


def test_a_refused_output_record_fails_over_and_is_published_once_the_limits_allow_it(
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    topology, out, app = _job(kafka_bootstrap, kafka_admin, unique_name, tmp_path)

    def values() -> list[bytes | None]:
        return [r.value for r in read_all(kafka_bootstrap, out)]

    # Refused: the task fails and the job restores checkpoint 1 again and again (its
    # sink publishing the buffered output each time), until --max-restarts ends it.
    args = run_args(topology, kafka_bootstrap, app, tmp_path)
    code, log = run_to_end([*args, "--max-restarts", "2", "--restart-delay", "0.5"], 180)
    assert code == 1, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    assert log.count("committing checkpoint 1 failed (KafkaError{code=MSG_SIZE_TOO_LARGE") >= 3
    assert "restart strategy exhausted: 2 restarts" in log, log[-3000:]
    assert values() == []

    # The limits raised: the restored sink publishes checkpoint 1's output, once.
    set_max_message_bytes(kafka_admin, out, 3_000_000)
    job = CliJob([*args, "-X", "message.max.bytes=3000000"], tmp_path / "job2.log")
    try:
        job.wait_until(lambda: len(values()) == 3, "the output", 120)
        code, _ = job.stop()
    finally:
        job.kill()
    assert code == 0, job.tail()
    assert values() == [b"a", b"b" * BIG, b"c"]


def test_a_record_the_topic_refuses_is_published_once_its_limit_is_raised_while_running(
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    # Under the producer's limit, over the topic's: the broker refuses the transaction.
    topology, out, app = _job(kafka_bootstrap, kafka_admin, unique_name, tmp_path, 900_000)
    set_max_message_bytes(kafka_admin, out, 500_000)

    def values() -> list[bytes | None]:
        return [r.value for r in read_all(kafka_bootstrap, out)]

    job = CliJob(run_args(topology, kafka_bootstrap, app, tmp_path), tmp_path / "job.log")
    try:
        job.wait_until(lambda: job.log().count("failover (attempt") >= 2, "two failovers", 120)
        assert "Broker: Message size too large" in job.log(), job.tail()
        assert values() == []
        # Raised while the job fails over: its next try publishes, once, no restart.
        set_max_message_bytes(kafka_admin, out, 2_000_000)
        job.wait_until(lambda: len(values()) == 3, "the output", 120)
        code, _ = job.stop()
    finally:
        job.kill()
    assert code == 0, job.tail()
    assert "Traceback" not in job.log(), job.tail()
    assert values() == [b"a", b"b" * 900_000, b"c"]


def test_a_bounded_run_stops_with_the_reason_and_the_next_one_publishes_once(
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    topology, out, app = _job(kafka_bootstrap, kafka_admin, unique_name, tmp_path)
    args = [*run_args(topology, kafka_bootstrap, app, tmp_path), "--bounded"]
    code, log = run_to_end(args, 180)
    assert code == 1, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    assert "kstream: job failed: sink stage0-0: committing checkpoint 1 failed (KafkaError{" in log
    assert [r.value for r in read_all(kafka_bootstrap, out)] == []
    # The final state holds the buffered output: the next run publishes it, once.
    set_max_message_bytes(kafka_admin, out, 3_000_000)
    code, log = run_to_end([*args, "-X", "message.max.bytes=3000000"], 180)
    assert code == 0, log[-3000:]
    assert [r.value for r in read_all(kafka_bootstrap, out)] == [b"a", b"b" * BIG, b"c"]
