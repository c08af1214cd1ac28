"""A record the broker refuses on an internal topic is never lost.

The worker writes ``key_by``'s records to its repartition topic without waiting for each
delivery: the barrier behind them says they are there. A record the broker refuses for
good (here: larger than the topic's ``max.message.bytes``) used to be dropped silently
while the records and barriers after it went through: checkpoints went on completing
without it (seen: output ``a``, ``c``; ``b`` gone). Now the failed delivery fails the
task that finds it, before any acknowledgement: with checkpoints the job rolls back to
its last completed checkpoint and replays the record, again and again while the broker
refuses it, and goes on by itself once it is accepted; without checkpoints the worker
stops before committing offsets past it, and a restart reads it again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from integration.cli_job import CliJob, run_args, run_to_end
from integration.edge_tools import read_all
from integration.kafkatools import set_max_message_bytes
from kstream.kafka.clients import AdminClient, TopicSpec, ensure_topics, make_producer
from kstream.names import is_repartition_topic

TOPOLOGY = """
from kstream.api import Topology

topology = Topology("bykey")
(
    topology.source("{src}", value_serde="str")
    .key_by(lambda v: v[:1], key_serde="str")
    .map(lambda v: v[:1] + ":" + str(len(v)))
    .to("{out}", key_serde="str", value_serde="str")
)
"""

BIG = 20_000  # bytes: over the repartition topic's limit once it is lowered to LIMIT
LIMIT = 4_000


def _internal_topic(admin: AdminClient, app: str) -> str:
    internal = [t for t in admin.list_topics(timeout=30).topics if is_repartition_topic(app, t)]
    assert len(internal) == 1, internal
    return internal[0]


@dataclass
class _Refused:
    """A job of TOPOLOGY that published ``a``, then had its repartition topic's limit
    lowered under ``b`` (refused) and was sent ``b`` and ``c``."""

    job: CliJob
    args: list[str]  # its ``kstream run`` command
    out: str  # the sink topic
    internal: str  # the repartition topic


def _refuse_b(
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    unique_name: Callable[[str], str],
    tmp: Path,
    *extra: str,
) -> _Refused:
    """Start the job (``extra``: more ``kstream run`` options); the caller kills it."""
    src, out, app = unique_name("in"), unique_name("out"), unique_name("bykey")
    ensure_topics(kafka_admin, [TopicSpec(src, 1), TopicSpec(out, 1)])
    topology = tmp / "bykey_topology.py"
    topology.write_text(TOPOLOGY.format(src=src, out=out))
    p = make_producer(kafka_bootstrap)

    def send(value: str) -> None:
        p.produce(src, value.encode())
        assert p.flush(30) == 0

    send("a")
    args = [*run_args(topology, kafka_bootstrap, app, tmp), *extra]
    job = CliJob(args, tmp / "job.log")
    try:
        job.wait_until(lambda: _values(kafka_bootstrap, out) == [b"a:1"], "first output", 90)
        internal = _internal_topic(kafka_admin, app)
        set_max_message_bytes(kafka_admin, internal, LIMIT)
        send("b" * BIG)  # refused by the repartition topic
        send("c")  # accepted: without the fix it went out and "b" was lost
    except BaseException:
        job.kill()
        raise
    return _Refused(job, args, out, internal)


def _values(bootstrap: str, topic: str) -> list[bytes | None]:
    return [r.value for r in read_all(bootstrap, topic)]


def test_a_refused_internal_record_rolls_the_job_back_until_it_is_accepted(
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    r = _refuse_b(kafka_bootstrap, kafka_admin, unique_name, tmp_path)
    job, out, internal = r.job, r.out, r.internal
    try:
        refused = f"InternalDeliveryError: delivery to {internal} [0] failed: MSG_SIZE_TOO_LARGE"
        # Rolled back, replayed, refused again: no checkpoint completed in between.
        job.wait_until(lambda: job.log().count("failover (attempt") >= 2, "two rollbacks", 180)
        assert job.log().count(refused) >= 2, job.tail()
        assert _values(kafka_bootstrap, out) == [b"a:1"]
        # Accepted again: the next replay goes through, exactly once, with no restart.
        set_max_message_bytes(kafka_admin, internal, 1_000_000)
        expected = [b"a:1", f"b:{BIG}".encode(), b"c:1"]
        job.wait_until(lambda: _values(kafka_bootstrap, out) == expected, "all output", 180)
        code, _ = job.stop()
    finally:
        job.kill()
    assert code == 0, job.tail()
    assert _values(kafka_bootstrap, out) == expected


def test_without_checkpoints_a_refused_internal_record_stops_the_worker_uncommitted(
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    r = _refuse_b(kafka_bootstrap, kafka_admin, unique_name, tmp_path, "--no-checkpointing")
    job, out, internal = r.job, r.out, r.internal
    try:
        code = job.proc.wait(120)
    finally:
        job.kill()
    assert code == 1, job.tail()
    assert f"delivery to {internal} [0] failed: MSG_SIZE_TOO_LARGE" in job.log(), job.tail()
    # At least once: a restart with the topic fixed reads "b" again (its offset was not
    # committed); "c" may come twice.
    set_max_message_bytes(kafka_admin, internal, 1_000_000)
    code, log = run_to_end([*r.args, "--stop-when-idle", "3"], timeout=150)
    assert code == 0, log[-3000:]
    got = _values(kafka_bootstrap, out)
    assert got[0] == b"a:1" and f"b:{BIG}".encode() in got, got
    assert set(got) == {b"a:1", f"b:{BIG}".encode(), b"c:1"}, got
