"""Where standby copies go: the range assignor without some members (kstream.protocol.placement)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kstream.protocol.placement import TP, range_assignment, standby_tasks, tasks_of


def one_topic(n: int) -> dict[str, frozenset[TP]]:
    return {f"t{p}": frozenset({("in", p)}) for p in range(n)}


def test_range_assignment_cuts_sorted_members_into_consecutive_ranges() -> None:
    got = range_assignment(["m-b", "m-a", "m-c"], {"in": 8, "rep": 3})
    assert got == {
        "m-a": {("in", 0), ("in", 1), ("in", 2), ("rep", 0)},
        "m-b": {("in", 3), ("in", 4), ("in", 5), ("rep", 1)},
        "m-c": {("in", 6), ("in", 7), ("rep", 2)},
    }


def test_two_members_each_keeps_a_copy_of_every_task_of_the_other() -> None:
    tasks = one_topic(8)
    assert standby_tasks("a", ["a", "b"], tasks, 1) == {"t4", "t5", "t6", "t7"}
    assert standby_tasks("b", ["a", "b"], tasks, 1) == {"t0", "t1", "t2", "t3"}


def test_four_members_eight_tasks_exact() -> None:
    # a: t0-1, b: t2-3, c: t4-5, d: t6-7. b leaving gives a t0-2, c t3-5; a leaving gives
    # b t0-2 (and c t3-5: task t3 moves although its owner stayed); c or d leaving gives
    # b t3-5 and c t6-7.
    tasks, members = one_topic(8), ["a", "b", "c", "d"]
    got = {m: standby_tasks(m, members, tasks, 1) for m in members}
    assert got == {
        "a": {"t2"},
        "b": {"t0", "t1", "t4", "t5"},
        "c": {"t3", "t6", "t7"},
        "d": set(),
    }


def test_co_partitioned_tasks_follow_their_inputs() -> None:
    tasks = {f"t{p}": frozenset({("in", p), ("rep", p)}) for p in range(4)}
    assert standby_tasks("a", ["a", "b"], tasks, 1) == {"t2", "t3"}


def test_no_replicas_or_alone_no_copies() -> None:
    assert standby_tasks("a", ["a", "b"], one_topic(4), 0) == set()
    assert standby_tasks("a", ["a"], one_topic(4), 1) == set()


def test_two_replicas_cover_two_leavers() -> None:
    tasks, members = one_topic(6), ["a", "b", "c"]
    # Both others gone: a gets everything.
    assert standby_tasks("a", members, tasks, 2) == {"t2", "t3", "t4", "t5"}


@settings(max_examples=200, deadline=None)
@given(
    st.sets(st.text("abcdefgh", min_size=1, max_size=3), min_size=2, max_size=7),
    st.integers(1, 24),
    st.integers(1, 2),
)
def test_whoever_leaves_every_task_that_moves_lands_on_a_member_with_its_copy(
    members: set[str], partitions: int, replicas: int
) -> None:
    tasks = one_topic(partitions)
    counts = {"in": partitions}
    before = {m: tasks_of(held, tasks) for m, held in range_assignment(members, counts).items()}
    copies = {m: standby_tasks(m, members, tasks, replicas) for m in members}
    for gone in sorted(members)[:replicas]:
        rest = members - {gone}
        for m, held in range_assignment(rest, counts).items():
            assert tasks_of(held, tasks) - before[m] <= copies[m]
