"""Window assigners and aggregations (event time, milliseconds, end exclusive).

* ``Tumbling(size_ms)`` - fixed, non-overlapping ``[start, start + size)``, aligned
  to ``offset_ms`` (epoch by default).
* ``Hopping(size_ms, advance_ms)`` - fixed windows of ``size_ms`` starting every
  ``advance_ms``; a record belongs to ``size_ms / advance_ms`` windows (also those
  starting before 0, unlike Kafka Streams and Quix), updated earliest first.
* ``Sliding(time_difference_ms)`` - Kafka Streams' sliding windows: a window holds
  records at most ``d = time_difference_ms`` apart. Per distinct record timestamp
  ``t`` of a key there is the *left* window ``[t - d, t]`` and, if any record of the
  key lies in it, the *right* window ``[t + 1, t + 1 + d]`` (inclusive ends, as in
  Kafka Streams; a result's ``[start, end)`` has ``end`` one past: ``[t - d, t + 1)``).
  Windows with equal bounds are one window. Unlike Kafka Streams, windows of records
  before ``d`` are not clipped to start at 0.
* ``Session(gap_ms)`` - per key, records at most ``gap_ms`` apart belong to one
  session ``[first, last + gap)`` (each record opens ``[t, t + gap)``; sessions that
  overlap or touch merge, as in Flink; Kafka Streams' ``<= gap`` rule, which reports
  the inclusive end ``last``). Whether two records share a session depends on their
  timestamps only, never on the order of arrival or on other keys.

A watermark ``W`` says no record with a timestamp below ``W`` is still to come. A
fixed or sliding window *fires* (emits once) when ``end <= W``; a session, which a
record at its ``end`` still extends, when ``end < W``. A window is kept
``allowed_lateness_ms`` longer, and a record that still lands in a fired window makes
it emit again with the updated value. A record whose every window is past ``end +
allowed_lateness`` is *late*: dropped and counted, or sent to the window's ``late()``
side output.

Bounds: event times are Kafka timestamps, ``0 .. 2**63 - 1`` (validated at the
source); sizes, gaps, advances, lateness and join bounds at most ``2**63 - 1`` ms.
Window arithmetic is exact over that whole range (Python integers); a result whose
end lies beyond ``2**63 - 1`` carries the timestamp ``2**63 - 1``.

Emission (``window(spec, emit=..., early_fire_ms=...)``):

* ``emit="final"`` (default): as above, a window emits when it fires (and again on
  each accepted late record). With ``early_fire_ms=N`` it also emits, every ``N`` ms
  of processing time (the worker's wall clock), the current value of each open
  window that changed since the previous early firing (Flink's continuous
  processing-time trigger, restricted to changed windows). Early results are a
  latency aid: which ones appear depends on timing, and the set of changed windows
  is not checkpointed (after a restore a window early-fires again once it changes).
* ``emit="update"``: every change of a window's value is emitted when it happens,
  one result per record and window (Kafka Streams without suppression, Quix's
  ``.current()``), and nothing when the window fires. Sessions that merge emit
  ``WindowResult(key, start, end, None)`` for each session merged away, then the
  merged session.

Every result is a record whose key is the grouping key, whose timestamp is
``end - 1`` and whose value is a ``WindowResult(key, start, end, value)``.
Accumulators live in keyed state and must be JSON-compatible.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from kstream.api.process import canonical_schema

MAX_DURATION_MS = 2**63 - 1
"""The longest window size, advance, gap, lateness or join bound (Kafka's longest
timestamp): with event times in ``0 .. 2**63 - 1`` every end computed from them stays
exact (see ``kstream.elements.events.MAX_TS``)."""


def check_duration(what: str, ms: int, minimum: int = 0) -> None:
    """ValueError unless ``ms`` is an int in ``minimum .. MAX_DURATION_MS``."""
    if type(ms) is not int or not minimum <= ms <= MAX_DURATION_MS:
        raise ValueError(f"{what} must be an int in {minimum}..2**63-1 ms, got {ms!r}")


class WindowResult(NamedTuple):
    """One fired window: the key, ``[start, end)`` in ms, and the aggregate."""

    key: Any
    start: int
    end: int
    value: Any


@dataclass(frozen=True)
class Tumbling:
    """Fixed, non-overlapping windows of ``size_ms``."""

    size_ms: int
    offset_ms: int = 0

    def __post_init__(self) -> None:
        check_duration("Tumbling window size", self.size_ms, 1)
        check_duration("Tumbling window offset", self.offset_ms)


@dataclass(frozen=True)
class Hopping:
    """Windows of ``size_ms`` starting every ``advance_ms`` (``advance_ms <= size_ms``)."""

    size_ms: int
    advance_ms: int
    offset_ms: int = 0

    def __post_init__(self) -> None:
        check_duration("Hopping window size", self.size_ms, 1)
        check_duration("Hopping window offset", self.offset_ms)
        if self.advance_ms <= 0 or self.advance_ms > self.size_ms:
            raise ValueError(
                f"Hopping window needs 0 < advance_ms <= size_ms, got size={self.size_ms} advance={self.advance_ms}"
            )


@dataclass(frozen=True)
class Sliding:
    """Kafka Streams' ``SlidingWindows.ofTimeDifference(time_difference_ms)``: windows
    of records at most ``time_difference_ms`` apart — per distinct record timestamp
    ``t`` of a key, ``[t - d, t]`` and, when it holds a record, ``[t + 1, t + 1 + d]``
    (both ends inclusive; as results ``[start, end)`` with ``end`` one past)."""

    time_difference_ms: int

    def __post_init__(self) -> None:
        check_duration("Sliding window time difference", self.time_difference_ms)


@dataclass(frozen=True)
class Session:
    """Per-key activity sessions closed by ``gap_ms`` of inactivity."""

    gap_ms: int

    def __post_init__(self) -> None:
        check_duration("Session gap", self.gap_ms, 1)


WindowSpec = Tumbling | Hopping | Sliding | Session


@dataclass(frozen=True)
class Aggregation:
    """How a window folds values: ``add(acc, value)`` from ``init()``.

    ``init`` is ``None`` for a reduce (the first value is the accumulator). Records
    whose value is ``None`` are skipped (Kafka Streams' rule), so ``add`` never sees one.
    ``merge(a, b)`` combines two accumulators; session windows need it. ``schema``
    (an Avro schema, kept as canonical JSON text): accumulators are stored as
    versioned Avro, so the schema can evolve across savepoints as a process
    function's ``ValueState(schema=...)`` can (``kstream.operators.stateschema``);
    without it they are stored as JSON.
    """

    kind: str
    add: Callable[[Any, Any], Any]
    init: Callable[[], Any] | None = None
    merge: Callable[[Any, Any], Any] | None = None
    schema: Any = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "schema", canonical_schema(self.schema))


def _count_add(acc: int, _value: Any) -> int:
    return acc + 1


def _zero() -> int:
    return 0


def _int_sum(a: int, b: int) -> int:
    return a + b


COUNT = Aggregation("count", _count_add, _zero, _int_sum)
