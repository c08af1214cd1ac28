"""Restart strategies: exponential delay by default, fixed count with ``max_restarts``."""

from __future__ import annotations

import itertools

from kstream.config import RestartStrategy
from kstream.protocol.commands import Fail, Send
from kstream.protocol.failover import FailoverController, JobPhase
from kstream.protocol.messages import Restore, Resume, TaskReady


def _restart_times(ctl: FailoverController, failures: list[float]) -> list[float]:
    """Fail at each time (when running), then tick in 0.1 s steps: when each restore starts."""
    starts: list[float] = []
    t = 0.0
    for at in failures:
        t = max(t, at)
        assert ctl.on_failure("boom", t) == []
        while True:
            cmds = ctl.tick(t, None)
            if cmds:
                assert cmds == [Send(Restore(ctl.attempt, None))]
                starts.append(round(t, 1))
                break
            t = round(t + 0.1, 1)
        resumed = ctl.on_ready(TaskReady(ctl.attempt, "a", "w", 0))  # every task ready again
        assert resumed == [Send(Resume(ctl.attempt, {"a": "w"}))]
    return starts


def test_the_default_doubles_the_delay_up_to_a_minute_and_never_gives_up() -> None:
    ctl = FailoverController(frozenset({"a"}), RestartStrategy())
    # A failure right after every restart (a crash loop): 0, then 1 s, 2 s, 4 s ... 60 s apart.
    starts = _restart_times(ctl, [0.0] * 12)
    gaps = [round(b - a, 1) for a, b in itertools.pairwise(starts)]
    assert starts[0] == 0.0
    assert gaps == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0, 60.0, 60.0]
    assert ctl.phase is JobPhase.RUNNING  # 12 restarts: the job is still alive


def test_a_quiet_period_resets_the_delay() -> None:
    ctl = FailoverController(frozenset({"a"}), RestartStrategy(reset_after=300.0))
    starts = _restart_times(ctl, [0.0, 0.0, 0.0])
    assert starts == [0.0, 1.0, 3.0]
    # 300 s after the last restart: at once again, then 1 s.
    assert _restart_times(ctl, [303.0, 303.0]) == [303.0, 304.0]


def test_many_spread_out_restarts_never_fail_the_job() -> None:
    ctl = FailoverController(frozenset({"a"}), RestartStrategy())
    starts = _restart_times(ctl, [i * 30.0 for i in range(40)])  # a rolling deploy every 30 s
    assert len(starts) == 40 and ctl.phase is JobPhase.RUNNING


def test_fixed_count_stays_available() -> None:
    ctl = FailoverController(
        frozenset({"a"}), RestartStrategy(max_restarts=2, window=100.0, delay=0.5)
    )
    assert _restart_times(ctl, [0.0, 1.0]) == [0.0, 1.0]
    cmds = ctl.on_failure("boom", 2.0)
    assert isinstance(cmds[-1], Fail) and ctl.phase is JobPhase.FAILED
    assert "restart strategy exhausted: 2 restarts within 100s (max_restarts=2)" in cmds[-1].reason
