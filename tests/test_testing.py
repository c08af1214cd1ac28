"""``kstream.testing.run_topology``: a topology's exact output without Kafka, bad records
to the dead letters, late records counted, and clear errors for inputs it cannot place."""

from __future__ import annotations

import random
import runpy
from pathlib import Path
from typing import Any

import pytest

from kstream.api import Topology, Tumbling, WatermarkStrategy, WindowResult
from kstream.testing import Raw, run_topology

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"


def clicks_per_user(out_of_orderness_ms: int = 0) -> Topology:
    """Clicks (JSON, no key) counted per user in 1 s tumbling windows."""

    def row(r: WindowResult) -> dict[str, Any]:
        return {"user": r.key, "start": r.start, "count": r.value}

    t = Topology("clicks")
    (
        t.source(
            "clicks",
            watermark=WatermarkStrategy(max_out_of_orderness_ms=out_of_orderness_ms),
        )
        .filter(lambda c: c["page"] != "health")
        .key_by(lambda c: c["user"], key_serde="str")
        .window(Tumbling(1000))
        .count()
        .map(row)
        .to("counts", key_serde="str", value_serde="json")
    )
    return t


def test_windowed_counts_over_a_repartition_are_exact() -> None:
    clicks = [
        (None, {"user": "ann", "page": "a"}, 100),
        (None, {"user": "bob", "page": "b"}, 200),
        (None, {"user": "ann", "page": "health"}, 300),  # filtered out
        (None, {"user": "ann", "page": "c"}, 900),
        (None, {"user": "ann", "page": "a"}, 1500),
    ]
    run = run_topology(clicks_per_user(), {"clicks": clicks}, partitions={"clicks": 2})
    assert sorted(run.output("counts"), key=lambda r: (r[1]["start"], r[0])) == [
        ("ann", {"user": "ann", "start": 0, "count": 2}, 999),
        ("bob", {"user": "bob", "start": 0, "count": 1}, 999),
        ("ann", {"user": "ann", "start": 1000, "count": 1}, 1999),
    ]
    assert run.dead_letters == []
    assert run.metrics["late_dropped"] == 0


def test_wordcount_example_matches_its_expected_output() -> None:
    mod = runpy.run_path(str(TOPOLOGIES / "wordcount.py"))
    rnd = random.Random(3)
    lines, ts = [], 0
    for _ in range(200):
        ts += rnd.randrange(0, 3_000)
        lines.append((None, " ".join(rnd.choices(["a", "b", "c", "d"], k=rnd.randrange(0, 5))), ts))
    run = run_topology(mod["topology"], {"lines": lines}, partitions={"lines": 3})
    got = sorted(run.values("word-counts"), key=lambda r: (r["start"], r["word"]))
    assert got == mod["expected_output"]({"lines": lines})
    assert len(got) > 10


def test_a_record_the_source_cannot_decode_goes_to_the_dead_letters() -> None:
    clicks = [
        (None, {"user": "ann", "page": "a"}, 100),
        (None, Raw(b'{"user": "ann", '), 200),  # truncated JSON
        (None, {"user": "ann", "page": "b"}, 300),
    ]
    run = run_topology(clicks_per_user(), {"clicks": clicks})
    assert run.output("counts") == [("ann", {"user": "ann", "start": 0, "count": 2}, 999)]
    (dead,) = run.dead_letters
    assert (dead.topic, dead.partition, dead.offset, dead.value) == (
        "clicks",
        0,
        1,
        b'{"user": "ann", ',
    )
    assert dead.reason.startswith("invalid JSON: ")
    assert run.metrics["dead_letters"] == 1


def test_late_records_are_dropped_and_counted() -> None:
    clicks = [
        (None, {"user": "ann", "page": "a"}, 100),
        (None, {"user": "ann", "page": "a"}, 2500),  # watermark 2500: [0, 1000) fires
        (None, {"user": "ann", "page": "a"}, 400),  # late
    ]
    run = run_topology(clicks_per_user(), {"clicks": clicks})
    assert run.values("counts") == [
        {"user": "ann", "start": 0, "count": 1},
        {"user": "ann", "start": 2000, "count": 1},
    ]
    assert run.metrics["late_dropped"] == 1
    # Within the out-of-orderness bound the same record is counted.
    run = run_topology(clicks_per_user(out_of_orderness_ms=2500), {"clicks": clicks})
    assert run.values("counts")[0] == {"user": "ann", "start": 0, "count": 2}
    assert run.metrics["late_dropped"] == 0


def test_records_go_to_the_partition_given_or_their_keys() -> None:
    t = Topology("echo")
    t.source("in", key_serde="str", value_serde="str").map(str.upper).to("out", value_serde="str")
    # Partition given: partition 1's task runs after partition 0's, so "x" comes last.
    run = run_topology(t, {"in": [("k", "x", 1, 1), ("k", "y", 2, 0)]}, partitions={"in": 2})
    assert run.output("out") == [("k", "Y", 2), ("k", "X", 1)]
    # Keyed records of one key stay in one partition, in order.
    run = run_topology(t, {"in": [("k", str(i), i) for i in range(20)]}, partitions={"in": 4})
    assert run.values("out") == [str(i) for i in range(20)]


def test_inputs_it_cannot_place_are_refused_with_the_reason() -> None:
    t = clicks_per_user()
    with pytest.raises(ValueError, match=r"\['clics'\]: not a source topic .* reads \['clicks'\]"):
        run_topology(t, {"clics": []})
    with pytest.raises(ValueError, match=r"names partition 2; the topic has 2"):
        run_topology(t, {"clicks": [(None, {}, 0, 2)]}, partitions={"clicks": 2})
    with pytest.raises(ValueError, match=r"record 0 is \('a', 1\)"):
        run_topology(t, {"clicks": [("a", 1)]})
    with pytest.raises(ValueError, match=r"record 1 has timestamp 1.5; give int milliseconds"):
        run_topology(t, {"clicks": [(None, {}, 1), (None, {}, 1.5)]})
    run = run_topology(t, {})
    assert run.output("counts") == []
    with pytest.raises(KeyError, match=r"no sink topic 'count'; the topology writes \['counts'\]"):
        run.output("count")


def test_the_guides_example_runs_as_written() -> None:
    readme = (TOPOLOGIES.parent / "docs" / "guide.md").read_text()
    section = readme[readme.index("**Testing a topology**") :]
    start = section.index("```python\n") + len("```python\n")
    code = section[start : section.index("\n```", start)]
    scope: dict[str, Any] = {
        "topology": runpy.run_path(str(TOPOLOGIES / "wordcount.py"))["topology"]
    }
    exec(code, scope)  # the guide's own test function, defined and then called
    scope["test_counts_per_word"]()


def test_the_processing_time_clock_stays_at_zero() -> None:
    def stamp(key: Any, value: Any, ts: int, state: Any, out: Any) -> None:
        out([value, state.processing_time])

    t = Topology("clock")
    t.source("in", keyed=True).process(stamp).to("out")
    run = run_topology(t, {"in": [("a", 1, 5), ("b", 2, 6)]})
    assert run.output("out") == [("a", [1, 0], 5), ("b", [2, 0], 6)]
