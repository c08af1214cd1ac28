"""The coordinator's end of the control topic: fenced transactional writes, signed with
the coordinator's epoch, and read_committed reads that notice a successor
(the topic, the reader and the workers' end: :mod:`kstream.kafka.control`)."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from kstream.config import Replication
from kstream.kafka.clients import (
    KafkaError,
    KafkaException,
    init_transactions,
    is_fenced,
    make_producer,
)
from kstream.kafka.control import (
    DEFAULT_MAX_OUTAGE,
    ControlError,
    ControlReader,
    CoordinatorFenced,
    _check,
    _transient,
)
from kstream.kafka.controltopic import NO_AUTO_CREATE, ensure_control_topic
from kstream.kafka.reachability import Backoff, Reachability
from kstream.names import control_topic, coordinator_transactional_id
from kstream.protocol.messages import (
    Message,
    encode,
    record_key,
)
from kstream.protocol.signing import COORDINATOR_MESSAGES, sign, verify

log = logging.getLogger(__name__)


class CoordinatorChannel:
    """The coordinator's end: fenced transactional writes, read_committed reads.

    With ``key`` (the store's control key) every write is signed with this
    coordinator's epoch — one above the newest verified epoch in the history — and a
    sequence number in it, and only verified coordinator messages newer than every
    one read before are read (a copy of an earlier one is a replay, skipped:
    :mod:`kstream.protocol.replay`). This coordinator was replaced when
    its transactional producer is fenced, or when it reads a verified message of an
    epoch at least its own that it did not write; an unverifiable record never
    decides that.
    """

    def __init__(
        self,
        bootstrap: str,
        app_id: str,
        *,
        extra: Mapping[str, Any] | None = None,
        replication: Replication | None = None,
        max_outage: float = DEFAULT_MAX_OUTAGE,
        key: bytes | None = None,
    ) -> None:
        self.app_id = app_id
        self.key = key
        self.epoch = 0
        self.seq = 0  # the number of the last message signed in this epoch
        self._bootstrap = bootstrap
        self._extra = dict(extra or {})
        self._replication = replication
        self.reach = Reachability(max_outage)
        # A transaction left open by an outage must outlive it: the broker aborts
        # (and fences) one older than this, and the retried commit would then look
        # like a successor's fencing. 15 min is the brokers' default maximum.
        txn_timeout = min(900_000, max(60_000, int((max_outage + 60) * 1000)))
        self._producer = make_producer(
            bootstrap,
            transactional_id=coordinator_transactional_id(app_id),
            extra={"transaction.timeout.ms": txn_timeout, **self._extra, **NO_AUTO_CREATE},
        )
        self._reader: ControlReader | None = None
        self._unseen: Counter[bytes] = Counter()  # our committed writes not read back yet

    @property
    def skipped(self) -> int:
        """Control records skipped as invalid so far."""
        return self._reader.skipped if self._reader else 0

    def open(self, timeout: float = 30.0) -> list[Message]:
        """Fence any predecessor, then return the control topic's history to its end.

        1. Create the topic if missing.
        2. ``init_transactions``: fences the previous coordinator and aborts its open
           transaction — *why first*: after this no zombie write can appear in what
           we read next.
        3. Read the topic from the beginning to its end (read_committed).
        """
        ensure_control_topic(self._bootstrap, self.app_id, self._extra, self._replication)
        self._fence(timeout)
        key = self.key
        self._reader = ControlReader(
            self._bootstrap,
            self.app_id,
            extra=self._extra,
            reachability=self.reach,
            key_source=(lambda: key) if key is not None else None,
        )
        history = self._reader.read_to_end(timeout)
        self.epoch, self.seq = self._reader.max_epoch + 1, 0
        return history

    def _fence(self, timeout: float) -> None:
        """``init_transactions``, asked again while it fails for a reason that passes: the
        transaction coordinator's broker was just killed (its partition of
        ``__transaction_state`` gets a new leader within seconds) or no broker answers.
        Past ``timeout`` that is an outage (logged once), bounded by --max-outage."""
        deadline = time.monotonic() + timeout
        backoff = Backoff(0.2, 5.0)
        while True:
            try:
                init_transactions(self._producer, timeout)
            except KafkaException as e:
                err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
                what = f"fencing the previous coordinator of {self.app_id!r}: {e}"
                if err is None or err.fatal() or not _transient(err):
                    raise ControlError(what) from e
                if time.monotonic() > deadline:
                    self.reach.failed(what)
                    _check(self.reach)
                time.sleep(backoff.next())
                continue
            self.reach.ok()
            return

    def poll(self, timeout: float) -> list[Message]:
        """Control messages (workers' and our own) arriving within ``timeout`` seconds."""
        if self._reader is None:
            raise ControlError("CoordinatorChannel.open() was not called")
        _check(self.reach)
        out = []
        for raw, msg in self._reader.poll_records(timeout):
            if isinstance(msg, COORDINATOR_MESSAGES):
                if self._unseen[raw] > 0:
                    self._unseen[raw] -= 1  # our own write, read back
                else:
                    # Not ours: a verified successor (noticed here even while we have
                    # nothing to write), or an unsigned write when signing is off. A
                    # copy of an earlier signed message (ours or older) never gets here:
                    # the reader skips replays (kstream.protocol.replay).
                    stamp = verify(raw, self.key) if self.key is not None else None
                    epoch = stamp.epoch if stamp is not None else None
                    if self.key is None or (epoch is not None and epoch >= self.epoch):
                        raise CoordinatorFenced(
                            f"another coordinator took over app {self.app_id!r}: it wrote "
                            f"{type(msg).__name__} to {self._reader.topic}"
                            + (f" (epoch {epoch}, ours {self.epoch})" if epoch else "")
                        )
                    continue  # a verified write of an older epoch: already superseded
            out.append(msg)
        return out

    def send(self, messages: Sequence[Message], timeout: float = 10.0) -> None:
        """Write ``messages`` in one transaction; CoordinatorFenced if another took over.

        While the brokers are unreachable the commit is retried with backoff (a
        transaction that must be aborted is aborted and written again: its records
        were never visible); OutageExceeded once the outage outlasts the bound.
        """
        if not messages:
            return
        topic = control_topic(self.app_id)
        values = [
            encode(msg) if self.key is None else sign(encode(msg), self.key, self.epoch, seq)
            for seq, msg in enumerate(messages, self.seq + 1)
        ]
        self.seq += len(messages)  # (a transaction written again keeps its numbers)
        backoff = Backoff()
        while True:
            try:
                self._producer.begin_transaction()
            except KafkaException as e:
                err = self._raise_unless_transient(e, topic)
                self.reach.failed(f"beginning a transaction on {topic}: {err.str()}")
                _check(self.reach)
                time.sleep(backoff.next())
                continue
            try:
                for msg, value in zip(messages, values, strict=True):
                    self._producer.produce(topic, value, key=record_key(msg))
            except KafkaException as e:
                self._raise_unless_transient(e, topic)
                self._abort(topic, timeout, backoff)
                continue
            if self._commit(topic, timeout, backoff):
                self._unseen.update(values)
                self.reach.ok()
                return
            # The transaction was aborted: write it again.

    def _commit(self, topic: str, timeout: float, backoff: Backoff) -> bool:
        """Commit the open transaction, retrying while the brokers are away; False if it
        had to be aborted instead (nothing of it is visible)."""
        while True:
            try:
                self._producer.commit_transaction(timeout)
                return True
            except KafkaException as e:
                err = self._raise_unless_transient(e, topic)
                self.reach.failed(f"committing to {topic}: {err.str()}")
                _check(self.reach)
                time.sleep(backoff.next())
                if err.txn_requires_abort():
                    self._abort(topic, timeout, backoff)
                    return False
                # retriable: commit_transaction may be called again

    def _abort(self, topic: str, timeout: float, backoff: Backoff) -> None:
        while True:
            try:
                self._producer.abort_transaction(timeout)
                return
            except KafkaException as e:
                err = self._raise_unless_transient(e, topic)
                self.reach.failed(f"aborting a transaction on {topic}: {err.str()}")
                _check(self.reach)
                time.sleep(backoff.next())

    def _raise_unless_transient(self, e: KafkaException, topic: str) -> KafkaError:
        """The error of ``e`` if retrying (or aborting and retrying) can cure it."""
        err: KafkaError = e.args[0]
        if is_fenced(err) or err.fatal():
            raise CoordinatorFenced(
                f"another coordinator took over app {self.app_id!r} "
                f"(transactional id {coordinator_transactional_id(self.app_id)!r} "
                f"was fenced: {err.str()})"
            ) from e
        if err.txn_requires_abort() or _transient(err):
            return err
        raise ControlError(f"writing to {topic} failed: {err.str()}") from e

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
        try:
            self._producer.flush(5.0)
        except KafkaException as e:  # fenced (or fatal): nothing of ours goes out any more
            log.info("coordinator's producer closed without flushing: %s", e.args[0].str())
