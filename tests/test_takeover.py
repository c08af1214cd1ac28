"""Taking the coordinator over from a silent host (kstream.protocol.takeover and rule 4 of
kstream.protocol.election), fed the control topic's pulses in their order."""

from __future__ import annotations

from kstream.protocol.elasticmessages import CoordinatorPulse, Pulse
from kstream.protocol.election import Election, ElectionCommand, ElectionPhase, Outcome
from kstream.protocol.messages import TriggerCheckpoint
from kstream.protocol.takeover import SILENCE_PULSES, HostWatch


def watch_of(me: str) -> HostWatch:
    w = HostWatch(me=me)
    assert not w.observe(Pulse(me))  # this worker's first pulse read: live from here on
    return w


def rounds(w: HostWatch, n: int, *others: object) -> list[int]:
    """``n`` rounds of the topic: ``others`` then this worker's pulse; the rounds in which
    the watch said "take over"."""
    fired = []
    for i in range(n):
        for msg in others:
            assert not w.observe(msg)
        if w.observe(Pulse(w.me)):
            fired.append(i)
    return fired


def test_a_silent_host_is_taken_over_once_after_the_silence() -> None:
    w = watch_of("b")
    assert rounds(w, 20, CoordinatorPulse("a", True), Pulse("a"), Pulse("c")) == []
    assert w.other_host()
    # a is killed: its pulses stop; b (first in line of b, c) counts its own, from the one
    # read after a's last: the 6th is that of the 5th round without a
    assert rounds(w, 20, Pulse("c")) == [SILENCE_PULSES - 2]
    assert not w.other_host()


def test_a_reader_that_reads_in_bursts_sees_no_silence_that_was_not_there() -> None:
    # The loop was busy: it reads 8 of b's pulses at once, but the host's are among them
    # in the order they were written, so the count never reaches the silence.
    w = watch_of("b")
    for _ in range(10):
        burst: list[object] = []
        for _ in range(8):
            burst += [Pulse("b"), CoordinatorPulse("a", True)]
        assert not any(w.observe(m) for m in burst)


def test_history_before_this_workers_first_pulse_names_no_host() -> None:
    # A restarted job: the compacted topic still holds a dead host's last pulse.
    w = HostWatch(me="b")
    assert not w.observe(CoordinatorPulse("old", True))
    assert rounds(w, 30, Pulse("c")) == []
    assert w.host is None and not w.other_host()


def test_a_host_that_stepped_down_is_not_taken_over() -> None:
    # A graceful stop: the election group elects the next at once.
    w = watch_of("b")
    rounds(w, 3, CoordinatorPulse("a", True))
    assert not w.observe(CoordinatorPulse("a", False))
    assert rounds(w, 30) == [] and not w.other_host()
    # the next one elected pulses: watched as any host
    assert rounds(w, 3, CoordinatorPulse("c", True)) == [] and w.other_host()


def test_this_workers_own_hosting_is_never_taken_over() -> None:
    w = watch_of("b")
    rounds(w, 2, CoordinatorPulse("b", True))
    assert rounds(w, 30) == [] and not w.other_host()


def test_the_line_the_second_waits_twice_as_long_and_the_first_ends_its_count() -> None:
    b, c = watch_of("b"), watch_of("c")
    rounds(b, 3, CoordinatorPulse("a", True), Pulse("a"), Pulse("c"))
    rounds(c, 3, CoordinatorPulse("a", True), Pulse("a"), Pulse("b"))
    # a dies; both see the same topic: b's and c's pulses
    fired_b = rounds(b, SILENCE_PULSES, Pulse("c"))
    fired_c = rounds(c, SILENCE_PULSES, Pulse("b"))
    assert fired_b == [SILENCE_PULSES - 2] and fired_c == []
    # b's coordinator pulses: c never fires
    assert rounds(c, 4 * SILENCE_PULSES, Pulse("b"), CoordinatorPulse("b", True)) == []
    assert c.host == "b" and c.other_host()


def test_when_the_first_in_line_died_with_the_host_the_next_takes_over() -> None:
    c = watch_of("c")
    rounds(c, 3, CoordinatorPulse("a", True), Pulse("a"), Pulse("b"))
    fired = rounds(c, 4 * SILENCE_PULSES)  # a and b both silent
    # b drops out of the line once silent longer than the silence: c then takes over as
    # the first, one round later than the first in line would have
    assert fired == [SILENCE_PULSES - 1]
    assert rounds(c, 10) == []  # once per silence


def test_take_over_from_standby_acts_until_the_group_elects_it() -> None:
    e = Election()
    assert not e.hosting
    assert e.take_over(1.0) == [ElectionCommand.START]
    assert (e.phase, e.hosting) == (ElectionPhase.ACTING, True)
    assert e.take_over(1.5) == []  # runs already
    assert e.assigned(True, 6.0) == []  # the group agrees: no second start
    assert (e.phase, e.running, e.elections) == (ElectionPhase.ELECTED, True, 1)


def test_an_acting_coordinator_fenced_by_another_stands_by() -> None:
    e = Election(restart_delay=0.0)
    e.take_over(1.0)
    assert e.exited(Outcome.FENCED, 2.0) == []
    assert (e.phase, e.hosting) == (ElectionPhase.STANDBY, False)
    assert e.tick(100.0) == []
    # an acting one that Kafka failed restarts as an elected one would
    e.take_over(101.0)
    e.exited(Outcome.UNAVAILABLE, 102.0)
    assert e.tick(102.0) == [ElectionCommand.START]


def test_elected_while_another_host_lives_waits_and_starts_when_it_steps_down() -> None:
    e = Election()
    assert e.assigned(True, 0.0, other_host=True) == []
    assert (e.phase, e.hosting, e.running) == (ElectionPhase.ELECTED, False, False)
    assert e.tick(5.0, other_host=True) == []
    assert e.tick(6.0, other_host=False) == [ElectionCommand.START]
    assert e.hosting


def test_elected_and_deferring_or_fenced_takes_over_when_its_watch_says_so() -> None:
    e = Election()
    e.assigned(True, 0.0, other_host=True)
    assert e.take_over(3.0) == [ElectionCommand.START]
    assert (e.phase, e.hosting) == (ElectionPhase.ELECTED, True)
    f = Election()
    f.assigned(True, 0.0)
    f.exited(Outcome.FENCED, 1.0)  # a take-over fenced ours; its host then died
    assert f.tick(50.0) == []
    assert f.take_over(51.0) == [ElectionCommand.START]
    assert f.phase is ElectionPhase.ELECTED


def test_no_take_over_once_the_election_is_done() -> None:
    e = Election()
    e.stop()
    assert e.take_over(1.0) == [] and not e.hosting


def test_the_workers_seen_silent_at_a_take_over_are_named_with_their_silence() -> None:
    w = watch_of("b")
    rounds(w, 3, CoordinatorPulse("a", True), Pulse("a"), Pulse("c"))
    assert w.silent() == {}
    fired = rounds(w, SILENCE_PULSES, Pulse("c"))
    assert fired == [SILENCE_PULSES - 2]
    # a's worker pulse was read before b's last pulse of the rounds with a: 7 of b's since
    assert w.silent() == {"a": (SILENCE_PULSES + 1) * w.every}


def test_a_host_is_alive_while_its_worker_pulses_or_a_coordinator_writes() -> None:
    """The election's pulse thread of a live host can be starved on a busy machine: its
    worker's own pulses, and any message only a live coordinator commits, count too
    (a false alarm seen under two busy loops: a coordinator moved twice)."""
    w = watch_of("b")
    rounds(w, 2, CoordinatorPulse("a", True))
    assert rounds(w, 30, Pulse("a")) == [] and w.other_host()
    assert rounds(w, 30, TriggerCheckpoint(7, 1, 0)) == [] and w.other_host()
    assert rounds(w, 30) == [SILENCE_PULSES - 2]  # everything of a's silent: taken over


def test_a_deferring_elected_candidate_follows_the_line_when_the_host_falls_silent() -> None:
    """Elected while b acts, c defers. When b falls silent, c does not start on its own
    (the first in line, a, takes over at the same moment: two starts); the host is still
    named, not stepped down, until the line's take-over pulses."""
    c = watch_of("c")
    rounds(c, 3, CoordinatorPulse("b", True), Pulse("a"), Pulse("b"))
    e = Election()
    assert e.assigned(True, 0.0, other_host=c.other_host()) == []
    assert rounds(c, SILENCE_PULSES, Pulse("a")) == []  # a is first in line
    assert not c.other_host() and c.other_host(live=False)
    assert e.tick(5.0, other_host=c.other_host(live=False)) == []
    rounds(c, 2, CoordinatorPulse("a", True), Pulse("a"))  # a took over
    assert c.other_host() and e.tick(6.0, other_host=c.other_host(live=False)) == []
