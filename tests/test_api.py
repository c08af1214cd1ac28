"""Topology API: the graph it builds and the errors it raises early."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kstream.api import Hopping, Session, Sliding, Topology, Tumbling, WatermarkStrategy
from kstream.api.topology import KeyedStream


def test_builder_records_nodes_and_keyedness() -> None:
    t = Topology("app")
    keyed = t.source("in", value_serde="str").map(str.upper).key_by(len).filter(bool)
    assert isinstance(keyed, KeyedStream)
    assert [(n.id, n.kind) for n in t.nodes] == [
        (0, "source"),
        (1, "map"),
        (2, "key_by"),
        (3, "filter"),
    ]
    assert t.nodes[3].parents == [(t.nodes[2], 0)]
    w = keyed.window(Tumbling(10))
    late = w.late()
    assert (late.node, late.port) == (w.node, 1)
    w.count()
    with pytest.raises(ValueError, match="already has an aggregation"):
        w.reduce(max)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Tumbling(0), r"size must be an int in 1\.\.2\*\*63-1"),
        (lambda: Tumbling(2**63), r"size must be an int in 1\.\.2\*\*63-1"),
        (lambda: Hopping(10, 20), "advance_ms <= size_ms"),
        (lambda: Sliding(-1), r"time difference must be an int in 0\.\."),
        (lambda: Session(0), r"gap must be an int in 1\.\."),
        (lambda: Session(1.5), r"gap must be an int in 1\.\."),  # type: ignore[arg-type]
        (lambda: WatermarkStrategy(-5), r"max_out_of_orderness_ms must be an int in 0\.\."),
        (lambda: WatermarkStrategy(0, 0.0), "idle_timeout_s must be > 0"),
    ],
)
def test_invalid_specs_are_rejected(make: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()


def test_negative_lateness_and_join_interval_are_rejected() -> None:
    t = Topology("app")
    s = t.source("in", keyed=True)
    with pytest.raises(ValueError, match=r"allowed_lateness_ms must be an int in 0\.\."):
        s.window(Tumbling(5), allowed_lateness_ms=-1)
    with pytest.raises(ValueError, match=r"within_ms must be an int in 0\.\."):
        s.join(s, lambda a, b: a, within_ms=-1)
