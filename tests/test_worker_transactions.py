"""WorkerTransactions: one transaction of the worker's producer carries every task's
output, marker and input offsets; the group's refusal of the offsets is "fenced"
(kstream.kafka.worker_transactions). A fake producer: no broker. What the broker does
with the offsets: integration/test_eos_fencing_contract.py."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from kstream.kafka.clients import KafkaError, KafkaException
from kstream.kafka.commits import CommitMarker
from kstream.kafka.sink import SinkFencedError
from kstream.kafka.worker_transactions import SinkCommit, WorkerTransactions, committable_offsets
from kstream.sinkbuffer.epochs import ColumnBatch, Epoch, SinkError

METADATA = object()  # the consumer's group metadata, opaque


class Producer:
    """Notes every call; ``refuse`` maps a call name to the KafkaError it raises."""

    def __init__(self, refuse: dict[str, KafkaError] | None = None, slow: float = 0) -> None:
        self.calls: list[Any] = []
        self.refuse = refuse or {}
        self.slow = slow

    def _call(self, name: str, *args: Any) -> None:
        self.calls.append((name, *args))
        if name in self.refuse:
            raise KafkaException(self.refuse[name])

    def begin_transaction(self) -> None:
        self._call("begin")

    def produce(self, topic: str, value: Any = None, key: Any = None, *_: Any, **kw: Any) -> None:
        time.sleep(self.slow)
        self._call("produce", topic, key)

    def poll(self, timeout: float = 0) -> int:
        return 0

    def send_offsets_to_transaction(
        self, offsets: list[Any], metadata: Any, timeout: float
    ) -> None:
        self._call("offsets", [(o.topic, o.partition, o.offset) for o in offsets], metadata)

    def commit_transaction(self, timeout: float) -> None:
        self._call("commit")

    def abort_transaction(self, timeout: float) -> None:
        self._call("abort")

    def flush(self, timeout: float = 0) -> int:
        return 0


def transactions(p: Producer, *, group: bool = True) -> WorkerTransactions:
    t = WorkerTransactions(
        "127.0.0.1:1",  # no connection is made: the producer is the fake
        "shop.sink.worker.h:1.abc",
        "shop.commits",
        group_metadata=(lambda: METADATA) if group else None,
    )
    t._producer, t._marker_parts = p, 1
    return t


def part(task: str, n: int, keys: list[bytes], dropped: list[str] | None = None) -> SinkCommit:
    epoch = Epoch(n, chunks=[ColumnBatch("out", list(keys), [b"v"] * len(keys), [1] * len(keys))])

    def done(_epochs: list[Epoch], _n: int) -> None:
        if dropped is not None:
            dropped.append(task)

    return SinkCommit(task, CommitMarker(task, n, 3), [epoch], len(keys), done)


def error(code: int, *, abort: bool = True, fatal: bool = False) -> KafkaError:
    return KafkaError(code, "refused", fatal=fatal, txn_requires_abort=abort)


def test_one_transaction_carries_outputs_markers_then_offsets() -> None:
    p = Producer()
    dropped: list[str] = []
    t = transactions(p)
    commits = [part("a", 4, [b"k1", b"k2"], dropped), part("b", 4, [b"k3"], dropped)]
    assert t.run(commits, {("rep", 1): 9, ("in", 0): 12}, "publishing 4") == 3
    assert p.calls == [
        ("begin",),
        ("produce", "out", b"k1"),
        ("produce", "out", b"k2"),
        ("produce", "shop.commits", b"a"),  # each task's marker after its output
        ("produce", "out", b"k3"),
        ("produce", "shop.commits", b"b"),
        ("offsets", [("in", 0, 12), ("rep", 1, 9)], METADATA),
        ("commit",),
    ]
    assert dropped == ["a", "b"]


def test_without_group_metadata_no_offsets_are_added() -> None:
    p = Producer()
    transactions(p, group=False).run([part("a", 1, [b"k"])], {("in", 0): 1}, "publishing 1")
    assert [c[0] for c in p.calls] == ["begin", "produce", "produce", "commit"]


@pytest.mark.parametrize("code", [KafkaError.UNKNOWN_MEMBER_ID, KafkaError.ILLEGAL_GENERATION])
def test_the_groups_refusal_of_the_offsets_aborts_and_is_fenced(code: int) -> None:
    p = Producer(refuse={"offsets": error(code)})
    t = transactions(p)
    dropped: list[str] = []
    with pytest.raises(SinkFencedError, match="no longer counts this worker as the owner"):
        t.run([part("a", 2, [b"k"], dropped)], {("in", 0): 1}, "publishing 2")
    assert p.calls[-1] == ("abort",) and dropped == []  # nothing visible, epochs kept
    assert t._producer is p  # the producer goes on: the worker's other tasks publish


def test_a_worker_without_an_assignment_publishes_nothing() -> None:
    """The source's metadata is None between a revocation and the next assignment."""
    p = Producer()
    t = transactions(p)
    t._group_metadata = lambda: None
    with pytest.raises(SinkFencedError, match="holds no assignment"):
        t.run([part("a", 2, [b"k"])], {("in", 0): 1}, "publishing 2")
    assert p.calls == []  # refused before a transaction is begun


def test_opening_waits_on_no_coordinator_the_offsets_go_with_the_commit() -> None:
    """The processing thread opens and fills the transaction; adding the offsets (a
    round trip to the group coordinator, which moves when a broker restarts) is part
    of ``publish``, on the commit thread, with the metadata read at the opening."""
    p = Producer()
    t = transactions(p)
    seen: list[object] = []

    def metadata() -> object:
        seen.append("read")
        return METADATA

    t._group_metadata = metadata
    publication = t.open([part("a", 2, [b"k"])], {("in", 0): 5}, "publishing 2")
    assert [c[0] for c in p.calls] == ["begin", "produce", "produce"] and seen == ["read"]
    t._group_metadata = lambda: None  # a revocation meanwhile: the opening's metadata counts
    publication.publish()
    assert p.calls[3:] == [("offsets", [("in", 0, 5)], METADATA), ("commit",)]


def test_another_abortable_error_aborts_and_is_a_failure() -> None:
    p = Producer(refuse={"commit": error(KafkaError._MSG_TIMED_OUT)})
    with pytest.raises(SinkError, match="buffered epochs are kept") as failed:
        transactions(p).run([part("a", 2, [b"k"])], {}, "publishing 2")
    assert not isinstance(failed.value, SinkFencedError)
    assert p.calls[-1] == ("abort",)


def test_a_fenced_id_drops_the_producer() -> None:
    p = Producer(refuse={"begin": error(KafkaError.PRODUCER_FENCED, abort=False, fatal=True)})
    t = transactions(p)
    with pytest.raises(SinkFencedError, match="fenced while publishing 2"):
        t.run([part("a", 2, [b"k"])], {}, "publishing 2")
    assert t._producer is None


def test_transactions_run_one_at_a_time() -> None:
    """Restores publish from several threads: one transaction at a time."""
    p = Producer(slow=0.01)
    t = transactions(p)
    threads = [
        threading.Thread(target=t.run, args=([part(x, 1, [b"k1", b"k2"])], {}, "restore"))
        for x in "abc"
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join(10)
    order = [c[0] for c in p.calls if c[0] in ("begin", "commit")]
    assert order == ["begin", "commit"] * 3


def test_committable_offsets() -> None:
    got = committable_offsets(
        [(("in", 0), 41), (("rep", 1), {"w1": 9, "w2": 4}), (("in", 2), None), (("rep", 3), {})]
    )
    assert got == {("in", 0): 41, ("rep", 1): 4, ("in", 2): 0, ("rep", 3): 0}


def test_a_call_the_client_never_answers_gives_the_producer_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """librdkafka's send_offsets_to_transaction can wait past its timeout for good while
    the group coordinator's broker restarts (confluentinc/librdkafka#5456): a worker hung
    so, heartbeating, its checkpoints timing out. Past the bound the publication fails
    and the producer is dropped: the next use makes a new instance, which fences it."""
    monkeypatch.setattr("kstream.kafka.worker_transactions.ANSWER_GRACE_S", 0.05)
    release = threading.Event()

    class Stuck(Producer):
        def send_offsets_to_transaction(self, offsets: list[Any], md: Any, t: float) -> None:
            self._call("offsets")
            release.wait(30)

    p = Stuck()
    t = transactions(p)
    t.timeout = 0.05
    try:
        with pytest.raises(SinkError, match="did not answer within"):
            t.run([part("a", 2, [b"k"])], {("in", 0): 1}, "publishing 2")
        assert t._producer is None and "commit" not in [c[0] for c in p.calls]
    finally:
        release.set()
