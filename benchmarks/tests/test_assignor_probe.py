"""The assignor probe's bookkeeping (benchmarks/assignor_probe.py): what each member
holds after incremental assign/revoke events, and the lines it prints."""

from __future__ import annotations

from benchmarks.assignor_probe import describe, holdings


def ev(member: str, kind: str, *parts: str) -> dict[str, object]:
    return {"t": 0.0, "m": member, "ev": kind, "p": list(parts)}


def test_holdings_follow_incremental_events_and_forget_closed_members() -> None:
    events = [
        ev("m0", "assign", "A0", "B0", "A1", "B1"),
        ev("m1", "assign", "A2", "B2"),
        ev("m0", "revoke", "A1", "B1"),
        ev("m1", "assign", "A1", "B1"),
        ev("m2", "assign", "A3"),
        ev("m2", "closed"),
    ]
    assert holdings(events) == {"m0": {"A0", "B0"}, "m1": {"A1", "A2", "B1", "B2"}}


def test_describe_says_co_partitioning_and_what_each_member_kept() -> None:
    before = {"m0": {"A0", "B0", "A1", "B1"}, "m1": {"A2", "B2"}}
    after = {"m0": {"A0", "B0"}, "m1": {"A2", "B3"}, "m2": {"A5"}}
    assert describe(after, before) == [
        "  m0: A [0] B [0], co-partitioned True, kept 2/4",
        "  m1: A [2] B [3], co-partitioned False, kept 1/2",
        "  m2: A [5] B []",
    ]
