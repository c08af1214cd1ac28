"""Generating graphs and their inputs from a small grammar.

One generator serves two drivers through ``Choose``: hypothesis (``graphs_and_inputs``,
which shrinks a failure to a small topology) and a seeded ``random.Random``
(``from_seed``, for the broker runs, where each example costs a job).

Inputs: each source gets records ``(key, value, timestamp, partition)`` in
event-time order (so none is ever late, whatever the partitioning); keyed sources
and tables are partitioned by the key's CRC-32 as a producer's ``consistent``
partitioner does, other sources at random. A ``Raw`` record (not JSON) is a bad
record the job must dead-letter, and nothing else may be.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from hypothesis import strategies as st

from kstream.testing import Raw
from tests.difftopo.grammar import FILTERS, FLAT_MAPS, KEYS, MAPS, WINDOWS, Graph, Op, Source

T = TypeVar("T")
Record = tuple[Any, Any, int, int]
Inputs = dict[int, list[Record]]
"""Source number -> its records ``(key, value, ts, partition)``."""

BAD_VALUE = b"\xffnot json"
KEY_LETTERS = "abcde"


class Choose:
    """The generator's only source of choices."""

    def __init__(self, integer: Callable[[int, int], int]) -> None:
        self.integer = integer

    def one(self, options: Sequence[T]) -> T:
        return options[self.integer(0, len(options) - 1)]

    def chance(self, percent: int) -> bool:
        return self.integer(0, 99) < percent


@dataclass
class _Props:
    keyed: bool
    timed: bool
    table: bool = False


def graph(c: Choose, max_ops: int = 8) -> Graph:
    g = Graph()
    keyed_parts = c.integer(1, 4)
    props: list[_Props] = []
    for _ in range(c.integer(1, 3)):
        is_keyed = c.chance(40)
        g.sources.append(Source(is_keyed, keyed_parts if is_keyed else c.integer(1, 4)))
        props.append(_Props(is_keyed, True))
    if c.chance(30):
        g.sources.append(Source(True, keyed_parts, table=True))
        props.append(_Props(True, True, table=True))
    tables = [i for i, p in enumerate(props) if p.table]
    for _ in range(c.integer(1, max_ops)):
        streams = [i for i, p in enumerate(props) if not p.table]
        keyed = [i for i in streams if props[i].keyed]
        timed = [i for i in keyed if props[i].timed]
        kinds = ["map", "filter", "flat_map", "peek", "key_by", "key_by", "sink"]
        kinds += ["rolling"] if keyed else []
        kinds += ["window", "window", "process", "join"] if timed else []
        kinds += ["join_table"] if keyed and tables else []
        kind = c.one(kinds)
        parent = c.one(timed if kind in ("window", "process", "join") else
                       keyed if kind in ("rolling", "join_table") else streams)  # fmt: skip
        p = props[parent]
        op = Op(kind, [parent])
        out = _Props(p.keyed, p.timed)
        if kind == "map":
            op.arg = c.one(sorted(MAPS))
        elif kind == "filter":
            op.arg = c.one(sorted(FILTERS))
        elif kind == "flat_map":
            op.arg = c.one(sorted(FLAT_MAPS))
        elif kind == "key_by":
            op.arg, out.keyed = c.one(sorted(KEYS)), True
        elif kind == "window":
            op.arg, out.timed = f"{c.one(sorted(WINDOWS))}:{c.one(['count', 'sum'])}", False
        elif kind in ("rolling", "process"):
            out.timed = False
        elif kind == "join":
            op.inputs.append(c.one(timed))
            op.arg, out.timed = (
                f"{c.one(['inner', 'left', 'outer'])}:{c.one([0, 300, 1000])}",
                False,
            )
        elif kind == "join_table":
            op.inputs.append(c.one(tables))
            op.arg = c.one(["inner", "left"])
        g.ops.append(op)
        props.append(out if kind != "sink" else _Props(False, False, table=True))
    # Every stream nobody reads ends in a sink.
    read = {j for op in g.ops for j in op.inputs}
    for i, p in enumerate(props):
        if not p.table and i not in read:
            g.ops.append(Op("sink", [i]))
    return g


def inputs(c: Choose, g: Graph, max_records: int = 10, bad_percent: int = 10) -> Inputs:
    out: Inputs = {}
    for i, s in enumerate(g.sources):
        records: list[Record] = []
        if s.table:
            for k in KEY_LETTERS:
                if c.chance(60):
                    records.append((k, {"name": k.upper()}, 1, _crc(k, s.partitions)))
        else:
            ts = 1000 + c.integer(0, 500)
            for _ in range(c.integer(0, max_records)):
                ts += c.one([0, 1, 100, 250, 400, 800, 1500])
                k = c.one(KEY_LETTERS)
                value: Any = {"k": k, "n": c.integer(0, 9)}
                if c.chance(bad_percent):
                    value = Raw(BAD_VALUE)
                if s.keyed:
                    records.append((k, value, ts, _crc(k, s.partitions)))
                else:
                    key = c.one([None, k])
                    records.append((key, value, ts, c.integer(0, s.partitions - 1)))
        out[i] = records
    return out


def _crc(key: str, partitions: int) -> int:
    return zlib.crc32(key.encode()) % partitions


def bad_count(ins: Inputs) -> int:
    return sum(isinstance(r[1], Raw) for records in ins.values() for r in records)


@st.composite
def graphs_and_inputs(draw: st.DrawFn, max_ops: int = 8) -> tuple[Graph, Inputs]:
    c = Choose(lambda lo, hi: draw(st.integers(lo, hi)))
    g = graph(c, max_ops)
    return g, inputs(c, g)


def from_seed(seed: int, max_ops: int = 8) -> tuple[Graph, Inputs]:
    rng = random.Random(seed)
    c = Choose(rng.randint)
    g = graph(c, max_ops)
    return g, inputs(c, g)
