"""The coordinator election's decisions (kstream.protocol.election), fed events and a clock."""

from __future__ import annotations

from kstream.protocol.election import Election, ElectionCommand, ElectionPhase, Outcome


def test_elected_starts_the_coordinator_once() -> None:
    e = Election()
    assert e.assigned(False, 0.0) == []
    assert e.phase is ElectionPhase.STANDBY
    assert e.assigned(True, 1.0) == [ElectionCommand.START]
    assert e.assigned(True, 2.0) == []  # a rebalance that keeps us elected changes nothing
    assert e.tick(3.0) == []
    assert (e.phase, e.running, e.elections) == (ElectionPhase.ELECTED, True, 1)


def test_revoked_or_lost_stops_it_and_a_late_exit_does_not_restart() -> None:
    e = Election()
    e.assigned(True, 0.0)
    assert e.revoked(1.0) == [ElectionCommand.STOP]
    assert e.phase is ElectionPhase.STANDBY
    assert e.exited(Outcome.STOPPED, 1.5) == []
    assert e.tick(10.0) == []
    assert e.revoked(11.0) == []  # nothing runs: nothing to stop


def test_reelected_while_the_old_coordinator_still_stops_starts_after_it_exited() -> None:
    e = Election()
    e.assigned(True, 0.0)
    e.revoked(1.0)  # STOP issued, but the thread has not ended yet
    assert e.assigned(True, 2.0) == []  # never two coordinators of ours at once
    assert e.exited(Outcome.STOPPED, 3.0) == []
    assert e.tick(3.0) == [ElectionCommand.START]
    assert e.elections == 2


def test_unavailable_restarts_after_a_doubling_delay_while_elected() -> None:
    e = Election(restart_delay=2.0, max_restart_delay=5.0)
    e.assigned(True, 0.0)
    e.exited(Outcome.UNAVAILABLE, 5.0)
    assert e.tick(6.9) == []
    assert e.tick(7.0) == [ElectionCommand.START]
    assert e.running
    e.exited(Outcome.UNAVAILABLE, 10.0)
    assert e.tick(13.9) == [] and e.tick(14.0) == [ElectionCommand.START]  # 4 s
    e.exited(Outcome.UNAVAILABLE, 20.0)
    assert e.tick(24.9) == [] and e.tick(25.0) == [ElectionCommand.START]  # capped at 5 s


def test_fenced_stands_by_until_the_next_rebalance() -> None:
    e = Election(restart_delay=0.0)
    e.assigned(True, 0.0)
    e.exited(Outcome.FENCED, 1.0)
    assert e.phase is ElectionPhase.FENCED
    assert e.tick(100.0) == []  # restarting would fence the coordinator that fenced us
    assert e.assigned(False, 101.0) == []
    assert e.assigned(True, 102.0) == [ElectionCommand.START]  # elected again in a later generation


def test_a_failed_job_or_a_stop_ends_the_election() -> None:
    e = Election()
    e.assigned(True, 0.0)
    e.exited(Outcome.JOB_FAILED, 1.0)
    assert e.phase is ElectionPhase.DONE
    assert e.tick(100.0) == [] and e.assigned(True, 101.0) == []
    e2 = Election()
    e2.assigned(True, 0.0)
    assert e2.stop() == [ElectionCommand.STOP]
    assert e2.exited(Outcome.STOPPED, 1.0) == [] and e2.tick(2.0) == []
