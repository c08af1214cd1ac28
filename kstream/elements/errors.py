"""User-function errors under ``on_error="dead_letter"`` (issue 13 point 4).

A user function that raises on one record would fail the task. With the topology's
``on_error="dead_letter"`` the record goes to the DLQ instead, as a
:class:`~kstream.elements.records.DeadLetter` — the record as it entered the operator
(key and value as JSON, bytes and text as they are), the input topic and partition
of the batch, offset -1 (records are not tracked by offset past the source), the
operator's name and the exception — and the operator goes on with the others:

* ``map``, ``filter``, ``flat_map``, ``key_by``: the batch runs again record by record
  after the function raised on it;
* rolling and window aggregations (``reduce``/``aggregate`` functions, and a session
  window's ``merge``): a record whose function raises changes no accumulator (every
  window of the record is computed before any is updated); a sliding window, which
  aggregates its buffered values when it fires, drops the value its function raised
  on from the buffer (windows computed before may include it);
* joins: a record whose joiner raises on any of its pairs emits none of them and is
  not buffered; an outer join's unmatched record whose joiner raises at expiry is
  dead-lettered;
* process functions: what the function emitted for the record is discarded; state it
  wrote before raising stays written (as in Kafka Streams);
* timer callbacks (``on_timer``): there is no input record, so the dead letter
  describes the timer — key: the timer's key; value: the JSON object
  ``{"timer": "event"|"processing", "timestamp": T}``; timestamp ``T``; reason
  ``operator 'p' raised E: msg (on_timer, event-time timer at T)`` — and, as for a
  record, what the callback emitted is discarded while state it wrote stays; the
  timer is gone (it fired).

A record buffered earlier (sliding windows, outer joins) is dead-lettered with no input
topic (``""``, partition -1).
"""

from __future__ import annotations

import json
from typing import Any

from kstream.elements.reader import describe_error
from kstream.elements.records import DeadLetter, Output


def _as_bytes(x: Any) -> bytes | None:
    if x is None or isinstance(x, bytes):
        return x
    if isinstance(x, str):
        return x.encode("utf-8", "surrogatepass")
    try:
        return json.dumps(x, default=repr, separators=(",", ":")).encode()
    except Exception:
        return repr(x).encode("utf-8", "replace")


class OperatorErrors:
    """Where a task's operators put the records their functions failed on."""

    def __init__(self, out: list[Output]) -> None:
        self.out = out
        self.topic, self.partition = "", -1  # the input of the batch being processed
        self.count = 0

    def dead_letter(
        self,
        operator: str,
        key: Any,
        value: Any,
        ts: int,
        e: BaseException,
        *,
        in_batch: bool = True,
    ) -> None:
        self.count += 1
        reason = f"operator {operator!r} raised {describe_error(e)}"
        self.out.append(
            DeadLetter(
                self.topic if in_batch else "",
                self.partition if in_batch else -1,
                -1,
                reason,
                _as_bytes(key),
                _as_bytes(value),
                ts,
                operator,
            )
        )

    def timer_failed(self, operator: str, key: Any, ts: int, domain: str, e: BaseException) -> None:
        """A timer callback raised: a dead letter describing the timer (no input topic)."""
        self.count += 1
        reason = f"operator {operator!r} raised {describe_error(e)} (on_timer, {domain}-time timer at {ts})"
        value = json.dumps({"timer": domain, "timestamp": ts}, separators=(",", ":")).encode()
        self.out.append(DeadLetter("", -1, -1, reason, _as_bytes(key), value, ts, operator))
