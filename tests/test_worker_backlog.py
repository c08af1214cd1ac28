"""Prompt stops: a batch is fed in time-bounded slices (issue 13 point 7)."""

from __future__ import annotations

from typing import Any

from kstream.worker.backlog import Backlog


class SlowTasks:
    """A user function taking ``cost`` seconds per record, on a fake clock."""

    def __init__(self, cost: float) -> None:
        self.now, self.cost = 0.0, cost
        self.fed: list[tuple[tuple[str, int], int]] = []

    def clock(self) -> float:
        return self.now

    def feed(self, tp: tuple[str, int], records: list[Any]) -> None:
        self.now += self.cost * len(records)
        self.fed += [(tp, r[3]) for r in records]


def _batch(topic: str, partition: int, n: int) -> list[Any]:
    return [(None, b"v", 0, offset, None) for offset in range(n)]


def test_a_slow_batch_is_fed_about_a_second_per_loop_iteration_in_order() -> None:
    tasks = SlowTasks(cost=0.05)  # 2000 records = 100 s of work in one batch
    backlog = Backlog(2000, clock=tasks.clock)
    backlog.add({("in", 0): _batch("in", 0, 1000), ("in", 1): _batch("in", 1, 1000)})
    iterations = []
    while backlog:
        t0 = tasks.now
        backlog.feed(tasks.feed)
        iterations.append(tasks.now - t0)
    # Without slicing the whole batch (100 s) would run before the loop looks again.
    assert max(iterations) <= 1.3, iterations
    assert len(iterations) > 40
    assert tasks.fed == [(("in", 0), o) for o in range(1000)] + [
        (("in", 1), o) for o in range(1000)
    ]


def test_the_slice_adapts_so_even_the_first_iteration_of_the_next_batch_is_short() -> None:
    tasks = SlowTasks(cost=0.05)
    backlog = Backlog(2000, clock=tasks.clock)
    backlog.add({("in", 0): _batch("in", 0, 100)})
    backlog.feed(tasks.feed)  # learns the cost
    backlog.clear()
    backlog.add({("in", 0): _batch("in", 0, 2000)})
    t0 = tasks.now
    backlog.feed(tasks.feed)
    assert tasks.now - t0 <= 1.3


def test_dropping_user_input_says_where_to_read_again() -> None:
    backlog = Backlog(10, clock=lambda: 0.0)
    backlog.add({("in", 0): _batch("in", 0, 5), ("app.stage0.repartition", 1): _batch("x", 1, 3)})
    assert backlog.drop(lambda t: t == "in") == {("in", 0): 0}
    assert len(backlog) == 3 and not backlog.has_topic(lambda t: t == "in")


def test_held_partitions_wait_in_order_while_the_others_are_fed() -> None:
    tasks = SlowTasks(cost=0.0)
    backlog = Backlog(2000, clock=tasks.clock)
    a, b = ("in", 0), ("in", 1)
    backlog.add({a: _batch("in", 0, 3), b: _batch("in", 1, 2)})
    backlog.add({a: _batch("in", 0, 5)[3:], b: _batch("in", 1, 4)[2:]})
    assert backlog.feedable({a}) and not backlog.feedable({a, b})
    assert backlog.feed(tasks.feed, {a}) == 4
    assert tasks.fed == [(b, 0), (b, 1), (b, 2), (b, 3)]
    assert backlog.partitions() == {a} and not backlog.feedable({a})
    assert backlog.full({a}, limit=5) == {a} and backlog.full({a}, limit=6) == set()
    assert backlog.full(set(), limit=1) == set()  # only held partitions are ever full
    backlog.feed(tasks.feed)  # the hold ended: its records in their order
    assert tasks.fed[4:] == [(a, o) for o in range(5)]
    assert not backlog


def test_a_partition_released_from_a_hold_is_fed_only_until_it_is_held_again() -> None:
    """What waited while a partition was held (up to HOLD_MAX records) is not fed all at
    once when the hold ends: the hold is asked again after every slice, so a partition
    released runs only until it is ahead again (a global-alignment test once saw a
    released partition jump from 18 s to its end, 80 s past the drift bound)."""
    tasks = SlowTasks(cost=0.0001)
    backlog = Backlog(100, clock=tasks.clock)
    a, b = ("in", 0), ("in", 1)
    backlog.add({a: _batch("in", 0, 1000), b: _batch("in", 1, 300)})
    backlog.slice = 100
    asked = []

    def recheck(fed: tuple[str, int]) -> set[tuple[str, int]]:
        asked.append(len(tasks.fed))
        assert fed == tasks.fed[-1][0]  # told the partition just fed
        # a runs ahead once 200 of its records are fed; b never does
        return {a} if sum(1 for tp, _o in tasks.fed if tp == a) >= 200 else set()

    backlog.feed(tasks.feed, set(), recheck)
    fed_a = [o for tp, o in tasks.fed if tp == a]
    assert fed_a == list(range(200))  # two slices, then held again: 800 wait
    assert [o for tp, o in tasks.fed if tp == b] == list(range(300))  # b goes on
    assert len(backlog) == 800 and backlog.partitions() == {a}
    assert asked and asked[0] == 100  # asked after the first slice
    # Without recheck (the hold decided once per loop iteration) all 1000 went through.
    old = SlowTasks(cost=0.0001)
    backlog = Backlog(100, clock=old.clock)
    backlog.add({a: _batch("in", 0, 1000)})
    backlog.feed(old.feed, set())
    assert len(old.fed) == 1000


def test_a_bounded_run_ends_a_partition_only_once_its_read_records_were_fed() -> None:
    """The consumer's position passes the end offset as soon as the last records are read
    into the backlog; a slow first slice (16 records, a loaded machine) once let the
    bounded run end the partition there: its task never saw the other 24 records and the
    run published 16 of 40 (integration/test_schema_registry.py, in CI)."""
    from kstream.worker.bounded import Bounded

    tp = ("orders", 0)
    ended: list[tuple[str, int]] = []

    class Task:
        finished = False

        def seek_positions(self) -> dict[tuple[str, int], int]:
            return {tp: 16}  # fed up to offset 15

        def end_input(self, topic: str, partition: int) -> None:
            ended.append((topic, partition))

    class Runner:
        task = Task()

        def step(self, call: Any, *args: Any) -> None:
            call(*args[:-1])  # (topic, partition), without now

    class Tasks:
        runners = {"stage0-0": Runner()}
        task_of = {tp: "stage0-0"}

    class Source:
        def positions(self, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
            return {tp: 40}  # all 40 read

    mode = Bounded(Tasks(), Source(), None, None, None, "app", None)  # type: ignore[arg-type]
    mode.ends = {tp: 40}
    backlog = Backlog(2000, clock=lambda: 0.0)
    backlog.add({tp: _batch("orders", 0, 24)})
    mode.unfed = backlog.partitions
    assert mode.end(0.0) is None and ended == []  # 24 wait in the backlog: not the end
    backlog.clear()  # fed
    assert mode.end(0.0) is None and ended == [tp]
    assert mode.ends == {}


def test_dropping_some_partitions_keeps_the_others_records_in_order() -> None:
    """An adoption or a cooperative rebalance re-reads only its partitions: what the tasks
    that ran on read stays and is fed, in order (dropped, it would never be read again)."""
    backlog = Backlog(2000)
    backlog.add({("in", 0): _batch("in", 0, 3), ("in", 1): _batch("in", 1, 3)})
    backlog.add({("in", 0): _batch("in", 0, 2), ("in", 2): _batch("in", 2, 1)})
    backlog.drop_partitions({("in", 1)}.__contains__)
    assert backlog.partitions() == {("in", 0), ("in", 2)}
    fed: list[tuple[tuple[str, int], int]] = []
    while backlog:
        backlog.feed(lambda tp, rs: fed.extend((tp, r[3]) for r in rs))
    assert [o for tp, o in fed if tp == ("in", 0)] == [0, 1, 2, 0, 1]
    assert len(fed) == 6
