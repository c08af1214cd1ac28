"""A topology as plain data: sources and a list of operators over numbered streams.

Values flowing through a generated topology are dicts ``{"k": str, "n": int, ...}``.
Every user function comes from a fixed menu (``MAPS``, ``FILTERS``...), so a graph is
JSON (a topology file rebuilds it in a worker process) and prints as the DSL code a
user would write (``render``).

A graph's results are deterministic as multisets of ``(key, value)`` per sink when
every source's records come in event-time order (each partition then too, whatever
the partitioning), so no record is ever late: the generator keeps event-time
operators (windows, joins, process functions) on streams whose timestamps are the
input's (``timed``); what a window, join, rolling count or timer emits may go on
through stateless operators, key_bys, rolling counts and sinks. Rolling counts emit
``1..n`` per key in any order; their timestamps depend on the order and are not
compared.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from kstream.api import (
    Hopping,
    ListState,
    Session,
    Sliding,
    Topology,
    Tumbling,
    WindowResult,
    WindowSpec,
)

V = dict[str, Any]


def _rot(v: V) -> V:
    k = v.get("k")
    return {**v, "k": "abcde"[("abcde".index(k) + 1) % 5]} if k in tuple("abcde") else v


MAPS: dict[str, Callable[[V], V]] = {
    "inc": lambda v: {**v, "n": v["n"] + 1},
    "mod": lambda v: {**v, "n": v["n"] * 7 % 10},
    "rot": _rot,
}
FILTERS: dict[str, Callable[[V], bool]] = {
    "even": lambda v: v["n"] % 2 == 0,
    "not_b": lambda v: v["k"] != "b",
    "small": lambda v: v["n"] < 7,
}
FLAT_MAPS: dict[str, Callable[[V], list[V]]] = {
    "dup": lambda v: [v, {**v, "n": v["n"] + 10}],
    "drop3": lambda v: [] if v["n"] % 3 == 0 else [v],
}
KEYS: dict[str, Callable[[V], str]] = {
    "k": lambda v: str(v["k"]),
    "parity": lambda v: f"p{v['n'] % 2}",
    "k_parity": lambda v: f"{v['k']}{v['n'] % 2}",
}
WINDOWS: dict[str, WindowSpec] = {
    "tumbling": Tumbling(1000),
    "hopping": Hopping(1000, 500),
    "sliding": Sliding(700),
    "session": Session(400),
}
PROCESS_BUCKET_MS = 1000


class Release:
    """Buffers each key's ``[ts, n]`` and, at every ``PROCESS_BUCKET_MS`` boundary of
    event time, emits the sum and count of those before it (deterministic: no input
    record is late)."""

    def process(self, key: Any, value: V, timestamp: int, state: Any, out: Any) -> None:
        state["buf"].append([timestamp, value["n"]])
        state.register_event_timer((timestamp // PROCESS_BUCKET_MS + 1) * PROCESS_BUCKET_MS)

    def on_timer(self, key: Any, timestamp: int, state: Any, out: Any) -> None:
        buf = state["buf"].get()
        due = [x for x in buf if x[0] < timestamp]
        state["buf"].set([x for x in buf if x[0] >= timestamp])
        out({"k": key, "n": sum(n for _, n in due), "c": len(due)})


def _window_value(r: WindowResult) -> V:
    return {"k": r.key, "n": r.value, "w": [r.start, r.end]}


def _sum_add(acc: int, v: V) -> int:
    return acc + int(v["n"])


def _sum_merge(a: int, b: int) -> int:
    return a + b


def _zero() -> int:
    return 0


def _boxed_count(c: int) -> V:
    return {"k": "r", "n": c}


def _joiner(left: V | None, right: V | None) -> V:
    k = (left or right or {}).get("k")
    return {"k": k, "n": 0, "j": [None if left is None else left["n"],
                                  None if right is None else right["n"]]}  # fmt: skip


def _table_joiner(v: V, t: V | None) -> V:
    return {**v, "t": None if t is None else t["name"]}


def _noop(_v: V) -> None:
    return None


@dataclass
class Source:
    keyed: bool
    partitions: int
    table: bool = False


@dataclass
class Op:
    """``kind`` over ``inputs`` (stream numbers; sources are streams ``0..len(sources)-1``,
    op ``i`` is stream ``len(sources) + i``; a sink makes no stream worth reading)."""

    kind: str
    inputs: list[int]
    arg: str = ""


@dataclass
class Graph:
    sources: list[Source] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @staticmethod
    def from_json(text: str) -> Graph:
        d = json.loads(text)
        return Graph([Source(**s) for s in d["sources"]], [Op(**o) for o in d["ops"]])

    def source_topic(self, prefix: str, i: int) -> str:
        return f"{prefix}src{i}"

    def sink_topics(self, prefix: str) -> list[str]:
        return [f"{prefix}out{i}" for i, op in enumerate(self.ops) if op.kind == "sink"]


def build(graph: Graph, topology: Topology, prefix: str = "") -> None:
    """Add ``graph`` to ``topology``: topics ``<prefix>src<i>`` and ``<prefix>out<i>``."""
    streams: list[Any] = []
    for i, s in enumerate(graph.sources):
        topic = graph.source_topic(prefix, i)
        streams.append(topology.table(topic) if s.table else topology.source(topic, keyed=s.keyed))
    for i, op in enumerate(graph.ops):
        streams.append(_apply(op, [streams[j] for j in op.inputs], f"{prefix}{op.kind}{i}",
                              f"{prefix}out{i}"))  # fmt: skip


def _apply(op: Op, ins: list[Any], name: str, sink_topic: str) -> Any:
    s = ins[0]
    k = op.kind
    if k == "map":
        return s.map(MAPS[op.arg], name=name)
    if k == "filter":
        return s.filter(FILTERS[op.arg], name=name)
    if k == "flat_map":
        return s.flat_map(FLAT_MAPS[op.arg], name=name)
    if k == "peek":
        return s.peek(_noop, name=name)
    if k == "key_by":
        return s.key_by(KEYS[op.arg], key_serde="str", name=name)
    if k == "window":
        window, agg = op.arg.split(":")
        w = s.window(WINDOWS[window], name=name)
        out = w.count() if agg == "count" else w.aggregate(_zero, _sum_add, _sum_merge)
        return out.map(_window_value)
    if k == "rolling":
        return s.count(name=name).map(_boxed_count)
    if k == "process":
        return s.process(Release, state={"buf": ListState()}, name=name)
    if k == "join":
        how, within = op.arg.split(":")
        return s.join(ins[1], _joiner, within_ms=int(within), how=how, name=name)
    if k == "join_table":
        return s.join_table(ins[1], _table_joiner, left=op.arg == "left", name=name)
    if k == "sink":
        s.to(sink_topic)
        return None
    raise ValueError(f"unknown op kind {k!r}")


def render(graph: Graph, prefix: str = "") -> str:
    """The graph as the DSL code a user would write (functions by their menu names)."""
    lines = [f'topology = Topology("{prefix or "difftest"}")']
    for i, s in enumerate(graph.sources):
        topic = graph.source_topic(prefix, i)
        if s.table:
            lines.append(f's{i} = topology.table("{topic}")  # {s.partitions} partitions')
        else:
            lines.append(f's{i} = topology.source("{topic}", keyed={s.keyed})'
                         f"  # {s.partitions} partitions")  # fmt: skip
    base = len(graph.sources)
    for i, op in enumerate(graph.ops):
        src = f"s{op.inputs[0]}"
        call = {
            "map": f"{src}.map({op.arg})",
            "filter": f"{src}.filter({op.arg})",
            "flat_map": f"{src}.flat_map({op.arg})",
            "peek": f"{src}.peek(noop)",
            "key_by": f"{src}.key_by({op.arg})",
            "rolling": f"{src}.count().map(boxed_count)",
            "process": f'{src}.process(Release, state={{"buf": ListState()}})',
            "sink": f'{src}.to("{prefix}out{i}")',
        }.get(op.kind)
        if op.kind == "window":
            window, agg = op.arg.split(":")
            fn = "count()" if agg == "count" else "aggregate(zero, sum_add, sum_merge)"
            call = f"{src}.window({WINDOWS[window]!r}).{fn}.map(window_value)"
        elif op.kind == "join":
            how, within = op.arg.split(":")
            call = f'{src}.join(s{op.inputs[1]}, joiner, within_ms={within}, how="{how}")'
        elif op.kind == "join_table":
            call = f"{src}.join_table(s{op.inputs[1]}, table_joiner, left={op.arg == 'left'})"
        assert call is not None
        lines.append(call if op.kind == "sink" else f"s{base + i} = {call}")
    return "\n".join(lines)


__all__ = ["Graph", "Op", "Source", "build", "render"]
