"""The coordinator's retention thread: requests run off the caller, coalesce, finish at close."""

from __future__ import annotations

import threading

import pytest

from kstream.hosting.retention_thread import RetentionThread


class Gate:
    """An ``apply`` that records its calls and blocks until released."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.threads: list[str] = []
        self.entered = threading.Semaphore(0)
        self.release = threading.Event()
        self.fail_next = False

    def __call__(self, retained: int) -> None:
        self.calls.append(retained)
        self.threads.append(threading.current_thread().name)
        self.entered.release()
        assert self.release.wait(10), "never released"
        if self.fail_next:
            self.fail_next = False
            raise ValueError("boom")


def running(gate: Gate, retained: int) -> RetentionThread:
    """A retention thread whose run of ``gate`` for ``retained`` has started (and blocks)."""
    r = RetentionThread(gate)
    r.request(retained)
    assert gate.entered.acquire(timeout=10)
    return r


def test_a_request_returns_at_once_and_runs_on_the_retention_thread() -> None:
    gate = Gate()
    r = running(gate, 3)  # the request returned although the run blocks
    assert not r.idle(0)
    gate.release.set()
    assert r.idle(10)
    assert gate.calls == [3] and gate.threads == ["retention"]
    r.close()


def test_requests_during_a_run_coalesce_into_one_more_run_with_the_latest_value() -> None:
    gate = Gate()
    r = running(gate, 3)
    r.request(4)
    r.request(5)
    gate.release.set()
    assert r.idle(10)
    assert gate.calls == [3, 5]
    r.close()


def test_a_failing_run_is_logged_and_later_runs_still_happen(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gate = Gate()
    gate.fail_next = True
    gate.release.set()
    r = RetentionThread(gate)
    r.request(2)
    assert r.idle(10)
    assert "retention (keep 2) failed" in caplog.text
    r.request(3)
    assert r.idle(10)
    assert gate.calls == [2, 3]
    r.close()


def test_close_finishes_the_requested_runs_first() -> None:
    gate = Gate()
    r = running(gate, 3)
    r.request(1)
    closer = threading.Thread(target=r.close)
    closer.start()
    closer.join(0.05)
    assert closer.is_alive(), "close returned while a run was in progress"
    gate.release.set()
    closer.join(10)
    assert not closer.is_alive()
    assert gate.calls == [3, 1]
    with pytest.raises(RuntimeError):
        r.request(2)


def test_close_gives_up_after_its_timeout_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    gate = Gate()
    r = running(gate, 3)
    r.close(timeout=0.01)
    assert "left unfinished" in caplog.text
    gate.release.set()


def test_close_without_any_request_runs_nothing() -> None:
    gate = Gate()
    r = RetentionThread(gate)
    r.close()
    assert gate.calls == []
