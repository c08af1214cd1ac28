"""Global watermark alignment: the coordinator's part, the worker's part and the local
aligner's floor, as pure state machines with a fake clock (exact messages), and the
compatibility of the new control messages."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kstream.api import Topology, WatermarkStrategy
from kstream.config import CheckpointingConfig
from kstream.elements.events import MIN_TS
from kstream.plan import plan_job
from kstream.protocol import messages
from kstream.protocol.alignment import GlobalWatermarks
from kstream.protocol.commands import Send
from kstream.protocol.coordinator import CheckpointCoordinator
from kstream.protocol.messages import (
    ProtocolError,
    Resume,
    WatermarkBound,
    WatermarkReport,
    decode,
    encode,
    record_key,
)
from kstream.protocol.recovery import recover
from kstream.protocol.signing import COORDINATOR_MESSAGES
from kstream.protocol.worker import WorkerProtocol
from kstream.runtime.watermark_alignment import PartitionTime, WatermarkAligner
from kstream.worker import tasks as worker_tasks
from kstream.worker.global_alignment import GlobalAlignment
from kstream.worker.tasks import WorkerTasks

# ---- the coordinator's part -------------------------------------------------------------


def bound_of(attempt: int, **slowest: tuple[int, str, int | None]) -> WatermarkBound:
    """A bound from ``topic=(slowest, by, second)``."""
    return WatermarkBound(
        attempt,
        {t: v[0] for t, v in slowest.items()},
        {t: v[1] for t, v in slowest.items()},
        {t: v[2] for t, v in slowest.items() if v[2] is not None},
    )


def test_the_bound_is_the_slowest_report_per_topic_and_whose_it_is() -> None:
    g = GlobalWatermarks(timeout=10.0)
    assert g.tick(1, 0.0) is None  # no report: nothing to publish
    g.report(WatermarkReport("w1", 1, {"in": 5000, "other": 70}), 1, 0.0)
    g.report(WatermarkReport("w2", 1, {"in": 3000}), 1, 0.0)
    g.report(WatermarkReport("w3", 1, {"in": 4000}), 1, 0.0)
    assert g.tick(1, 0.0) == WatermarkBound(
        1, {"in": 3000, "other": 70}, {"in": "w2", "other": "w1"}, {"in": 4000}
    )
    # w2 moves on: the next bound is published once the publish interval passed.
    g.report(WatermarkReport("w2", 1, {"in": 9000}), 1, 0.1)
    assert g.tick(1, 0.1) is None
    want = bound_of(1, **{"in": (4000, "w3", 5000), "other": (70, "w1", None)})
    assert g.tick(1, 0.25) == want
    # Unchanged: repeated every REFRESH_S (2 s) only.
    assert g.tick(1, 1.0) is None
    assert g.tick(1, 2.3) == want


def test_a_worker_with_nothing_to_hold_back_releases_the_others() -> None:
    g = GlobalWatermarks(timeout=10.0)
    g.report(WatermarkReport("w1", 1, {"in": 100}), 1, 0.0)
    assert g.tick(1, 0.0) == bound_of(1, **{"in": (100, "w1", None)})
    # w1's slow partition became quiet (nothing left to read): it reports an empty map.
    g.report(WatermarkReport("w1", 1, {}), 1, 1.0)
    assert g.tick(1, 1.0) == WatermarkBound(1, {}, {}, {})
    assert g.tick(1, 5.0) is None  # an empty bound is not repeated


def test_a_dead_workers_report_expires_after_the_timeout() -> None:
    g = GlobalWatermarks(timeout=10.0)
    g.report(WatermarkReport("dead", 1, {"in": 100}), 1, 0.0)
    g.report(WatermarkReport("w2", 1, {"in": 90_000}), 1, 0.0)
    assert g.tick(1, 0.0) == bound_of(1, **{"in": (100, "dead", 90_000)})
    g.report(WatermarkReport("w2", 1, {"in": 90_000}), 1, 8.0)  # w2 repeats its report
    assert g.tick(1, 10.0) == bound_of(1, **{"in": (100, "dead", 90_000)})  # a refresh
    assert g.tick(1, 10.1) is None  # "dead" expired, the change waits out the interval
    assert set(g.reports) == {"w2"}
    assert g.tick(1, 10.3) == bound_of(1, **{"in": (90_000, "w2", None)})
    assert g.tick(1, 17.9) == bound_of(1, **{"in": (90_000, "w2", None)})  # w2's (8.0) is fresh ...
    assert g.tick(1, 18.2) == WatermarkBound(1, {}, {}, {})  # ... until 18.0


def test_the_first_bound_of_an_attempt_waits_for_every_owner() -> None:
    g = GlobalWatermarks(timeout=10.0)
    owners = ["w1", "w2", "w1"]
    g.report(WatermarkReport("w1", 1, {"in": 9000}), 1, 0.0)
    assert g.tick(1, 0.1, owners) is None  # w2 not heard of: its partitions may be at 0
    g.report(WatermarkReport("w2", 1, {}), 1, 0.3)  # w2 holds no one back
    assert g.tick(1, 0.3, owners) == bound_of(1, **{"in": (9000, "w1", None)})
    # An owner that never reports (an older worker, one stuck) delays the first bound 8 s
    # at most.
    g.report(WatermarkReport("w1", 2, {"in": 5}), 2, 5.0)
    assert g.tick(2, 12.9, owners) is None
    assert g.tick(2, 13.0, owners) == bound_of(2, **{"in": (5, "w1", None)})


def test_a_failover_forgets_every_report_and_reports_of_another_attempt_are_ignored() -> None:
    g = GlobalWatermarks(timeout=10.0)
    g.report(WatermarkReport("w1", 1, {"in": 100}), 1, 0.0)
    assert g.tick(1, 0.0) == bound_of(1, **{"in": (100, "w1", None)})
    assert g.tick(2, 0.5) is None  # attempt 2: the restored tasks report again
    assert g.reports == {}
    assert g.tick(2, 0.55) is None
    g.report(WatermarkReport("w1", 1, {"in": 100}), 2, 0.6)  # late, of attempt 1
    assert (g.tick(2, 0.7), g.ignored) == (None, 1)
    g.report(WatermarkReport("w1", 2, {"in": 50}), 2, 0.8)
    assert g.tick(2, 0.8) == bound_of(2, **{"in": (50, "w1", None)})


def _running_coordinator() -> CheckpointCoordinator:
    return CheckpointCoordinator(
        frozenset({"a"}),
        CheckpointingConfig(interval=1000.0, timeout=5.0),
        heartbeat_timeout=10.0,
        recovered=recover([Resume(0, {"a": "w1"})], [], None),
    )


def test_the_coordinator_publishes_the_bound_from_its_tick() -> None:
    c = _running_coordinator()
    c.start(0.0)
    assert c.handle(WatermarkReport("w1", 0, {"in": 7}), 0.1) == []
    assert c.handle(WatermarkReport("w2", 0, {"in": 3}), 0.1) == []
    assert c.tick(0.1) == [Send(bound_of(0, **{"in": (3, "w2", 7)}))]
    assert c.tick(0.2) == []
    assert c.ignored_messages == 0


# ---- the worker's part -------------------------------------------------------------------


def test_a_worker_reports_when_its_slowest_moved_by_a_quarter_of_the_drift() -> None:
    w = GlobalAlignment({"in": 1000, "other": 400})
    # The first report of an attempt goes out even when empty (the coordinator waits for it).
    assert w.report("m", 1, {}, 0.0) == WatermarkReport("m", 1, {})
    assert w.report("m", 1, {"in": MIN_TS}, 0.1) is None  # at most one per 0.2 s
    assert w.report("m", 1, {"in": 100}, 0.3) == WatermarkReport("m", 1, {"in": 100})
    assert w.report("m", 1, {"in": 349}, 0.6) is None  # moved less than 1000 / 4
    assert w.report("m", 1, {"in": 350}, 0.7) == WatermarkReport("m", 1, {"in": 350})
    # A topic that comes (or goes) is reported at once; topics not aligned never.
    assert w.report("m", 1, {"in": 350, "other": 0, "x": 5}, 1.0) == WatermarkReport(
        "m", 1, {"in": 350, "other": 0}
    )
    assert w.report("m", 1, {"in": 350}, 1.3) == WatermarkReport("m", 1, {"in": 350})
    # Unchanged: repeated every 2 s, so the coordinator does not expire it.
    assert w.report("m", 1, {"in": 351}, 3.2) is None
    assert w.report("m", 1, {"in": 351}, 3.4) == WatermarkReport("m", 1, {"in": 351})
    # Nothing left to hold back: one empty report, then silence.
    assert w.report("m", 1, {}, 3.7) == WatermarkReport("m", 1, {})
    assert w.report("m", 1, {}, 9.0) is None
    # A new attempt (after a restore) or member: reported anew.
    assert w.report("m", 2, {"in": 351}, 9.3) == WatermarkReport("m", 2, {"in": 351})
    assert w.report("m2", 2, {"in": 351}, 9.6) == WatermarkReport("m2", 2, {"in": 351})


def test_a_worker_without_aligned_sources_reports_nothing() -> None:
    w = GlobalAlignment({})
    assert w.report("m", 1, {"in": 5}, 0.0) is None


def test_until_the_first_bound_of_an_attempt_every_partition_is_held_after_a_batch() -> None:
    w = GlobalAlignment({"in": 1000, "b": 10})
    assert w.floor("me", 1, 0.0) == {}  # not running yet (no report in attempt 1)
    assert w.report("me", 1, {"in": MIN_TS}, 0.0) == WatermarkReport("me", 1, {"in": MIN_TS})
    # The others may be at the very beginning: the lowest floor, for at most 10 s.
    assert w.floor("me", 1, 0.1) == {"in": MIN_TS, "b": MIN_TS}
    assert w.floor("me", 1, 9.9) == {"in": MIN_TS, "b": MIN_TS}
    assert w.floor("me", 1, 10.1) == {}  # no bound came (an older coordinator): run on
    w.on_bound(bound_of(1, **{"in": (500, "w2", 800)}), 10.2)
    assert w.floor("me", 1, 10.2) == {"in": 500}
    # A restore: attempt 2 starts over, the bound of attempt 1 means nothing.
    assert w.floor("me", 2, 10.3) == {}
    assert w.report("me", 2, {}, 10.4) == WatermarkReport("me", 2, {})
    assert w.floor("me", 2, 10.5) == {"in": MIN_TS, "b": MIN_TS}


def test_the_floor_is_the_other_workers_slowest_of_the_bounds_attempt() -> None:
    w = GlobalAlignment({"in": 1000, "b": 10})
    assert w.floor("me", 1, 0.0) == {}
    w.on_bound(bound_of(1, **{"in": (500, "w2", 800), "b": (7, "me", None)}), 0.0)
    assert w.floor("me", 1, 0.0) == {"in": 500}  # "b": only my own report
    assert w.floor("w2", 1, 0.0) == {"in": 800, "b": 7}  # w2 is compared with the others
    assert w.floor("me", 2, 0.0) == {}  # restored into attempt 2: the old bound means nothing
    assert w.floor("me", 1, 10.0) == {"in": 500}
    assert w.floor("me", 1, 10.1) == {}  # the coordinator stopped repeating it (gone)


def test_the_global_floor_holds_partitions_like_a_slow_local_one() -> None:
    aligner = WatermarkAligner({"in": 1000})
    parts = {("in", 0): PartitionTime(5000, True), ("in", 1): PartitionTime(5900, True)}
    assert aligner.paused(parts) == set()
    # Another worker's slowest partition of "in" is at 4500: 5900 runs 1400 ahead of it.
    assert aligner.paused(parts, {"in": 4500}) == {("in", 1)}
    # A floor above the local slowest changes nothing; one of a topic not aligned neither.
    assert aligner.paused(parts, {"in": 9000, "x": 0}) == set()
    # Quiet partitions hold no one back: not reported; the global floor still holds them.
    quiet = {("in", 0): PartitionTime(7000, False), ("in", 1): PartitionTime(MIN_TS, True)}
    assert aligner.slowest(quiet) == {"in": MIN_TS}
    quiet[("in", 1)] = PartitionTime(MIN_TS, False)
    assert aligner.slowest(quiet) == {}
    # Held: the one too far ahead of the floor; not: one that read nothing yet.
    assert aligner.paused(quiet, {"in": 5000}) == {("in", 0)}


def _simulate(steps: int, kill_a_at: int | None = None) -> dict[str, list[Any]]:
    """Two workers, one partition each, with a fake clock (0.05 s per step): A's
    partition reads from event time 0, B's from 100 000 (a backlog far ahead); each
    partition not held advances by 500 ms of event time per step; the drift bound is
    1000 ms. Every report reaches the coordinator and every bound the workers within
    the step. Returns the watermarks ``(A, B)`` after each step (``trace``), the steps
    where each was held and where each sent a report."""
    drift = {"in": 1000}
    coord = GlobalWatermarks(timeout=10.0)
    workers = {m: GlobalAlignment(drift) for m in ("A", "B")}
    aligners = {m: WatermarkAligner(drift) for m in ("A", "B")}
    wm = {"A": 0, "B": 100_000}
    tp = {"A": ("in", 0), "B": ("in", 1)}
    out: dict[str, list[Any]] = {"trace": [], "A held": [], "B held": [], "A sent": []}
    for step in range(steps):
        now = step * 0.05
        alive = ["B"] if kill_a_at is not None and step >= kill_a_at else ["A", "B"]
        for m in alive:
            parts = {tp[m]: PartitionTime(wm[m], True)}
            if tp[m] in aligners[m].paused(parts, workers[m].floor(m, 0, now)):
                out[f"{m} held"].append(step)
            else:
                wm[m] += 500
            report = workers[m].report(m, 0, aligners[m].slowest(parts), now)
            if report is not None:
                coord.report(report, 0, now)
                out["A sent"] += [step] if m == "A" else []
        bound = coord.tick(0, now, ["A", "B"])
        if bound is not None:
            for m in alive:
                workers[m].on_bound(bound, now)
        out["trace"].append((wm["A"], wm["B"]))
    return out


def test_two_workers_are_held_within_the_drift_of_each_other() -> None:
    run = _simulate(300)
    trace, a_held, b_held = run["trace"], run["A held"], run["B held"]
    # B is held from the first bound on (A's first report: event time 0) until A caught
    # up to within the drift; A, the slowest, is never held meanwhile — not by its own
    # report either, which lags behind its partition.
    caught_up = next(i for i, (a, _b) in enumerate(trace) if a >= 100_000)
    assert set(range(1, caught_up - 1)) <= set(b_held)
    assert trace[:2] == [(500, 100_500), (1000, 100_500)]  # B read one batch before the bound
    assert all(s > caught_up for s in a_held)
    # From then on they stay in step: never more than the drift plus a step apart.
    assert all(abs(b - a) <= 1000 + 500 for a, b in trace[caught_up:])
    assert trace[-1][0] > 120_000 and trace[-1][1] > 120_000


def test_a_dead_workers_last_report_holds_the_others_only_until_it_expires() -> None:
    run = _simulate(400, kill_a_at=100)
    trace, b_held = run["trace"], run["B held"]
    assert trace[99] == (50_000, 100_500)  # B held while A lived
    # A's last report expires once more than 10 s old; the bound without it is
    # published in that step, and B runs on from the next.
    last = run["A sent"][-1]
    expired = next(s for s in range(last, 400) if s * 0.05 - last * 0.05 > 10.0)
    assert b_held[-1] == expired
    assert trace[-1] == (50_000, 100_500 + 500 * (400 - expired - 1))


# ---- compatibility -----------------------------------------------------------------------


def test_the_new_messages_round_trip_and_the_bound_is_signed() -> None:
    for msg in (
        WatermarkReport("w1", 3, {"in": MIN_TS, "b": 5}),
        WatermarkBound(3, {}, {}, {}),
        bound_of(3, **{"in": (7, "w1", 9), "b": (MIN_TS, "w2", None)}),
    ):
        assert decode(encode(msg)) == msg
    assert json.loads(encode(bound_of(3, **{"in": (7, "w1", 9)}))) == {
        "v": 1,
        "type": "WatermarkBound",
        "attempt": 3,
        "slowest": {"in": 7},
        "by": {"in": "w1"},
        "second": {"in": 9},
    }
    assert WatermarkBound in COORDINATOR_MESSAGES  # a forged bound is skipped unverified
    assert WatermarkReport not in COORDINATOR_MESSAGES
    assert record_key(WatermarkReport("w1", 3, {})) == "WatermarkReport"


def test_a_reader_that_does_not_know_the_new_types_skips_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An older worker or coordinator: an unknown type is a ProtocolError, which every
    control reader logs, counts and skips (``kstream.kafka.control``) — never a crash."""
    data = encode(WatermarkReport("w1", 3, {"in": 5}))
    monkeypatch.delitem(messages.MESSAGE_TYPES, "WatermarkReport")
    with pytest.raises(ProtocolError, match="unknown message type 'WatermarkReport'"):
        decode(data)


def test_the_worker_protocol_ignores_alignment_messages() -> None:
    """Other workers' reports reach every worker: its protocol ignores them (the
    checkpointed mode takes the bound before the protocol sees it)."""
    p = WorkerProtocol("w1", now=0.0)
    assert p.handle(WatermarkReport("w2", 0, {"in": 5}), 0.0) == []
    assert p.handle(WatermarkBound(0, {"in": 5}, {"in": "w2"}, {}), 0.0) == []


# ---- the worker's wiring -----------------------------------------------------------------


class _Source:
    assignment: set[tuple[str, int]] = set()
    lags_read = 0

    def lag(self, tps: Any = None) -> dict[tuple[str, int], int]:
        self.lags_read += 1
        return {tp: 5 for tp in tps if tp in {("in", 0), ("in", 1)}}


class _Runner:
    running = True
    holding = False

    def __init__(self, marks: dict[tuple[str, int], tuple[int, bool]]) -> None:
        self.task = self
        self.marks = marks

    def source_watermarks(self) -> dict[tuple[str, int], tuple[int, bool]]:
        return self.marks


def test_worker_tasks_hold_by_the_global_floor_at_once_and_keep_their_slowest() -> None:
    t = Topology("a")
    t.source("in", keyed=True, watermark=WatermarkStrategy(100, max_drift_ms=1000)).to("out")
    tasks = WorkerTasks(plan_job(t, "a", {"in": 2}), _Source(), None)  # type: ignore[arg-type]
    runner = _Runner({("in", 0): (5000, False), ("in", 1): (5800, False)})
    tasks.runners = {"t": runner}  # type: ignore[dict-item]
    assert tasks.held(set()) == frozenset()
    assert tasks.slowest == {"in": 5000}  # what the worker reports
    # A bound arrives (the mode sets the floor): decided again at once, not after
    # ALIGN_EVERY_S, although the running tasks did not change.
    tasks.floor = {"in": 4500}
    assert tasks.held(set()) == {("in", 1)}
    tasks.floor = {}
    assert tasks.held(set()) == frozenset()


def test_worker_tasks_decide_on_fresh_watermarks_at_every_call() -> None:
    """The hold is asked between the slices fed: the watermarks are read at every call
    (a partition released must be held again as soon as it runs ahead), the consumer's
    lag at most every ALIGN_EVERY_S (it reads every partition's position)."""
    t = Topology("a")
    t.source("in", keyed=True, watermark=WatermarkStrategy(100, max_drift_ms=1000)).to("out")
    source = _Source()
    tasks = WorkerTasks(plan_job(t, "a", {"in": 2}), source, None)  # type: ignore[arg-type]
    runner = _Runner({("in", 0): (5000, False), ("in", 1): (5800, False)})
    tasks.runners = {"t": runner}  # type: ignore[dict-item]
    assert tasks.held(set()) == frozenset()
    runner.marks = {("in", 0): (5000, False), ("in", 1): (6100, False)}  # a slice of in-1 fed
    assert tasks.held(set()) == {("in", 1)}  # at once, not ALIGN_EVERY_S later
    assert source.lags_read == 1


class _CountingRunner(_Runner):
    reads = 0

    def source_watermarks(self) -> dict[tuple[str, int], tuple[int, bool]]:
        self.reads += 1
        return self.marks


def test_worker_tasks_read_only_the_fed_partitions_task_between_slices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Between the slices (``fed``: the partition just fed) only the task that read it
    is asked for its watermarks — feeding changes no other task — and the hold is the
    one a look at every task gives (asking them all after each slice was O(tasks):
    a quarter of a worker's processing thread at 256 tasks)."""
    monkeypatch.setattr(worker_tasks, "ALIGN_EVERY_S", 3600.0)  # no lag refresh meanwhile
    t = Topology("a")
    t.source("in", keyed=True, watermark=WatermarkStrategy(100, max_drift_ms=1000)).to("out")
    tasks = WorkerTasks(plan_job(t, "a", {"in": 2}), _Source(), None)  # type: ignore[arg-type]
    r0 = _CountingRunner({("in", 0): (5000, False)})
    r1 = _CountingRunner({("in", 1): (5800, False)})
    tasks.runners = {"stage0-0": r0, "stage0-1": r1}  # type: ignore[dict-item]
    assert tasks.held(set()) == frozenset()  # once per loop iteration: every task
    assert (r0.reads, r1.reads) == (1, 1)
    r1.marks = {("in", 1): (6100, False)}  # a slice of in-1 fed
    assert tasks.held(set(), ("in", 1)) == {("in", 1)}
    assert (r0.reads, r1.reads) == (1, 2)
    r0.marks = {("in", 0): (5200, False)}  # a slice of in-0: in-1 is within the bound again
    assert tasks.held(set(), ("in", 0)) == frozenset()
    assert (r0.reads, r1.reads) == (2, 2)
    assert tasks.slowest == {"in": 5200}
    assert tasks.held(set()) == frozenset()  # the next iteration: every task again
    assert (r0.reads, r1.reads) == (3, 3)
