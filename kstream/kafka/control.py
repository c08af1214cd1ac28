"""The control topic ``<app>.control`` on Kafka: the topic, its reader and the workers'
end (the coordinator's end: :mod:`kstream.kafka.coordinator_channel`).

One partition, so every reader sees one total order. The coordinator writes
through a transactional producer with the fixed ``transactional.id``
``<app>.coordinator``: ``init_transactions`` fences any predecessor, and a fenced
coordinator fails its next write with :class:`CoordinatorFenced`. Everybody reads
``read_committed``, so a zombie's aborted writes are never seen. Workers write
non-transactionally (visible to read_committed readers at once).

Records are decoded with :func:`kstream.protocol.messages.decode`; a record
that is not a valid message is logged, counted in ``skipped`` and skipped.

While the brokers are unreachable, every send (a coordinator's transaction, a
worker's acknowledgement, heartbeat or report) is retried with backoff and the
process stays up; the outage is logged once when it starts and once when it
ends (:mod:`kstream.kafka.reachability`), and a send fails only when the outage
outlasts the job's bound (``BrokerOutage``, a ControlError).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from confluent_kafka import OFFSET_END, Consumer, TopicPartition

from kstream.kafka.clients import (
    KafkaError,
    KafkaException,
    consume_available,
    make_consumer,
    make_producer,
    watermark_offsets,
)
from kstream.kafka.controltopic import NO_AUTO_CREATE
from kstream.kafka.reachability import Backoff, BrokerOutage, Reachability
from kstream.names import control_reader_group, control_topic
from kstream.protocol.messages import (
    Message,
    ProtocolError,
    decode,
    encode,
    record_key,
)
from kstream.protocol.replay import ReplayGuard
from kstream.protocol.signing import COORDINATOR_MESSAGES, verify

log = logging.getLogger(__name__)


class ControlError(RuntimeError):
    """The control topic could not be read or written; the message says what failed."""


class OutageExceeded(ControlError):
    """The brokers stayed unreachable longer than the job's bound (``--max-outage``)."""


DEFAULT_MAX_OUTAGE = 300.0
STALL_S = 10.0  # a reader without a record for this long, below the end, is reconnected
# Errors a retry can cure: the brokers (or a partition's leader) are away for now.
_TRANSIENT = frozenset(
    {
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
        KafkaError._MSG_TIMED_OUT,
        KafkaError._RESOLVE,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.CONCURRENT_TRANSACTIONS,
    }
)


def _transient(err: KafkaError) -> bool:
    return err.code() in _TRANSIENT or (err.retriable() and not err.fatal())


def _check(reach: Reachability) -> None:
    try:
        reach.check()
    except BrokerOutage as e:
        raise OutageExceeded(str(e)) from None


class CoordinatorFenced(ControlError):
    """Another coordinator with the same app id took over; this one must stop."""


class ControlReader:
    """Reads and decodes the control topic from a position; counts skipped records."""

    def __init__(
        self,
        bootstrap: str,
        app_id: str,
        *,
        from_beginning: bool = True,
        extra: Mapping[str, Any] | None = None,
        reachability: Reachability | None = None,
        key_source: Callable[[], bytes | None] | None = None,
        read_committed: bool = True,
        keys: Callable[[bytes | None], bool] | None = None,
    ) -> None:
        """``read_committed=False``: also records of transactions still open (a killed
        coordinator's blocks committed readers until it is fenced); ``keys``: decode only
        records whose key it accepts (the others are passed over unread)."""
        self.topic = control_topic(app_id)
        self._keys = keys
        # Verification of coordinator messages (kstream.protocol.signing.verify): with
        # a key source, a coordinator message that does not verify is skipped.
        self._key_source = key_source
        self.unverified = 0  # coordinator messages skipped as unverifiable
        self.max_epoch = 0  # newest coordinator epoch among verified messages
        # Copies of earlier signed messages (kstream.protocol.replay) are skipped.
        self.replays = ReplayGuard()
        self.reach = reachability or Reachability(DEFAULT_MAX_OUTAGE)
        self._reported: set[int] = set()  # error codes logged since the last record

        def connect() -> Consumer:
            # No group membership and no commits: the partition is assigned directly.
            return make_consumer(
                bootstrap,
                control_reader_group(app_id),
                read_committed=read_committed,
                # A short fetch wait: an empty fetch (the end of the topic) is answered
                # in 50 ms, so reading the history to its end does not wait 500 ms per fetch.
                extra={
                    "fetch.wait.max.ms": 50,
                    **(extra or {}),
                    "enable.partition.eof": True,
                    **NO_AUTO_CREATE,
                },
            )

        self._connect = connect
        self._consumer: Consumer = connect()
        start = OFFSET_END
        if from_beginning:
            # An explicit offset: librdkafka resolves the logical OFFSET_BEGINNING with
            # a lookup that delays the first fetch by ~0.5 s (every worker start).
            start, _high = self._watermarks(30.0)
        self._consumer.assign([TopicPartition(self.topic, 0, start)])
        self._progress_at = time.monotonic()  # when a record or the end was last read
        self._next_stall_check = 0.0
        self.skipped = 0
        self.eof_count = 0  # how often the reader reached the end of the partition
        self.last_offset = -1  # offset of the newest record read

    def poll(self, timeout: float, max_messages: int = 500) -> list[Message]:
        """Messages that arrive within ``timeout`` seconds (possibly none)."""
        return [msg for _raw, msg in self.poll_records(timeout, max_messages)]

    def poll_records(self, timeout: float, max_messages: int = 500) -> list[tuple[bytes, Message]]:
        """Like ``poll``, with each message's record value."""
        return [(value, msg) for value, msg, _ts in self._poll(timeout, max_messages)]

    def poll_timed(self, timeout: float, max_messages: int = 500) -> list[tuple[float, Message]]:
        """Like ``poll``, with each message's record timestamp (epoch seconds)."""
        return [(ts, msg) for _value, msg, ts in self._poll(timeout, max_messages)]

    def _poll(self, timeout: float, max_messages: int) -> list[tuple[bytes, Message, float]]:
        out: list[tuple[bytes, Message, float]] = []
        for rec in consume_available(self._consumer, max_messages, timeout):
            err = rec.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    self.eof_count += 1
                    self._progress_at = time.monotonic()
                    continue
                if err.fatal():
                    raise ControlError(f"reading {self.topic} failed: {err.str()}")
                if err.code() == KafkaError._ALL_BROKERS_DOWN:
                    self.reach.failed(f"reading {self.topic}: {err.str()}")
                elif err.code() not in self._reported:  # once per kind until a record comes
                    self._reported.add(err.code())
                    log.log(
                        logging.INFO if _transient(err) else logging.WARNING,
                        "reading %s: %s",
                        self.topic,
                        err.str(),
                    )
                continue
            self._reported.clear()
            self.reach.ok()
            self._progress_at = time.monotonic()
            self.last_offset = rec.offset() or 0
            if self._keys is not None and not self._keys(rec.key()):
                continue
            value = rec.value()
            try:
                msg = decode(value)
                if self._key_source is not None and isinstance(msg, COORDINATOR_MESSAGES):
                    self._check_signature(value or b"", msg, rec.offset())
                out.append((value or b"", msg, rec.timestamp()[1] / 1000.0))
            except _Unverified:
                continue
            except ProtocolError as e:
                self.skipped += 1
                log.warning(
                    "skipping control record at %s offset %s: %s", self.topic, rec.offset(), e
                )
        if not out:
            self._unstall()
        return out

    def _unstall(self) -> None:
        """Reconnect the reader if it stopped fetching although the partition holds more.

        librdkafka's assign()ed consumers can stop fetching a partition for good after
        every broker restarted (librdkafka issue #5153; seen after full outages here).
        Checked at most every ``STALL_S`` seconds, only after that long without a
        record; a new consumer continues at the same position (nothing lost, nothing
        read twice), said in one log line.
        """
        now = time.monotonic()
        if now - self._progress_at < STALL_S or now < self._next_stall_check:
            return
        self._next_stall_check = now + STALL_S
        tp = TopicPartition(self.topic, 0)
        try:
            (pos,) = self._consumer.position([tp])
            _low, high = self._consumer.get_watermark_offsets(tp, timeout=2.0, cached=False)
        except KafkaException:
            return  # the brokers are away: nothing to judge
        if pos.offset < 0 or high <= pos.offset:
            return  # at the end (or nothing read yet): not stalled
        log.warning(
            "reading %s: no record for %.0fs at offset %d although the partition ends at %d; "
            "reconnecting the reader",
            self.topic,
            now - self._progress_at,
            pos.offset,
            high,
        )
        self._consumer.close()
        self._consumer = self._connect()
        self._consumer.assign([TopicPartition(self.topic, 0, pos.offset)])
        self._progress_at = now

    def _check_signature(self, value: bytes, msg: Message, offset: int | None) -> None:
        """_Unverified unless ``value`` is signed by a coordinator of this job."""
        assert self._key_source is not None
        key = self._key_source()
        stamp = verify(value, key) if key is not None else None
        if stamp is not None:
            if self.replays.admit(stamp):
                self.max_epoch = max(self.max_epoch, stamp.epoch)
                return
            n = self.replays.replayed
            if n <= 10 or n % 1000 == 0:
                log.warning(
                    "skipping %s at %s offset %s: a copy of an earlier coordinator message "
                    "(epoch %d, seq %s; newest read: epoch %d, seq %s) (%d replays so far; "
                    "restrict writes to the topic with ACLs)",
                    type(msg).__name__,
                    self.topic,
                    offset,
                    stamp.epoch,
                    stamp.seq,
                    *(self.replays.last or (0, None)),
                    n,
                )
            raise _Unverified
        self.unverified += 1
        if self.unverified <= 10 or self.unverified % 1000 == 0:
            log.warning(
                "skipping %s at %s offset %s: not signed by a coordinator of this job%s "
                "(%d unverifiable so far; restrict writes to the topic with ACLs)",
                type(msg).__name__,
                self.topic,
                offset,
                "" if key is not None else " (no key in the checkpoint store yet)",
                self.unverified,
            )
        raise _Unverified

    def read_to_end(self, timeout: float = 30.0) -> list[Message]:
        """Everything up to the current end of the topic, and possibly a few messages more.

        Done when the reader reaches the end, or — on a busy topic, where a
        read_committed reader may never see an empty fetch — when it reads a record
        written after this call began (the partition is totally ordered).
        """
        return [msg for _ts, msg in self.read_to_end_timed(timeout)]

    def read_to_end_timed(self, timeout: float = 30.0) -> list[tuple[float, Message]]:
        """Like ``read_to_end``, with each message's record timestamp (epoch seconds)."""
        _low, high = self._watermarks(timeout)
        deadline = time.monotonic() + timeout
        out: list[tuple[float, Message]] = []
        eof_before = self.eof_count
        while self.eof_count == eof_before and self.last_offset < high:
            if time.monotonic() > deadline:
                raise ControlError(f"{self.topic}: end not reached within {timeout:g}s")
            out += self.poll_timed(0.05)
        return out

    def _watermarks(self, timeout: float) -> tuple[int, int]:
        """The partition's watermarks; while its leader moves (a broker died) or no
        broker answers, asked again within the outage bound (OutageExceeded past it)."""
        try:
            return watermark_offsets(self._consumer, self.topic, 0, timeout, reach=self.reach)
        except BrokerOutage as e:
            raise OutageExceeded(str(e)) from None

    def close(self) -> None:
        self._consumer.close()


class _Unverified(Exception):
    """A coordinator message whose signature does not verify, or a replay of an earlier
    one (logged and counted)."""


def _note_failure(
    failed: list[tuple[Message, KafkaError]], msg: Message, err: KafkaError | None, _rec: object
) -> None:
    """A delivery callback: note ``msg``'s failed write."""
    if err is not None:
        failed.append((msg, err))


def _log_dropped(topic: str, msg: Message, err: KafkaError | None, _rec: object) -> None:
    """A delivery callback of ``ControlClient.post_all``: log ``msg``'s failed write."""
    if err is not None:
        log.warning("control report %s to %s dropped: %s", type(msg).__name__, topic, err.str())


class ControlClient:
    """A worker's end: receive triggers and commands, send acks, declines, readies, heartbeats.

    A worker that starts late reads from the beginning (the default) to learn the
    current attempt and owners; ``from_beginning=False`` reads new messages only.
    """

    def __init__(
        self,
        bootstrap: str,
        app_id: str,
        *,
        from_beginning: bool = True,
        extra: Mapping[str, Any] | None = None,
        reachability: Reachability | None = None,
        key_source: Callable[[], bytes | None] | None = None,
    ) -> None:
        self.topic = control_topic(app_id)
        self.reach = reachability or Reachability(DEFAULT_MAX_OUTAGE)
        self._reader = ControlReader(
            bootstrap,
            app_id,
            from_beginning=from_beginning,
            extra=extra,
            reachability=self.reach,
            key_source=key_source,
        )
        self._producer = make_producer(
            bootstrap, extra={"linger.ms": 0, **(extra or {}), **NO_AUTO_CREATE}
        )

    @property
    def skipped(self) -> int:
        """Control records skipped as invalid so far."""
        return self._reader.skipped

    @property
    def unverified(self) -> int:
        """Coordinator messages skipped as not signed by a coordinator of the job, or
        as copies of earlier ones (replays)."""
        return self._reader.unverified + self._reader.replays.replayed

    def poll(self, timeout: float) -> list[Message]:
        """Control messages arriving within ``timeout`` seconds (possibly none)."""
        self._producer.poll(0)
        return self._reader.poll(timeout)

    def read_to_end(self, timeout: float = 30.0) -> list[Message]:
        """Every message up to the topic's current end (a late worker's catch-up)."""
        return self._reader.read_to_end(timeout)

    def check_outage(self) -> None:
        """OutageExceeded if the brokers have been unreachable for longer than the bound."""
        _check(self.reach)

    def send(self, msg: Message, *, flush_timeout: float = 10.0) -> None:
        """Write ``msg`` and wait until it is acknowledged by the broker.

        While the brokers are unreachable this waits (librdkafka retries the
        produce; a produce that expires is produced again, with backoff); after
        ``flush_timeout`` seconds without delivery the outage is logged once.
        OutageExceeded once it outlasts the bound; ControlError for a refusal no
        retry can cure (e.g. authorization).
        """
        self.send_all([msg], flush_timeout=flush_timeout)

    def send_all(self, msgs: Sequence[Message], *, flush_timeout: float = 10.0) -> None:
        """``send`` for several messages: written in order, one wait for all of them
        (a worker's acknowledgements of one checkpoint take one round trip, not one
        each); a message whose write failed is written again."""
        pending = list(msgs)
        backoff = Backoff()
        while pending:
            failed: list[tuple[Message, KafkaError]] = []
            for msg in pending:
                self._producer.produce(
                    self.topic,
                    encode(msg),
                    key=record_key(msg),
                    on_delivery=partial(_note_failure, failed, msg),
                )
            more = len(pending) - 1
            what = type(pending[0]).__name__ + (f" and {more} more" if more else "")
            waited = 0.0
            while self._producer.flush(1.0) > 0:
                waited += 1.0
                if waited >= flush_timeout:
                    self.reach.failed(f"{what} not delivered to {self.topic} within {waited:g}s")
                _check(self.reach)
            if not failed:
                self.reach.ok()
                return
            errors = [e for _, e in failed]
            if not all(_transient(e) for e in errors):
                raise ControlError(
                    f"writing {what} to {self.topic} failed: {[e.str() for e in errors]}"
                )
            self.reach.failed(f"writing {what} to {self.topic}: {errors[-1].str()}")
            _check(self.reach)
            time.sleep(backoff.next())
            pending = [m for m, _ in failed]

    def report(self, msg: Message) -> bool:
        """Send a worker's report best effort: one that cannot be delivered (this worker
        is cut off from the broker) is logged and dropped, and False returned. Reports
        carry no authority: a lost acknowledgement fails its checkpoint, a lost ready or
        failure makes the coordinator restore again or notice the silence — never a
        reason for the worker to die."""
        return self.report_all([msg])

    def report_all(self, msgs: Sequence[Message]) -> bool:
        """``report`` for several messages, with one wait for all of them."""
        if not msgs:
            return True
        try:
            self.send_all(msgs)
        except ControlError as e:
            names = ", ".join(type(m).__name__ for m in msgs)
            log.warning("control report %s dropped: %s", names, e)
            return False
        return True

    def post_all(self, msgs: Sequence[Message]) -> None:
        """``report_all`` without waiting for the broker: the messages are written in
        order after everything written before, and a write that fails for good is logged
        when the client learns of it (in ``poll``). For acknowledgements: a lost one
        fails its checkpoint, as with ``report_all``; the processing thread does not wait
        a round trip per checkpoint (the client retries a write until its
        ``message.timeout.ms``, and ``close`` waits for what is in flight)."""
        for msg in msgs:
            self._producer.produce(
                self.topic,
                encode(msg),
                key=record_key(msg),
                on_delivery=partial(_log_dropped, self.topic, msg),
            )
        if msgs:
            self._producer.poll(0)

    def pulse(self, msg: Message) -> None:
        """Write ``msg`` from another thread than the loop's, asking for nothing back: no
        delivery callback and no poll here, so that the loop's own waits for their
        deliveries are served by the loop alone (``kstream.worker.pulse``). One that is
        not delivered is simply missing; the next follows a moment later."""
        self._producer.produce(self.topic, encode(msg), key=record_key(msg))

    def close(self) -> None:
        self._reader.close()
        self._producer.flush(5.0)
