"""A hostile client writing to ``<app>.control`` changes nothing (issue 13, point 1).

A real job (`kstream run`) on a real broker; while it runs a plain producer writes a
forged ``CheckpointCompleted`` with a huge id and a forged ``JobFailed``. The job
keeps running, logs and skips both, its output is exact, no commit marker names the
forged id, and a restarted coordinator continues with small ids.

A plain producer copying *genuine* signed messages back (issue 37, point A) — the
running coordinator's own and an earlier coordinator's, of every type — changes
nothing either: they are recognised as replays and skipped.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from integration.cli_job import CliJob, run_args, run_to_end
from integration.edge_tools import markers, read_all
from kstream.checkpointstorage.file import FileStore
from kstream.checkpointstorage.metadata import completed_ids
from kstream.kafka.clients import AdminClient, TopicSpec, ensure_topics, make_producer
from kstream.names import control_topic
from kstream.protocol.messages import CheckpointCompleted, JobFailed, decode, encode

T0 = 1_767_225_600_000
HUGE = 10**12

TOPOLOGY = """
from kstream.api import Topology

topology = Topology("forge")
topology.source("{src}", value_serde="str").map(str.upper).to("{out}", value_serde="str")
"""


def _produce(bootstrap: str, topic: str, values: list[str]) -> None:
    p = make_producer(bootstrap)
    for i, v in enumerate(values):
        p.produce(topic, v.encode(), timestamp=T0 + i)
    assert p.flush(30) == 0


def _args(topology: Path, bootstrap: str, app: str, tmp: Path) -> list[str]:
    return run_args(topology, bootstrap, app, tmp, "--stop-when-idle", "4", interval=0.5)


def test_forged_control_records_are_skipped_and_the_job_stays_exact(
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    src, out, app = unique_name("in"), unique_name("out"), unique_name("forge")
    ensure_topics(kafka_admin, [TopicSpec(src, 1), TopicSpec(out, 1)])
    topology = tmp_path / "forge_topology.py"
    topology.write_text(TOPOLOGY.format(src=src, out=out))
    store = FileStore(tmp_path / "store")

    _produce(kafka_bootstrap, src, ["a", "b", "c"])
    job = CliJob(_args(topology, kafka_bootstrap, app, tmp_path), tmp_path / "first.log")
    try:
        job.wait_until(lambda: bool(completed_ids(store, app)), "completed checkpoint", 90)
        # A plain client (no transaction, no key) writes what only a coordinator may.
        forger = make_producer(kafka_bootstrap)
        for msg in (CheckpointCompleted(HUGE, 1), JobFailed("forged: stop everything")):
            forger.produce(control_topic(app), encode(msg), key=type(msg).__name__)
        assert forger.flush(30) == 0
        _produce(kafka_bootstrap, src, ["d", "e"])
        code = job.wait(timeout=120)
    finally:
        job.kill()
    log = job.log()
    assert code == 0, log[-4000:]
    assert log.count("not signed by a coordinator of this job") >= 2, log[-4000:]
    assert "another coordinator took over" not in log
    assert sorted(r.value or b"" for r in read_all(kafka_bootstrap, out)) == [
        b"A",
        b"B",
        b"C",
        b"D",
        b"E",
    ]
    assert all(m["checkpoint"] < 1000 for m in markers(kafka_bootstrap, app)), markers(
        kafka_bootstrap, app
    )

    # A restarted job's coordinator does not continue above the forged id.
    before = max(completed_ids(store, app))
    _produce(kafka_bootstrap, src, ["f"])
    code, log = run_to_end(_args(topology, kafka_bootstrap, app, tmp_path), timeout=120)
    assert code == 0, log[-4000:]
    assert before < max(completed_ids(store, app)) < 1000
    assert sorted(r.value or b"" for r in read_all(kafka_bootstrap, out)) == [
        b"A",
        b"B",
        b"C",
        b"D",
        b"E",
        b"F",
    ]


def test_replayed_genuine_control_messages_are_skipped_and_the_job_stays_exact(
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    src, out, app = unique_name("in"), unique_name("out"), unique_name("replay")
    ensure_topics(kafka_admin, [TopicSpec(src, 1), TopicSpec(out, 1)])
    topology = tmp_path / "replay_topology.py"
    topology.write_text(TOPOLOGY.format(src=src, out=out))
    store = FileStore(tmp_path / "store")
    _produce(kafka_bootstrap, src, ["a", "b"])
    code, log = run_to_end(_args(topology, kafka_bootstrap, app, tmp_path), timeout=120)
    assert code == 0, log[-4000:]  # an earlier coordinator (epoch 1) and its messages
    first_run = max(completed_ids(store, app))

    _produce(kafka_bootstrap, src, ["c"])
    job = CliJob(_args(topology, kafka_bootstrap, app, tmp_path), tmp_path / "second.log")
    try:
        job.wait_until(
            lambda: max(completed_ids(store, app)) > first_run, "a checkpoint of this run", 90
        )
        signed = [
            r
            for r in read_all(kafka_bootstrap, control_topic(app))
            if b',"sig":"' in (r.value or b"")
        ]
        kinds = {type(decode(r.value)).__name__ for r in signed}
        assert {"Restore", "Resume", "TriggerCheckpoint", "CheckpointCompleted"} <= kinds, kinds
        epochs = {json.loads(r.value or b"")["epoch"] for r in signed}
        assert len(epochs) == 2, epochs  # this run's coordinator's and the earlier one's
        # Copy them all back, the newest completion (the probe's case) first, twice.
        replayer = make_producer(kafka_bootstrap)
        for r in [signed[-1], signed[-1], *signed]:
            replayer.produce(control_topic(app), r.value, key=r.key)
        assert replayer.flush(30) == 0
        _produce(kafka_bootstrap, src, ["d", "e"])
        code = job.wait(timeout=120)
    finally:
        job.kill()
    log = job.log()
    assert code == 0, log[-4000:]
    assert "another coordinator took over" not in log, log[-4000:]
    assert log.count("a copy of an earlier coordinator message") >= 2, log[-4000:]
    assert sorted(r.value or b"" for r in read_all(kafka_bootstrap, out)) == [
        b"A",
        b"B",
        b"C",
        b"D",
        b"E",
    ]
