"""Keyed process functions: per-key state and timers (``KeyedStream.process``).

A process function is either a plain function ``fn(key, value, timestamp, state,
out)`` or an object (or a class, instantiated once with no arguments) with
``process(key, value, timestamp, state, out)`` and ``on_timer(key, timestamp, state,
out)``. It runs for each record of a keyed stream; ``state`` is scoped to the
record's key (the same object for every call: never keep it beyond the call):

* ``state["name"]`` is the handle of a state declared in ``process(fn, state=...)``:
  ``ValueState`` (``get(default)``, ``set(v)``, ``clear()``), ``MapState``
  (``get(k, default)``, ``put(k, v)``, ``delete(k)``, ``contains(k)``, ``items()``,
  ``keys()``, ``values()``, ``clear()``; map keys are ``str``/``int``/``bytes``/
  ``None``) or ``ListState`` (``get()``, ``append(v)``, ``extend(vs)``, ``set(vs)``,
  ``clear()``). Values must be JSON-compatible, or match the state's Avro
  ``schema`` when it has one (``ValueState(schema=...)``, ``MapState(schema=...)``).
* ``state.register_event_timer(ts)`` / ``state.delete_event_timer(ts)``: call
  ``on_timer`` for this key once the watermark reaches ``ts`` (``watermark >=
  ts``); at most one timer per key and timestamp (registering twice is one timer).
* ``state.register_processing_timer(ms)`` / ``state.delete_processing_timer(ms)``:
  call ``on_timer`` once the wall clock (epoch ms, as the worker reports it) reaches
  ``ms``. After a restore, processing-time timers that are already due fire at once.
  At end of input (bounded runs) every event-time timer fires; processing-time
  timers do not.
* ``state.key``, ``state.timestamp`` (the record's, or the timer's), ``state.watermark``,
  ``state.processing_time`` (epoch ms; ``None`` before the worker first reported it)
  and, in ``on_timer``, ``state.time_domain`` (``"event"`` or ``"processing"``).

``out(value, timestamp=None)`` emits a record with the current key and the given
timestamp (default: the record's, or the timer's).

No record is dropped as late before a process function: it sees every record,
and can compare ``timestamp`` with ``state.watermark`` to treat late ones itself.

State and timers live in the task's keyed state, so they are part of every
checkpoint: after a restore, state is exactly the checkpoint's and each timer fires
exactly once in the output an exactly-once sink publishes. Keep all state in state
handles: attributes of the function object are not checkpointed.

TTL (``ttl_ms``) is measured in **event time**: an entry written while processing
a record (or a timer) of time ``t`` is invisible once the watermark reaches ``t +
ttl_ms`` and is deleted then; a later write renews it. Event time makes expiry
repeat identically after a restore.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class ValueState:
    """One JSON-compatible value per key; with ``schema`` (an Avro schema), one Avro
    value per key, versioned so the schema can evolve across savepoints (see
    ``kstream.operators.stateschema``)."""

    ttl_ms: int | None = None
    schema: Any = None  # an Avro schema (dict or JSON text); kept as canonical JSON text

    def __post_init__(self) -> None:
        _check_ttl(self.ttl_ms)
        _keep_schema(self)


@dataclass(frozen=True)
class MapState:
    """A map per key (map keys: ``str``, ``int``, ``bytes`` or ``None``), in map-key order;
    with ``schema``, its values are versioned Avro (as ``ValueState``'s)."""

    ttl_ms: int | None = None
    schema: Any = None

    def __post_init__(self) -> None:
        _check_ttl(self.ttl_ms)
        _keep_schema(self)


@dataclass(frozen=True)
class ListState:
    """A list per key (stored as one JSON list: keep it short)."""

    ttl_ms: int | None = None

    def __post_init__(self) -> None:
        _check_ttl(self.ttl_ms)


StateSpec = ValueState | MapState | ListState


def _keep_schema(spec: ValueState | MapState) -> None:
    """Check ``spec.schema`` and keep it as canonical JSON text (hashable, comparable)."""
    object.__setattr__(spec, "schema", canonical_schema(spec.schema))


def canonical_schema(schema: Any) -> str | None:
    """An Avro schema of state (dict or JSON text; None: none) checked and kept as
    canonical JSON text (hashable, comparable); ``ValueError`` if it is not one."""
    if schema is None:
        return None
    import json

    import fastavro

    parsed = json.loads(schema) if isinstance(schema, str) else dict(schema)
    try:
        fastavro.parse_schema(parsed)
    except Exception as e:
        raise ValueError(f"state schema is not a valid Avro schema: {e}") from e
    return json.dumps(parsed, sort_keys=True, separators=(",", ":"))


def _check_ttl(ttl_ms: int | None) -> None:
    if ttl_ms is not None and ttl_ms <= 0:
        raise ValueError(f"ttl_ms must be > 0 (or None), got {ttl_ms}")


class ProcessFunction(Protocol):
    """The class form of a process function."""

    def process(self, key: Any, value: Any, timestamp: int, state: Any, out: Any) -> None: ...

    def on_timer(self, key: Any, timestamp: int, state: Any, out: Any) -> None: ...


ProcessFn = Callable[[Any, Any, int, Any, Any], None]


def resolve_process(fn: Any) -> tuple[ProcessFn, Callable[[Any, int, Any, Any], None] | None]:
    """``(process, on_timer or None)`` from a function, an object or a class."""
    if isinstance(fn, type):
        fn = fn()
    process = getattr(fn, "process", None)
    if process is not None and callable(process):
        on_timer = getattr(fn, "on_timer", None)
        return process, on_timer if callable(on_timer) else None
    if callable(fn):
        return fn, None
    raise TypeError(
        f"process() needs a function fn(key, value, timestamp, state, out) or an object "
        f"with process(...) and on_timer(...), got {type(fn).__name__}"
    )
