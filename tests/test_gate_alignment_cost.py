"""Barrier alignment costs O(channels) per checkpoint, not per barrier: a task of a
stage behind a repartition topic of P partitions has P upstream channels per partition,
and each barrier asked whether every channel is aligned by looking at all of them
(P x P per task and checkpoint: 1 M channel looks per task at 1 024 partitions, most of a
worker's loop time while a checkpoint aligned, benchmarks/SCALING.md). Exact results,
and the looks counted."""

from __future__ import annotations

from typing import Any

import pytest

from kstream.api import Topology
from kstream.elements.events import Barrier
from kstream.plan import plan_job
from kstream.runtime import gate as gate_module
from kstream.runtime.channels import Channel
from kstream.runtime.gate import InputGate

P = 256


class _Looked(Channel):
    looks = 0

    def __getattribute__(self, name: str) -> Any:
        if name in ("ended", "blocked_on"):
            _Looked.looks += 1
        return super().__getattribute__(name)


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> InputGate:
    monkeypatch.setattr(gate_module, "Channel", _Looked)
    t = Topology("a")
    t.source("in", keyed=True).key_by(lambda v: v, key_serde="str").count().to("out")
    plan = plan_job(t, "a", {"in": P})
    spec = next(s for s in plan.tasks if s.stage != plan.tasks[0].stage)
    g = InputGate(plan, spec, 0.0, {})
    assert len(g.channels) == P  # one per upstream task
    _Looked.looks = 0
    return g


def test_aligning_one_checkpoint_looks_at_each_channel_a_few_times(gate: InputGate) -> None:
    channels = list(gate.channels.values())
    for i, c in enumerate(reversed(channels)):  # the last upstream's barrier first
        gate.block(c, Barrier(3, 1, 100), None)
        assert (gate.aligned() is None) == (i < P - 1)
    assert gate.aligned() == channels
    assert _Looked.looks <= 8 * P  # was more than P x P
    gate.release(channels)
    assert gate.pending is None and gate.paused_inputs() == frozenset()


def test_a_released_checkpoint_aligns_again_from_scratch(gate: InputGate) -> None:
    channels = list(gate.channels.values())
    for c in channels[: P // 2]:
        gate.block(c, Barrier(3, 1, 100), None)
    assert gate.aligned() is None
    assert gate.paused_inputs() == frozenset()  # a partition waits for its other channels
    gate.release(gate.abort())  # a newer barrier aborted 3
    gate.block(channels[0], Barrier(4, 1, 100), None)
    assert gate.aligned() is None  # the half blocked on 3 was released: not aligned
    for c in channels[1:]:
        gate.block(c, Barrier(4, 1, 100), None)
    assert gate.aligned() == channels
    assert gate.paused_inputs() == {channels[0].tp}


def test_an_ended_channel_does_not_hold_alignment(gate: InputGate) -> None:
    channels = list(gate.channels.values())
    for c in channels[1:]:
        gate.block(c, Barrier(5, 1, 100), None)
    assert gate.aligned() is None
    channels[0].ended = True
    assert gate.aligned() == channels[1:]


def test_paused_inputs_asked_every_iteration_looks_at_each_channel_a_few_times(
    gate: InputGate,
) -> None:
    """The worker asks every task for the partitions to pause once per loop iteration;
    while a checkpoint aligns, grouping and scanning every channel each time was 9 % of
    a worker's processing thread at 1 024 partitions (benchmarks/SCALING.md)."""
    channels = list(gate.channels.values())
    tp = channels[0].tp
    for round_ in (3, 4):  # a release starts the scan again
        for i, c in enumerate(channels):
            gate.block(c, Barrier(round_, 1, 100), None)
            assert gate.paused_inputs() == (frozenset({tp}) if i == P - 1 else frozenset())
        gate.release(channels)
        assert gate.paused_inputs() == frozenset()
    assert _Looked.looks <= 8 * 2 * P  # was more than P x P per checkpoint


def test_an_ended_channel_leaves_the_others_paused(gate: InputGate) -> None:
    channels = list(gate.channels.values())
    for c in channels[:-1]:
        gate.block(c, Barrier(6, 1, 100), None)
    assert gate.paused_inputs() == frozenset()
    channels[-1].ended = True
    assert gate.paused_inputs() == {channels[0].tp}
