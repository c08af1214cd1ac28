"""Internal records are not starved by the user-topic records fetched ahead of them.

One consumer reads a worker's user-topic and internal partitions, and librdkafka hands
out what it fetched in arrival order. Catching up, it fetches each user-topic partition
up to ``FETCH_BYTES_PER_PARTITION`` ahead at once, and the internal records written
after that — the input of the stages behind a ``key_by``, and every checkpoint's
barriers — come only after all of them. The loop reads no more while it has records in
hand (``kstream.worker.backlog``), so it reaches them only as fast as it works through
the user-topic records before them. With a slow function that is the whole backlog: a
checkpoint of one worker catching up on 4 partitions (0.4 ms a record) took 24 s, and
a worker joining it waited that long for its hand-over (integration/test_global_alignment).

So when no internal record was read for ``STARVED_S`` while user-topic records were
read or in hand, and an internal partition that is read (not paused) has records
waiting (its lag, from the high watermark of its last fetch; one that delivered none
yet: records in it at all), the loop reads past the user-topic records queued ahead of
them: one read of everything queued, into the backlog, up to ``READ_PAST_MAX`` records
in hand. The backlog feeds internal records before the user-topic ones in hand
(``Backlog(first=...)``), so they wait for no one. Only with ``READ_PAST_MAX`` records in
hand already does that read skip the user-topic partitions instead: they are paused,
so librdkafka drops what it prefetched of them, and resumed at the end of the iteration
(``WorkerTasks.sync_pauses`` pauses exactly what it wants) to be fetched again from the
next record to read. Pausing was the first way, always: at 1024 partitions (256 a
worker, paused and fetched again twice a second) the sources were fed 2 152 records/s
instead of 39 682, and the catch-up took 146 s instead of 72 (benchmarks/SCALING.md).
At most one look per ``STARVED_S``; a worker whose internal records keep coming never
reads past anything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

TP = tuple[str, int]

STARVED_S = 0.25
"""How long internal partitions with records waiting may get none while user-topic
records are read, before the loop reads past the user-topic records ahead of them."""

READ_PAST_MAX = 50_000
"""Records in hand up to which the loop reads past the user-topic records queued ahead
of internal ones (some tens of MB); with more, it skips those partitions for a read."""


class Consumer(Protocol):
    """What is asked of the source consumer (``kstream.kafka.source.SourceConsumer``)."""

    @property
    def assignment(self) -> set[TP]: ...

    @property
    def paused(self) -> frozenset[TP]: ...

    def lag(self, tps: Iterable[TP] | None = None, unknown: int | None = None) -> dict[TP, int]: ...


class InternalFirst:
    """When internal records are starved by the user-topic records ahead (see the module)."""

    def __init__(
        self, internal: Callable[[str], bool], now: float, starved_s: float = STARVED_S
    ) -> None:
        self.internal = internal
        self.starved_s = starved_s
        self.since = now  # the last internal record read, or the last look
        self.user_read = False  # user-topic records were read since
        self.looks = 0  # how many times internal records were found starved

    def read(self, batch: Mapping[TP, object], now: float) -> None:
        """Records just read (per partition)."""
        if any(self.internal(tp[0]) for tp in batch):
            self.since, self.user_read = now, False
        elif batch:
            self.user_read = True

    def starved(self, source: Consumer, now: float, busy: bool) -> frozenset[TP]:
        """The user-topic partitions read now, when internal records wait behind what
        was fetched of them or behind the user-topic records in hand (``busy``: the loop
        reads nothing before it fed them): the next read reads past them, or skips them
        (see the module); else none."""
        if not (self.user_read or busy) or now - self.since < self.starved_s:
            return frozenset()
        self.since, self.user_read = now, False  # looked at: at most once a period
        paused, assigned = source.paused, source.assignment
        internal = [tp for tp in assigned if self.internal(tp[0]) and tp not in paused]
        if not internal or not any(n > 0 for n in source.lag(internal, unknown=1).values()):
            return frozenset()
        self.looks += 1
        return frozenset(tp for tp in assigned if not self.internal(tp[0]) and tp not in paused)


def read_past(in_hand: int, batch_size: int) -> int:
    """How many records the read after a starved look takes (``in_hand``: records in the
    backlog): everything queued, up to ``READ_PAST_MAX`` in hand, and at least a batch;
    0 when that many are in hand already: skip the user-topic partitions instead."""
    if in_hand >= READ_PAST_MAX:
        return 0
    return max(batch_size, READ_PAST_MAX - in_hand)
