"""``.to(topic, timestamp=...)``: output records carry their event time by default, or
the wall clock when they were emitted (retention then counts from when they were
written); the default leaves every existing plan's fingerprint as it was."""

from __future__ import annotations

import time

import pytest

from kstream.api import Topology, Tumbling, WatermarkStrategy
from kstream.plan import plan_job
from kstream.plan.fingerprint import fingerprint
from kstream.testing import run_topology

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
OLD = T0 - 365 * 86_400_000  # a year before: output stamped with it expires at once


def counts(timestamp: str | None) -> Topology:
    t = Topology("clicks")
    s = t.source("clicks", watermark=WatermarkStrategy(max_out_of_orderness_ms=0)).key_by(
        lambda v: v["user"]
    )
    out = s.window(Tumbling(60_000)).count().map(lambda r: {"user": r.key, "n": r.value})
    if timestamp is None:
        out.to("per-minute")
    else:
        out.to("per-minute", timestamp=timestamp)
    return t


INPUT = {"clicks": [("u", {"user": "u"}, OLD), ("u", {"user": "u"}, OLD + 61_000)]}


def test_by_default_output_carries_the_event_time() -> None:
    out = run_topology(counts(None), INPUT).outputs["per-minute"]
    # Each window's result at its end - 1 (the input ends: the last window fires too).
    assert out == [
        ("u", {"user": "u", "n": 1}, OLD + 59_999),
        ("u", {"user": "u", "n": 1}, OLD + 119_999),
    ]


def test_processing_time_stamps_output_with_the_wall_clock() -> None:
    before = int(time.time() * 1000)
    out = run_topology(counts("processing"), INPUT).outputs["per-minute"]
    after = int(time.time() * 1000)
    assert [(k, v) for k, v, _ in out] == [("u", {"user": "u", "n": 1})] * 2
    assert all(before <= ts <= after for _, _, ts in out)


def test_the_option_is_checked_and_the_default_keeps_the_fingerprint() -> None:
    with pytest.raises(ValueError, match=r"timestamp must be one of \('event', 'processing'\)"):
        counts("broker")
    plain, explicit = counts(None), counts("event")
    assert (
        fingerprint(plan_job(plain, "clicks", {"clicks": 1})).digest
        == fingerprint(plan_job(explicit, "clicks", {"clicks": 1})).digest
    )
    assert all("timestamp" not in n.params for n in plain.nodes if n.kind == "sink")
