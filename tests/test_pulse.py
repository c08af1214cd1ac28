"""A cooperative worker's pulse (docs/design.md §6.8, kstream.worker.pulse): a thread
writes ``Pulse(member)`` every quarter second; the coordinator carries the tasks of a
worker that pulses after ``PULSED_CARRY_S`` of silence instead of ``CARRY_AFTER_S``, and a
busy loop whose heartbeats lag is not carried while its process pulses. Pure coordinator
tests with a fake clock, and the thread against a fake writer."""

from __future__ import annotations

import threading

from kstream.protocol.carrying import CARRY_AFTER_S, PULSED_CARRY_S
from kstream.protocol.failover import JobPhase
from kstream.protocol.messages import Heartbeat, Message, Pulse, Restore, Resume, decode, encode
from kstream.worker.pulse import PulseThread
from tests.test_adoption import LIVE, cycle
from tests.test_carrying import ISOLATED, OWNERS, completed, handle, job, metadata
from tests.test_coordinator import Harness, messages


def test_a_pulsing_worker_that_falls_silent_is_carried_within_a_second() -> None:
    h = job(cooperative=True)
    messages(h.send(Pulse("w2"), 1.6))  # its last sign of life
    out = cycle(h, 2.0, 1.6 + PULSED_CARRY_S - 0.05, LIVE)
    assert not h.c.carried.members and not completed(out)  # (waiting for b)
    out = cycle(h, 2.5, 3.0, LIVE)
    assert h.c.carried.members == {"w2": ("b",)}
    assert PULSED_CARRY_S < CARRY_AFTER_S
    done = completed(out)
    assert done and all(metadata(h, n).tasks["b"].handle == handle("b", 1) for n in done)


def test_a_busy_loop_is_not_carried_while_its_process_pulses() -> None:
    """w2's loop sends no heartbeat for 6 s (one long batch, say) while its pulse thread
    writes on: never carried; its acknowledgements complete the checkpoints."""
    h = job(cooperative=True)
    t = 2.0
    while t <= 7.5:
        messages(h.send(Pulse("w2"), t))
        t = round(t + 0.25, 3)
    out = cycle(h, 2.0, 7.5, LIVE, acked={**LIVE, "w2": ("b",)})
    assert not h.c.carried.members
    done = completed(out)
    assert done and all(metadata(h, n).tasks["b"].handle == handle("b", n) for n in done)
    assert h.c.phase is JobPhase.RUNNING and h.c.attempt == 1


def test_a_process_that_pulses_but_whose_loop_hangs_is_lost_at_the_heartbeat_timeout() -> None:
    h = job(cooperative=True)
    out: list[Message] = []
    t = 2.0
    while t <= 1.5 + h.c.heartbeat_timeout + 1.0:
        out += messages(h.send(Pulse("w2"), t))
        out += cycle(h, t, t, LIVE)
        t = round(t + 0.5, 3)
    assert [m.attempt for m in out if isinstance(m, Restore)] == [2]
    assert h.c.failover.failure_reason.startswith("worker w2 lost: no heartbeat")


def test_a_carried_worker_that_pulses_again_is_carried_no_more() -> None:
    h = job(cooperative=True)
    messages(h.send(Pulse("w2"), 1.6))
    cycle(h, 2.0, 3.0, LIVE)
    assert "w2" in h.c.carried.members
    messages(h.send(Pulse("w2"), 3.2))  # (stalled, not dead)
    assert not h.c.carried.members and not h.c.carried.snapshots


def test_a_pulse_is_one_small_message() -> None:
    assert decode(encode(Pulse("w1"))) == Pulse("w1")
    assert len(encode(Pulse("w1"))) < 80
    assert Heartbeat("w1", (), 1) != Pulse("w1")


def test_the_pulse_thread_writes_once_it_knows_its_member_and_stops_when_closed() -> None:
    written: list[Message] = []
    three = threading.Event()

    def send(msg: Message) -> None:
        written.append(msg)
        if len(written) >= 3:
            three.set()

    pulse = PulseThread(send, every=0.01)
    pulse.start()
    try:
        assert not three.wait(0.05)  # (no member yet: nothing written)
        assert written == []
        pulse.member = "w7"
        assert three.wait(10.0)
    finally:
        pulse.close()
    count = len(written)
    assert set(written) == {Pulse("w7")}
    assert not pulse._thread.is_alive() and len(written) == count


def test_no_silence_is_judged_at_a_tick_after_the_coordinators_own_stall() -> None:
    """The coordinator's loop stalled 1.5 s (a busy machine): the pulses written meanwhile
    are not read yet, so its next tick carries nobody; the one after the read does not
    either. Before, every worker was carried and heard again a millisecond later."""
    h = job(cooperative=True)
    for t in (1.6, 1.85, 2.1):
        for m in ("w1", "w2", "w3"):
            messages(h.send(Pulse(m), t))
    messages(h.tick(2.2))
    messages(h.send(Pulse("w1"), 3.65))  # (the first poll after the stall read only w1's)
    messages(h.tick(3.7))  # (1.5 s after the last tick)
    assert not h.c.carried.members
    for m in ("w1", "w2", "w3"):
        messages(h.send(Pulse(m), 3.75))
    messages(h.tick(3.8))
    assert not h.c.carried.members


def test_an_adopter_carried_by_a_false_alarm_mid_adoption_goes_on_adopting() -> None:
    """w4 adopts b and is restoring it (its heartbeats do not name b yet) when it is silent
    for over a second; heard again, its adoption goes on — no failover over the heartbeat
    that lacks b — and b stays carried until a checkpoint has w4's own snapshot of it."""
    from kstream.protocol.messages import AdoptRequest, TasksReleased

    h = job(cooperative=True)
    cycle(h, 1.5, 2.5, {"w1": ("a",), "w2": ("b",), "w3": ("c",)})
    messages(h.send(TasksReleased("w2", 1, 4, ("b",)), 2.6))
    messages(h.send(AdoptRequest("w4", 1, 6, ("b",)), 2.7))
    messages(h.send(Pulse("w4"), 2.8))
    messages(h.send(Heartbeat("w4", (), 6), 2.8))
    runs = {"w1": ("a",), "w2": (), "w3": ("c",)}
    cycle(h, 3.0, 4.0, runs, generation=6)
    assert "w4" in h.c.carried.members  # (silent since 2.8: a false alarm)
    out = messages(h.send(Heartbeat("w4", (), 6), 4.1))  # heard again, b still restoring
    assert not [m for m in out if isinstance(m, Restore)]
    assert h.c.carried.adopted == {"b": "w4"} and "b" in h.c.carried.snapshots
    out = cycle(h, 4.5, 8.0, {**runs, "w4": ("b",)}, generation=6)
    assert not [m for m in out if isinstance(m, Restore)]
    assert h.c.phase is JobPhase.RUNNING and h.c.attempt == 1
    done = completed(out)
    assert done and metadata(h, done[-1]).tasks["b"].handle == handle("b", done[-1])


def test_a_coordinator_elected_after_its_hosts_kill_carries_the_owner_that_never_pulses() -> None:
    """The elected coordinator's host was killed with its worker (w2): the next
    coordinator never hears w2. Every owner of a cooperative job pulses, so from its
    start each counts as having pulsed then, and w2 is carried after ``PULSED_CARRY_S``:
    the checkpoints complete without it while the group has yet to give its partitions
    away (before, they waited for that: the worker group's session, 10 s)."""
    from tests.test_release import completed_at_1

    for cooperative in (True, False):
        history: list[Message] = [Resume(1, dict(OWNERS))]
        h = Harness(tasks=OWNERS, history=history, description=ISOLATED, cooperative=cooperative)
        h.start(0.0)
        h.c.latest_completed = completed_at_1()
        out: list[Message] = []
        t = 0.0
        while t <= 5.0:
            for member in LIVE:
                out += messages(h.send(Pulse(member), t))
            out += cycle(h, t, t, LIVE)
            if t == PULSED_CARRY_S - 0.25:
                assert not h.c.carried.members
            t = round(t + 0.25, 3)
        if not cooperative:  # (no pulses: a member never heard is not judged)
            assert not h.c.carried.members and not completed(out)
            continue
        assert h.c.carried.members == {"w2": ("b",)}
        done = completed(out)
        assert done and all(metadata(h, n).tasks["b"].handle == handle("b", 1) for n in done)
        assert h.c.phase is JobPhase.RUNNING and h.c.attempt == 1


def test_a_coordinator_that_took_over_carries_the_worker_its_candidate_saw_silent_at_once() -> None:
    """A candidate took the coordinator over after the host (w2) was silent 1.5 s
    (``HostWatch.silent``): its coordinator counts w2 as having pulsed that long before
    its start, so w2 is carried at its first tick that judges silences (the second:
    ``STALL_S``) instead of ``PULSED_CARRY_S`` after its start; the live workers, which it
    does not name, are not."""
    from tests.test_release import completed_at_1

    history: list[Message] = [Resume(1, dict(OWNERS))]
    h = Harness(tasks=OWNERS, history=history, description=ISOLATED, cooperative=True)
    h.run(h.c.start(0.0, {"w2": 1.5}), 0.0)
    h.c.latest_completed = completed_at_1()
    out: list[Message] = []
    t = 0.0
    while t <= 2.0:
        if t == 0.5:
            assert h.c.carried.members == {"w2": ("b",)} and PULSED_CARRY_S > 0.5
        for member in LIVE:
            out += messages(h.send(Pulse(member), t))
        out += cycle(h, t, t, LIVE)
        t = round(t + 0.25, 3)
    assert h.c.carried.members == {"w2": ("b",)}  # and no one else
    assert completed(out) and h.c.phase is JobPhase.RUNNING and h.c.attempt == 1


def test_a_coordinator_that_took_over_checkpoints_at_once_an_elected_one_after_its_interval() -> (
    None
):
    """Every task's output has waited since the dead host's last completion: a coordinator
    that took over triggers at its first tick; one started by its election (a job's
    start, a graceful move) an interval after its start, as before."""
    from tests.test_carrying import trigger_of
    from tests.test_release import completed_at_1

    for took_over in (True, False):
        history: list[Message] = [Resume(1, dict(OWNERS))]
        h = Harness(tasks=OWNERS, history=history, description=ISOLATED, cooperative=True)
        h.run(h.c.start(0.0, {"w2": 1.5} if took_over else None), 0.0)
        h.c.latest_completed = completed_at_1()
        first = trigger_of(h.tick(0.05))
        assert (first is not None) is took_over, (took_over, first)
