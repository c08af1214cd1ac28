"""User-function errors: on_error="fail" (default) or "dead_letter" (issue 13 point 4)."""

from __future__ import annotations

from typing import Any

import pytest

from kstream.api import Topology
from kstream.elements.records import DeadLetter, OutputBatch
from kstream.plan import plan_job


def inverse(v: int) -> float:
    return 1 / v


def topology(on_error: str) -> Topology:
    t = Topology("e", on_error=on_error)
    (
        t.source("in", value_serde="json")
        .filter(lambda v: v["keep"] > 0)
        .map(lambda v: v["n"])
        .flat_map(lambda n: [n, inverse(n)])
        .to("out", value_serde="json")
    )
    return t


ROWS = [
    ("a", {"keep": 1, "n": 2}, 10),
    ("b", {"keep": 1}, 11),  # map: KeyError
    ("c", {"keep": "x", "n": 1}, 12),  # filter: TypeError
    ("d", {"keep": 1, "n": 0}, 13),  # flat_map: ZeroDivisionError
    ("e", {"keep": 0, "n": 5}, 14),  # filtered out
    ("f", {"keep": 1, "n": 4}, 15),
]


def test_dead_letter_sends_each_failing_record_with_operator_and_exception(kit: Any) -> None:
    plan = plan_job(topology("dead_letter"), "e", {"in": 1})
    task = kit.task(plan)
    task.feed_source("in", 0, kit.records(ROWS), 0.0)
    out = task.drain()
    batches = [o for o in out if isinstance(o, OutputBatch)]
    assert [v for b in batches for v in b.values] == [b"2", b"0.5", b"4", b"0.25"]
    assert [t for b in batches for t in b.timestamps] == [10, 10, 15, 15]
    letters = [o for o in out if isinstance(o, DeadLetter)]
    assert letters == [
        DeadLetter(
            "in",
            0,
            -1,
            "operator 'filter1' raised TypeError: '>' not supported between instances of "
            "'str' and 'int'",
            b"c",
            b'{"keep":"x","n":1}',
            12,
            "filter1",
        ),
        DeadLetter("in", 0, -1, "operator 'map2' raised KeyError: 'n'", b"b", b'{"keep":1}', 11, "map2"),
        DeadLetter(
            "in", 0, -1, "operator 'flat_map3' raised ZeroDivisionError: division by zero",
            b"d", b"0", 13, "flat_map3",
        ),
    ]  # fmt: skip
    assert task.metrics["operator_errors"] == 3


def test_fail_is_the_default_and_raises(kit: Any) -> None:
    assert Topology("x").on_error == "fail"
    task = kit.task(plan_job(topology("fail"), "e", {"in": 1}))
    with pytest.raises(TypeError):
        task.feed_source("in", 0, kit.records(ROWS), 0.0)


def test_key_by_functions_and_key_serialization_are_covered(kit: Any) -> None:
    t = Topology("k", on_error="dead_letter")
    t.source("in", value_serde="json").key_by(lambda v: v["user"], key_serde="str").window(
        __import__("kstream.api", fromlist=["Tumbling"]).Tumbling(10)
    ).count().to("out")
    task = kit.task(plan_job(t, "k", {"in": 1}))
    task.feed_source("in", 0, kit.records([("a", {"user": "u1"}, 1), ("b", {}, 2)]), 0.0)
    out = task.drain()
    (batch,) = [o for o in out if isinstance(o, OutputBatch)]
    assert batch.keys == [b"u1"]
    (letter,) = [o for o in out if isinstance(o, DeadLetter)]
    assert (letter.reason, letter.operator, letter.value) == (
        "operator 'key_by1' raised KeyError: 'user'",
        "key_by1",
        b"{}",
    )
