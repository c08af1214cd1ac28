"""The control topic is bounded (issue 13 point 8) on a real broker.

``<app>.control`` is compacted with keys chosen for recovery
(:func:`kstream.protocol.messages.record_key`). A stateful exactly-once job runs
for many checkpoints (and heartbeats), then stops gracefully; once the broker's log
cleaner has compacted the topic, the restarted job's coordinator and worker each read
a bounded number of control messages at start — the newest record per key plus the
last segment, not the job's history — and carry on from the newest checkpoint with
exact output (a running count per word: every count 1..N exactly once).

The topic is created as kstream creates it (``control_topic_spec``) but with
half-second segments, so the cleaner gets to it within the test (the default is one
minute, which bounds a start-up read the same way at a larger constant).
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from integration.cli_job import CLI, CliJob, run_args, run_to_end
from integration.edge_tools import read_all
from kstream.checkpointstorage.file import FileStore
from kstream.checkpointstorage.metadata import known_completed
from kstream.kafka.clients import (
    AdminClient,
    TopicSpec,
    ensure_topics,
    make_consumer,
    make_producer,
    watermark_offsets,
)
from kstream.kafka.control import ControlReader
from kstream.kafka.controltopic import control_topic_spec
from kstream.names import control_topic
from kstream.protocol.messages import (
    Heartbeat,
    decode,
    encode,
    record_key,
)
from kstream.protocol.signing import COORDINATOR_MESSAGES

pytestmark = pytest.mark.integration

WORDS = ("apple", "berry", "cherry", "date", "elder")
CHECKPOINTS = 80  # completed in the first run
BOUND = 40  # about 25 keys with four tasks, plus what the newest segment still holds

TOPOLOGY = """
from kstream.api import Topology

topology = Topology("compaction")
(
    topology.source("{src}", value_serde="str")
    .key_by(lambda w: w, key_serde="str")
    .count()
    .to("{out}", key_serde="str", value_serde="json")
)
"""


def _control_end(bootstrap: str, app: str) -> int:
    c = make_consumer(bootstrap, f"end-{app}")
    try:
        return watermark_offsets(c, control_topic(app), 0)[1]
    finally:
        c.close()


def _read_control(bootstrap: str, app: str) -> int:
    reader = ControlReader(bootstrap, app)
    try:
        return len(reader.read_to_end())
    finally:
        reader.close()


def test_start_up_reads_a_bounded_number_of_records_after_many_heartbeats_and_checkpoints(
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    src, out, app = unique_name("in"), unique_name("out"), unique_name("compact")
    ensure_topics(
        kafka_admin,
        [TopicSpec(src, 2), TopicSpec(out, 2), control_topic_spec(app, segment_ms=500)],
    )
    topology = tmp_path / "topology.py"
    topology.write_text(TOPOLOGY.format(src=src, out=out))
    store = FileStore(tmp_path / "store")
    producer = make_producer(kafka_bootstrap)
    sent: Counter[str] = Counter()

    def send(n: int) -> None:
        for i in range(n):
            word = WORDS[(sum(sent.values()) * 3 + i) % len(WORDS)]
            producer.produce(src, word.encode(), partition=i % 2)
            sent[word] += 1
        assert producer.flush(30) == 0

    def job(*extra: str) -> list[str]:
        return run_args(topology, kafka_bootstrap, app, tmp_path, *extra, interval=0.1)

    # 1. Many checkpoints (and heartbeats) with input flowing; then a graceful stop.
    first = CliJob(job(), tmp_path / "first.log")
    try:
        deadline = time.monotonic() + 240
        while max(known_completed(store, app), default=0) < CHECKPOINTS:
            assert first.proc.poll() is None, first.tail()
            assert time.monotonic() < deadline, f"no {CHECKPOINTS} checkpoints in 240 s"
            send(20)
            time.sleep(0.3)  # input pacing, not synchronisation
        code, _ = first.stop(timeout=90)
    finally:
        first.kill()
    assert code == 0, first.tail()
    assert "stopping: the final checkpoint completed" in first.log()
    last = max(known_completed(store, app))
    written = _control_end(kafka_bootstrap, app)
    assert written > 10 * BOUND  # offsets written, transaction markers included

    # 2. The broker's cleaner compacts the closed segments. A heartbeat now and then
    #    rolls the active segment, as a live job's heartbeats do.
    deadline = time.monotonic() + 180
    beat = Heartbeat("test", (), 0)
    while (read := _read_control(kafka_bootstrap, app)) > BOUND:
        assert time.monotonic() < deadline, f"still {read} control messages after 180 s"
        producer.produce(control_topic(app), encode(beat), key=record_key(beat))
        assert producer.flush(30) == 0
        time.sleep(2.0)  # the log cleaner runs on its own schedule

    # 3. Restart with more input: both ends of the control topic read a bounded number
    #    of messages at start, and the job carries on from its newest checkpoint.
    send(100)
    restart_at = _control_end(kafka_bootstrap, app)
    code, log = run_to_end(job("--stop-when-idle", "3"), timeout=240)
    assert code == 0, log[-4000:]
    coordinator = [int(n) for n in re.findall(r"\((\d+) control messages read at start\)", log)]
    worker = [int(n) for n in re.findall(r"control history: (\d+) messages read at start", log)]
    assert len(coordinator) == 1 and len(worker) == 1, (coordinator, worker)
    # The restarted worker reads the history before it writes anything. Its coordinator
    # starts alongside (fencing, the store) and may find the worker's first heartbeats
    # and reports already written: at most what precedes its own first write.
    since = [
        decode(r.value or b"")
        for r in read_all(kafka_bootstrap, control_topic(app))
        if r.offset >= restart_at
    ]
    early = next(
        (i for i, m in enumerate(since) if isinstance(m, COORDINATOR_MESSAGES)), len(since)
    )
    assert worker[0] <= BOUND + 2, (coordinator, worker, written)
    assert coordinator[0] <= BOUND + 2 + early, (coordinator, worker, early, written)
    assert f"restoring every task to checkpoint {last} " in log, log[-4000:]
    next_ids = [int(n) for n in re.findall(r"next checkpoint (\d+), attempt", log)]
    assert len(next_ids) == 1 and next_ids[0] > last, (next_ids, last)

    # 4. The exact output: every count 1..N of every word exactly once.
    rows = read_all(kafka_bootstrap, out)
    got = Counter((r.key.decode() if r.key else "", int(r.value or b"0")) for r in rows)
    expected = Counter((w, c) for w, n in sent.items() for c in range(1, n + 1))
    assert got == expected, (
        f"missing {sorted((expected - got).items())[:10]}, "
        f"extra {sorted((got - expected).items())[:10]}"
    )
    print(
        f"\n[compaction] {written} control offsets written over {last} checkpoints; "
        f"start-up read {coordinator[0]} (coordinator, {early} of them the restarted "
        f"worker's first writes at most) and {worker[0]} (worker) messages"
    )


def test_no_control_client_creates_the_control_topic(
    kafka_bootstrap: str, kafka_admin: AdminClient, unique_name: Callable[[str], str]
) -> None:
    """Only the job's topic setup creates ``<app>.control`` (compacted): `kstream savepoint`
    for an app that never ran says so at once and creates nothing."""
    app = unique_name("absent")
    code, log = run_to_end(
        [*CLI, "savepoint", "--app-id", app, "--bootstrap", kafka_bootstrap, "--store", "file:///nonexistent",
         "--timeout", "60"],
        timeout=60,
    )  # fmt: skip
    assert code == 1, log[-2000:]
    assert f"no control topic {app}.control: is the job '{app}' running?" in log
    assert control_topic(app) not in kafka_admin.list_topics(timeout=10).topics
