"""Exactly-once sink on a real broker: atomic commit, idempotent completion, recovery, fencing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from integration.edge_tools import markers, read_all
from kstream.kafka.clients import AdminClient, TopicSpec, ensure_topics, make_producer
from kstream.kafka.commits import commits_topic_spec
from kstream.kafka.exactly_once_sink import ExactlyOnceSink
from kstream.kafka.sink import SinkFencedError
from kstream.names import sink_transactional_id
from kstream.sinkbuffer.epochs import OutputRecord, SinkError

pytestmark = pytest.mark.integration


@dataclass
class Job:
    bootstrap: str
    app: str
    out: str
    sinks: list[ExactlyOnceSink]

    def sink(self, task: str = "sink-0") -> ExactlyOnceSink:
        s = ExactlyOnceSink(self.app, task, self.bootstrap, timeout=20.0)
        self.sinks.append(s)
        return s

    def records(self, *names: str) -> list[OutputRecord]:
        return [
            (self.out, None, n.encode(), f"value-{n}".encode(), 1_000, [("n", n.encode())])
            for n in names
        ]

    def output(self) -> list[bytes]:
        return sorted(r.key for r in read_all(self.bootstrap, self.out) if r.key is not None)

    def markers(self) -> list[tuple[str, int, int]]:
        return [
            (m["task"], m["checkpoint"], m["attempt"]) for m in markers(self.bootstrap, self.app)
        ]


@pytest.fixture
def job(
    kafka_bootstrap: str, kafka_admin: AdminClient, unique_name: Callable[[str], str]
) -> Iterator[Job]:
    app = unique_name("eos")
    out = f"{app}.out"
    ensure_topics(kafka_admin, [TopicSpec(out, 2), commits_topic_spec(app)])
    j = Job(kafka_bootstrap, app, out, [])
    yield j
    for s in j.sinks:
        s.close()


def keys(*names: str) -> list[bytes]:
    return sorted(n.encode() for n in names)


def test_completion_publishes_buffer_and_marker_and_is_idempotent(job: Job) -> None:
    sink = job.sink()
    assert sink.recover(None, attempt=1) == 0
    sink.write_batch(job.records("a1", "a2", "a3"))
    sink.on_barrier(1)
    sink.write(job.records("b1")[0])
    sink.write_batch(job.records("b2"))
    sink.on_barrier(2)
    sink.write_batch(job.records("c1"))  # open epoch 3: never committed here

    assert job.output() == []  # nothing visible before a checkpoint completes
    assert sink.on_checkpoint_completed(1) == 3
    assert job.output() == keys("a1", "a2", "a3")
    assert job.markers() == [("sink-0", 1, 1)]

    assert sink.on_checkpoint_completed(1) == 0  # repeated completion
    assert sink.on_checkpoint_completed(2) == 2
    assert sink.on_checkpoint_completed(2) == 0  # repeated
    assert sink.on_checkpoint_completed(1) == 0  # late
    assert job.output() == keys("a1", "a2", "a3", "b1", "b2")
    assert job.markers() == [("sink-0", 1, 1), ("sink-0", 2, 1)]
    # headers and values survive the buffer
    got = {r.key: (r.value, r.headers) for r in read_all(job.bootstrap, job.out)}
    assert got[b"b1"] == (b"value-b1", [("n", b"b1")])


def test_later_completion_subsumes_an_aborted_checkpoint(job: Job) -> None:
    sink = job.sink()
    sink.recover(None, attempt=1)
    sink.write_batch(job.records("a1"))
    sink.on_barrier(1)  # checkpoint 1 is aborted: never completes
    sink.write_batch(job.records("b1", "b2"))
    sink.on_barrier(2)
    assert sink.on_checkpoint_completed(2) == 3
    assert job.output() == keys("a1", "b1", "b2")
    assert job.markers() == [("sink-0", 2, 1)]


def test_recovery_with_marker_at_or_above_the_buffer_drops_it(job: Job) -> None:
    first = job.sink()
    first.recover(None, attempt=1)
    first.write_batch(job.records("a1", "a2", "a3", "a4"))
    first.on_barrier(1)
    blob = first.buffer_blob()
    assert first.on_checkpoint_completed(1) == 4
    first.close()  # "crash" after the commit, before anything else

    again = job.sink()
    assert again.recover(blob, attempt=2) == 0
    assert job.output() == keys("a1", "a2", "a3", "a4")  # 0 duplicates
    assert job.markers() == [("sink-0", 1, 1)]


def test_recovery_with_marker_below_the_buffer_commits_it(job: Job) -> None:
    first = job.sink()
    first.recover(None, attempt=1)
    first.write_batch(job.records("a1", "a2", "a3"))
    first.on_barrier(1)
    first.write_batch(job.records("b1", "b2", "b3", "b4"))
    first.on_barrier(2)
    blob = first.buffer_blob()  # snapshot of checkpoint 2: epochs 1 and 2
    assert first.on_checkpoint_completed(1) == 3
    first.close()  # crash before CheckpointCompleted(2) was handled

    again = job.sink()
    assert again.recover(blob, attempt=2) == 4  # epoch 1 dropped (marker 1), epoch 2 committed
    assert job.output() == keys("a1", "a2", "a3", "b1", "b2", "b3", "b4")  # 0 lost, 0 doubled
    assert job.markers() == [("sink-0", 1, 1), ("sink-0", 2, 2)]
    # after recovery the sink goes on normally
    again.write_batch(job.records("c1"))
    again.on_barrier(3)
    assert again.on_checkpoint_completed(2) == 0
    assert again.on_checkpoint_completed(3) == 1
    assert job.output() == keys("a1", "a2", "a3", "b1", "b2", "b3", "b4", "c1")


def test_zombie_with_the_same_transactional_id_is_fenced(job: Job) -> None:
    zombie = job.sink()
    zombie.recover(None, attempt=1)
    zombie.write_batch(job.records("a1", "a2"))
    zombie.on_barrier(1)
    blob = zombie.buffer_blob()
    zombie.write_batch(job.records("z1"))
    zombie.on_barrier(2)

    successor = job.sink()  # restored elsewhere from checkpoint 1
    assert successor.recover(blob, attempt=2) == 2

    with pytest.raises(SinkFencedError, match="fenced"):
        zombie.on_checkpoint_completed(2)
    assert job.output() == keys("a1", "a2")  # nothing of the zombie is visible
    assert job.markers() == [("sink-0", 1, 2)]


def test_tasks_keep_separate_markers(job: Job) -> None:
    s0, s1 = job.sink("sink-0"), job.sink("sink-1")
    s0.recover(None, attempt=1)
    s1.recover(None, attempt=1)
    s0.write_batch(job.records("x0"))
    s1.write_batch(job.records("x1"))
    s0.on_barrier(4)
    s1.on_barrier(4)
    assert s0.on_checkpoint_completed(4) == 1
    assert s1.on_checkpoint_completed(4) == 1
    s1.write_batch(job.records("y1"))
    s1.on_barrier(5)
    blob1 = s1.buffer_blob()
    s1.close()
    # sink-1 restarts: sink-0's marker (4) must not be mistaken for its own
    again = job.sink("sink-1")
    assert again.recover(blob1, attempt=2) == 1
    assert again.read_marker() is not None
    assert job.markers()[-1] == ("sink-1", 5, 2)
    assert job.output() == keys("x0", "x1", "y1")


def test_an_open_transaction_of_another_task_cannot_hide_our_marker(job: Job) -> None:
    first = job.sink()
    first.recover(None, attempt=1)
    # Another sink task's commit is in flight on the same marker partition,
    # opened BEFORE our marker: the read_committed end (LSO) stays below our marker.
    other = make_producer(job.bootstrap, transactional_id=sink_transactional_id(job.app, "sink-9"))
    other.init_transactions(20)
    other.begin_transaction()
    other.produce(f"{job.app}.commits", b'{"task":"sink-9","checkpoint":1,"attempt":1}', b"sink-9")
    assert other.flush(20) == 0

    first.write_batch(job.records("a1", "a2"))
    first.on_barrier(1)
    blob = first.buffer_blob()
    assert first.on_checkpoint_completed(1) == 2
    first.close()

    again = ExactlyOnceSink(job.app, "sink-0", job.bootstrap, timeout=2.0)
    job.sinks.append(again)
    # while the other transaction is open the marker cannot be read to the end:
    # recovery refuses (and publishes nothing) rather than missing the marker
    with pytest.raises(SinkError, match="stalled at offset"):
        again.recover(blob, attempt=2)
    other.commit_transaction(20)
    assert again.recover(blob, attempt=2) == 0
    assert job.output() == keys("a1", "a2")  # 0 duplicates
    assert job.markers() == [("sink-9", 1, 1), ("sink-0", 1, 1)]
