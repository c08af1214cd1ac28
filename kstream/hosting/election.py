"""The coordinator elected among workers (``kstream worker --coordinator auto``).

:class:`ElectedCoordinator` runs in a worker process beside the worker loop: a
consumer in the group ``<app>.coordinator`` subscribed to the one-partition topic
``<app>.coordinator-election``; while Kafka assigns this member that partition, the
job's coordinator (:func:`kstream.hosting.startup.coordinate`: the same as every
mode's) runs in a thread
here. The decisions are :class:`kstream.protocol.election.Election`'s; this
module only feeds it and carries out its commands.

A hand-over on revocation is clean: the partition is only given to the next member
after ``on_revoke`` returned, and it returns once our coordinator stopped. A member
that loses its session without being able to say so (a cut link) is fenced by the
next coordinator's ``init_transactions`` on the fixed transactional id.

With cooperative assignment (``member`` given: the worker's member id), the host also
writes ``CoordinatorPulse`` every ``PULSE_S`` from a thread of its own, and every
candidate reads the control topic's pulses and coordinator messages into a
:class:`kstream.protocol.takeover.HostWatch` — with a reader of its own that also reads
open transactions: a killed coordinator's open transaction holds every read_committed
reader (the worker loops') until the next coordinator fences it, so a committed reader
would see no silence. A candidate that finds the host silent takes the coordinator over
at once, before the group's session expires (rule 4 of :mod:`kstream.protocol.election`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaException

from kstream.config import JobConfig
from kstream.hosting.coordinator import EXIT_USAGE
from kstream.hosting.startup import Coordination, coordinate
from kstream.kafka.clients import (
    TopicSpec,
    ensure_topics,
    make_admin,
    make_consumer,
    make_producer,
)
from kstream.kafka.control import ControlReader
from kstream.names import control_topic, election_group, election_topic
from kstream.protocol.elasticmessages import CoordinatorPulse, Pulse
from kstream.protocol.election import Election, ElectionCommand, ElectionPhase, Outcome
from kstream.protocol.messages import Message, encode, record_key
from kstream.protocol.signing import COORDINATOR_MESSAGES
from kstream.protocol.takeover import HostWatch
from kstream.worker.pulse import PULSE_S

log = logging.getLogger(__name__)

#: The record keys' types a candidate's watch reads (``record_key``: the type first).
WATCHED_KEYS = frozenset(
    t.__name__.encode() for t in (Pulse, CoordinatorPulse, *COORDINATOR_MESSAGES)
)

#: How often a candidate heartbeats the election group: how long, at most, the next
#: coordinator waits after the elected one left (a heartbeat is a few bytes a member).
ELECTION_HEARTBEAT_MS = 500

#: The election group's session: how long after its host's death (kill -9, a lost
#: machine) the next coordinator is elected — the shortest a broker accepts by default
#: (``group.min.session.timeout.ms``). The workers' own group keeps ``--session-timeout``:
#: a candidate's heartbeats come from librdkafka's thread, which a busy Python loop does
#: not hold up, and a false alarm only moves the coordinator (the next one fences it).
ELECTION_SESSION_MS = 6000


def leave(consumer: Any) -> None:
    """Close a candidate's consumer so that the group forgets it at once.

    librdkafka (2.16) sends no LeaveGroup when a cooperative member that holds no
    partition closes: the group keeps it until its session times out, and every
    rebalance until then — the next election among them — waits for it to rejoin
    (measured: the next coordinator elected 9.2 s after the elected one left, against
    0.2-1.0 s; benchmarks/ELASTIC.md). ``unsubscribe()`` first does leave.
    """
    try:
        consumer.unsubscribe()
    except KafkaException as e:  # no cluster to tell: close() still releases the client
        log.warning("coordinator election: leaving the group failed: %s", e)
    consumer.close()


class ElectedCoordinator:
    """Hosts the job's coordinator in this process while this process is elected."""

    def __init__(
        self,
        job: JobConfig,
        coordination: Coordination,
        *,
        heartbeat_timeout: float = 10.0,
        restart_delay: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        on_refused: Callable[[], None] = lambda: None,
        member: Callable[[], str] | None = None,
    ) -> None:
        self.job = job
        # Cooperative assignment: this worker's member id; pulses and take-overs (rule 4).
        self.member = member
        self.watch = HostWatch(every=PULSE_S)
        self._silent: dict[str, float] = {}  # seen at a take-over, for that coordinator
        self._take_over = threading.Event()  # set by observe(), from our watch's reader
        self._pulse_thread: threading.Thread | None = None
        self._producer: Any = None  # CoordinatorPulse's, made when the pulse thread starts
        self._pulse_lock = threading.Lock()
        self._said = False  # our last CoordinatorPulse said we host
        self._pulse_done = threading.Event()
        if member is not None:
            self._pulse_thread = threading.Thread(
                target=self._pulse, name="coordinator-pulse", daemon=True
            )
        self.coordination = coordination
        self.on_refused = on_refused
        self.heartbeat_timeout = heartbeat_timeout
        self.clock = clock
        self.election = Election(restart_delay=restart_delay)
        self._stop = threading.Event()
        self._coord_stop = threading.Event()
        self._coord: threading.Thread | None = None
        self._outcome: Outcome | None = None
        self._thread = threading.Thread(target=self._run, name="election", daemon=True)
        self.job_failed = threading.Event()  # our coordinator failed the job
        # Our coordinator refused the state to restore (exit 2): the job cannot run as
        # deployed; on_refused stops this process's worker (as `kstream run` does).
        self.refused = threading.Event()

    @property
    def active(self) -> bool:
        """Whether this process hosts the running coordinator now."""
        return self._coord is not None and self._coord.is_alive()

    def start(self) -> None:
        """Join the candidates (in a background thread)."""
        self._thread.start()
        if self._pulse_thread is not None:
            self._pulse_thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Leave the candidates; stops our coordinator first if it runs."""
        self._stop.set()
        self._thread.join(timeout)
        self._pulse_done.set()
        if self._pulse_thread is not None:
            self._pulse_thread.join(timeout)

    def observe(self, msg: Message) -> None:
        """A control message read by our watch's reader (cooperative only)."""
        if self.member is None:
            return
        self.watch.me = self.member()
        if self.watch.observe(msg):
            log.warning(
                "coordinator election: the coordinator's host %s is silent; taking over",
                self.watch.host,
            )
            self._silent = self.watch.silent()
            self._take_over.set()

    def _pulse(self) -> None:
        """While we host the coordinator, say so every PULSE_S; once more when we stop."""
        try:  # connected before a take-over needs it: the others wait for our first pulse
            with self._pulse_lock:
                producer = self._pulse_producer()
            producer.list_topics(control_topic(self.job.app_id), timeout=10.0)
        except Exception as e:  # (connected at the first pulse instead)
            log.debug("coordinator pulse producer not ready: %s", e)
        while not self._pulse_done.is_set():
            self._say(self.election.hosting and not self._stop.is_set())
            self._pulse_done.wait(PULSE_S)
        self._say(False)
        if self._producer is not None:
            self._producer.flush(5.0)

    def _say(self, hosting: bool, flush: bool = False) -> None:
        """Write ``CoordinatorPulse`` (any thread): while hosting, and the first time after."""
        if self.member is None:
            return
        member = self.member()
        with self._pulse_lock:
            if not member or not (hosting or self._said):
                return
            try:
                producer = self._pulse_producer()
                msg = CoordinatorPulse(member, hosting)
                producer.produce(control_topic(self.job.app_id), encode(msg), key=record_key(msg))
                producer.poll(0)
                if flush:
                    producer.flush(2.0)
                self._said = hosting
            except Exception as e:  # (the coordinator's own writes report an outage)
                log.debug("coordinator pulse not written: %s", e)

    def _pulse_producer(self) -> Any:
        """The producer of our ``CoordinatorPulse`` (made once; call under the lock)."""
        if self._producer is None:
            self._producer = make_producer(self.job.bootstrap_servers, extra=self.job.kafka)
        return self._producer

    def _stepped_down(self) -> None:
        """Our coordinator stopped: say so before the group elects the next candidate,
        which would otherwise defer to our pulses for a moment (rule 4)."""
        if not self.election.hosting:
            self._say(False, flush=True)

    # ---------------------------------------------------------------- the loop

    def _run(self) -> None:
        job = self.job
        topic = election_topic(job.app_id)
        try:
            ensure_topics(make_admin(job.bootstrap_servers, job.kafka), [TopicSpec(topic, 1)])
        except Exception as e:  # Kafka unreachable now: the consumer below keeps trying
            log.warning("creating the election topic %s failed: %s", topic, e)
        consumer = make_consumer(
            job.bootstrap_servers,
            election_group(job.app_id),
            extra={
                **job.kafka,
                "session.timeout.ms": ELECTION_SESSION_MS,
                # When the elected member leaves, the next one is elected once every
                # member has rejoined, and each learns of the leave at its next
                # heartbeat: the interval bounds the election (benchmarks/ELASTIC.md).
                "heartbeat.interval.ms": ELECTION_HEARTBEAT_MS,
                # Sticky: a member joining or leaving does not move the coordinator.
                "partition.assignment.strategy": "cooperative-sticky",
            },
        )

        # Incremental (cooperative) rebalancing: callbacks name only what changes.
        def ours(parts: list[Any]) -> bool:
            return any(p.topic == topic and p.partition == 0 for p in parts)

        def on_assign(_c: Any, parts: list[Any]) -> None:
            if ours(parts):
                other = self.watch.other_host()
                if other:
                    log.info("coordinator election: elected; %s hosts it still", self.watch.host)
                self._execute(self.election.assigned(True, self.clock(), other))

        def on_revoke(_c: Any, parts: list[Any]) -> None:
            if ours(parts):
                self._execute(self.election.revoked(self.clock()))
                self._stepped_down()  # before the partition goes to the next candidate

        def on_lost(_c: Any, parts: list[Any]) -> None:
            if ours(parts):
                log.warning("coordinator election: session lost (no contact with the group)")
                self._execute(self.election.revoked(self.clock()))

        consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
        watching = self._watch_reader()
        try:
            while not self._stop.is_set() and self.election.phase is not ElectionPhase.DONE:
                consumer.poll(0.2)  # no records are ever written: membership only
                self._watch(watching)
                self._reap()
                if self._take_over.is_set():
                    self._take_over.clear()
                    silent, self._silent = self._silent, {}
                    self._execute(self.election.take_over(self.clock()), silent)
                    self._say(self.election.hosting)  # at once: the next in line waits on it
                # (a deferring one starts when the host stepped down, or takes over)
                self._execute(self.election.tick(self.clock(), self.watch.other_host(False)))
        finally:
            self._execute(self.election.stop())
            self._stepped_down()
            leave(consumer)  # the next candidate is elected once the others rejoined
            if watching is not None:
                watching.close()
            log.info("coordinator election: left the candidates")

    def _watch_reader(self) -> ControlReader | None:
        """The control topic from its end, open transactions too, only the records the
        watch reads (by their keys: no acknowledgement is decoded here)."""
        if self.member is None:
            return None
        return ControlReader(
            self.job.bootstrap_servers,
            self.job.app_id,
            from_beginning=False,
            extra=self.job.kafka,
            read_committed=False,
            keys=lambda key: key is not None and key.split(b":", 1)[0] in WATCHED_KEYS,
        )

    def _watch(self, reader: ControlReader | None) -> None:
        if reader is None:
            return
        try:
            for msg in reader.poll(0.0, 1000):
                self.observe(msg)
        except Exception as e:  # an outage: the coordinator's own reads report it
            log.debug("coordinator election: reading the control topic failed: %s", e)

    def _execute(
        self, commands: list[ElectionCommand], silent: dict[str, float] | None = None
    ) -> None:
        """Carry ``commands`` out; ``silent``: the workers a take-over saw silent (None: no
        take-over)."""
        for command in commands:
            if command is ElectionCommand.START:
                self._start_coordinator(silent)
            else:
                self._stop_coordinator()

    def _start_coordinator(self, silent: dict[str, float] | None) -> None:
        log.info(
            "coordinator election: %s (%d time(s)); starting the coordinator of %r",
            "acting" if self.election.phase is ElectionPhase.ACTING else "elected",
            self.election.elections,
            self.job.app_id,
        )
        self._coord_stop.clear()
        self._outcome = None
        self._coord = threading.Thread(
            target=self._coordinate, args=(silent,), name="coordinator", daemon=True
        )
        self._coord.start()

    def _coordinate(self, silent: dict[str, float] | None) -> None:
        try:
            code = coordinate(
                self.job,
                self.coordination,
                heartbeat_timeout=self.heartbeat_timeout,
                should_stop=lambda: self._coord_stop.is_set() or self._stop.is_set(),
                detailed=True,
                silent=silent,
            )
            known = {o.value for o in Outcome}
            if code == EXIT_USAGE:  # as final as a failed job; the reason is logged
                self.refused.set()
                self.on_refused()
                code = Outcome.JOB_FAILED.value
            self._outcome = Outcome(code) if code in known else Outcome.UNAVAILABLE
        except Exception:  # reported, then restarted while still elected
            log.exception("the elected coordinator of %r crashed", self.job.app_id)
            self._outcome = Outcome.UNAVAILABLE

    def _stop_coordinator(self, timeout: float = 30.0) -> None:
        coord = self._coord
        if coord is None:
            return
        log.info("coordinator election: no longer elected; stopping the coordinator")
        self._coord_stop.set()
        coord.join(timeout)
        if coord.is_alive():  # blocked on Kafka: fencing stops whatever it still tries
            log.error("the coordinator did not stop within %.0f s; leaving it to fencing", timeout)
            return
        self._reap()

    def _reap(self) -> None:
        coord = self._coord
        if coord is None or coord.is_alive():
            return
        self._coord = None
        outcome = self._outcome or Outcome.UNAVAILABLE
        if outcome is Outcome.JOB_FAILED:
            self.job_failed.set()
        log.info("coordinator election: our coordinator ended (%s)", outcome.name.lower())
        self._execute(self.election.exited(outcome, self.clock()))
