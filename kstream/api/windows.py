"""Window assigners and aggregations (event time, milliseconds, end exclusive).

* ``Tumbling(size_ms)`` - fixed, non-overlapping ``[start, start + size)``, aligned
  to ``offset_ms`` (epoch by default).
* ``Hopping(size_ms, advance_ms)`` - fixed windows of ``size_ms`` starting every
  ``advance_ms``; a record belongs to ``size_ms / advance_ms`` windows.
* ``Sliding(size_ms)`` - in the Kafka Streams sense: one window per distinct record
  timestamp ``t`` of a key, covering ``(t - size_ms, t]``, i.e. ``[t - size + 1,
  t + 1)``; it holds the aggregate over the key's records in that span.
* ``Session(gap_ms)`` - per key, records closer than ``gap_ms`` form one session
  ``[first, last + gap)``; sessions that touch or overlap merge.

A window *fires* (emits once) when the watermark reaches its end (``end <=
watermark``); it is kept ``allowed_lateness_ms`` longer, and a record that still
lands in a fired window makes it emit again with the updated value. A record whose
every window is past ``end + allowed_lateness`` is *late*: dropped and counted, or
sent to the window's ``late()`` side output.

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
        if self.size_ms <= 0:
            raise ValueError(f"Tumbling window size must be > 0 ms, got {self.size_ms}")


@dataclass(frozen=True)
class Hopping:
    """Windows of ``size_ms`` starting every ``advance_ms`` (``advance_ms <= size_ms``)."""

    size_ms: int
    advance_ms: int
    offset_ms: int = 0

    def __post_init__(self) -> None:
        if self.size_ms <= 0 or self.advance_ms <= 0 or self.advance_ms > self.size_ms:
            raise ValueError(
                f"Hopping window needs 0 < advance_ms <= size_ms, got size={self.size_ms} advance={self.advance_ms}"
            )


@dataclass(frozen=True)
class Sliding:
    """One window per distinct record timestamp ``t``: ``(t - size_ms, t]``."""

    size_ms: int

    def __post_init__(self) -> None:
        if self.size_ms <= 0:
            raise ValueError(f"Sliding window size must be > 0 ms, got {self.size_ms}")


@dataclass(frozen=True)
class Session:
    """Per-key activity sessions closed by ``gap_ms`` of inactivity."""

    gap_ms: int

    def __post_init__(self) -> None:
        if self.gap_ms <= 0:
            raise ValueError(f"Session gap must be > 0 ms, got {self.gap_ms}")


WindowSpec = Tumbling | Hopping | Sliding | Session


@dataclass(frozen=True)
class Aggregation:
    """How a window folds values: ``add(acc, value)`` from ``init()``.

    ``init`` is ``None`` for a reduce (the first value is the accumulator).
    ``merge(a, b)`` combines two accumulators; session windows need it.
    """

    kind: str
    add: Callable[[Any, Any], Any]
    init: Callable[[], Any] | None = None
    merge: Callable[[Any, Any], Any] | None = None


def _count_add(acc: int, _value: Any) -> int:
    return acc + 1


def _zero() -> int:
    return 0


def _int_sum(a: int, b: int) -> int:
    return a + b


COUNT = Aggregation("count", _count_add, _zero, _int_sum)
