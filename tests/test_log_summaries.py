"""Repeated events are summarised, not logged once a second: dead letters while bad input
keeps coming, checkpoint completions at a short interval."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from kstream.config import OnBadRecord
from kstream.kafka.dlq import DeadLetterWriter
from kstream.protocol.completionlog import CompletionLog


class _Producer:
    """What the writer asks of its producer: accepted at once, nothing left to flush."""

    def produce(self, *_a: Any, **_kw: Any) -> None:
        pass

    def poll(self, _t: float = 0) -> int:
        return 0

    def flush(self, _t: float = 0) -> int:
        return 0

    def __len__(self) -> int:
        return 0


def test_dead_letters_are_logged_at_once_then_once_a_minute_then_at_close(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [1000.0]
    dlq = DeadLetterWriter("app", "127.0.0.1:1", OnBadRecord.DEAD_LETTER, clock=lambda: now[0])
    dlq._producer = _Producer()  # type: ignore[assignment]  # the stand-in
    caplog.set_level(logging.WARNING, logger="kstream.kafka.dlq")
    for second in range(150):  # two bad records a second for 150 s, a flush a second
        now[0] = 1000.0 + second
        dlq.handle("clicks", 0, 2 * second, 0, None, b"x", "not JSON")
        dlq.handle("clicks", 1, 2 * second, 0, None, b"y", "not JSON")
        dlq.flush()
    dlq.close()
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "2 records sent to dead-letter topic app.dlq since start (clicks: 2)",
        "122 records sent to dead-letter topic app.dlq since start, 120 in the last 60 s "
        "(clicks: 122)",
        "242 records sent to dead-letter topic app.dlq since start, 120 in the last 60 s "
        "(clicks: 242)",
        "300 records sent to dead-letter topic app.dlq since start, 58 in the last 29 s "
        "(clicks: 300)",
    ]


def test_checkpoint_completions_are_one_line_per_attempt_then_a_summary_a_minute() -> None:
    log = CompletionLog()
    lines = []
    for n in range(1, 131):  # one a second
        line = log.completed(n, 0, 10.0 + n % 7, 4096, 4, now=100.0 + n)
        if line is not None:
            lines.append((n, line))
    line = log.completed(131, 1, 55.0, 4096, 4, now=231.0)  # a restore: a new attempt
    assert line is not None
    lines.append((131, line))
    assert lines == [
        (1, "checkpoint 1 completed in 11 ms (4096 bytes, 4 tasks); further completions are "
            "summarised every 60 s"),
        (61, "60 checkpoints completed in the last 60 s (2-61; duration median 13 ms, max "
             "16 ms; state 4096 bytes)"),
        (121, "60 checkpoints completed in the last 60 s (62-121; duration median 13 ms, max "
              "16 ms; state 4096 bytes)"),
        (131, "checkpoint 131 completed in 55 ms (4096 bytes, 4 tasks); further completions "
              "are summarised every 60 s"),
    ]  # fmt: skip
