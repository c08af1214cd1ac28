"""What a task tells downstream about the floor its records were judged against
(``kstream.runtime.lateness.JudgedRuns``): a ``Watermark(judged=...)`` only where the
floor changes for a batch holding a record behind one of the floors, a plain one to
go back to the task's own watermark, and again after a barrier (which resets it on
both sides, so a task restored there judges what follows as the failure-free run)."""

from __future__ import annotations

from typing import Any

from kstream.elements.events import Barrier, Watermark
from kstream.elements.records import Output
from kstream.operators.core import Operator
from kstream.runtime import OutputBatch, OutputEvent
from kstream.runtime.lateness import JudgedRuns


class Writer(Operator):
    """An entry operator that writes what it gets to the internal topic ``x``."""

    def __init__(self, out: list[Output]) -> None:
        super().__init__("writer")
        self.out = out

    def push(self, keys: list[Any], values: list[Any], stamps: list[int], port: int) -> None:
        self.out.append(OutputBatch("x", True, [0] * len(keys), keys, values, stamps))

    def emit(self, keys: list[Any], values: list[Any], stamps: list[int], port: int = 0) -> None:
        self.push(keys, values, stamps, port)


def batch(out: list[Output], *stamps: int) -> None:
    out.append(
        OutputBatch(
            "x", True, [0] * len(stamps), [None] * len(stamps), [b"1"] * len(stamps), list(stamps)
        )
    )


def events(out: list[Output]) -> list[Any]:
    """The drained outputs as the events and batch timestamps in order."""
    return [o.event if isinstance(o, OutputEvent) else getattr(o, "timestamps", o) for o in out]


def test_markers_only_where_the_floor_changes_for_a_record_behind_it() -> None:
    out: list[Output] = []
    judged, w = JudgedRuns(["x"]), Writer(out)
    out.append(OutputEvent("x", True, Watermark(100)))
    judged.push(out, w, [], 500, [None], [b"1"], [300])  # behind 500: marker
    judged.push(out, w, [], 500, [None], [b"1"], [200])  # same floor: none
    judged.push(out, w, [], 700, [None], [b"1"], [900])  # ahead of both: none
    batch(out, 400)  # a firing's result, judged at 100: behind 500, so back to 100
    batch(out, 150)
    judged.push(out, w, [], 500, [None], [b"1"], [120])
    out.append(OutputEvent("x", True, Barrier(3, 0, 110)))  # resets the floor downstream
    judged.push(out, w, [], 500, [None], [b"1"], [130])  # told again after the barrier
    assert events(judged.drained(out, 110)) == [
        Watermark(100),
        Watermark(100, judged=500),
        [300],
        [200],
        [900],
        Watermark(100),
        [400],
        [150],
        Watermark(100, judged=500),
        [120],
        Barrier(3, 0, 110),
        Watermark(110, judged=500),
        [130],
    ]
    # The floor outlives a drain (downstream keeps it until told otherwise).
    out.clear()
    batch(out, 105)
    assert events(judged.drained(out, 110)) == [Watermark(110), [105]]


def test_nothing_is_added_for_a_task_without_judged_runs() -> None:
    out: list[Output] = [OutputEvent("x", True, Watermark(5))]
    batch(out, 1)
    judged = JudgedRuns(["x"])
    assert judged.drained(out, 5) is out
