"""User-function errors under ``on_error="dead_letter"`` (issue 13 point 4).

A ``map``, ``filter``, ``flat_map`` or ``key_by`` function that raises on one record
would fail the whole batch. With the topology's ``on_error="dead_letter"`` the
operator runs that batch again record by record: the records whose function raises
become :class:`~kstream.runtime.records.DeadLetter` outputs — the record as it
entered the operator (key and value as JSON, bytes and text as they are), the input
topic and partition of the batch, offset -1 (records are not tracked by offset past
the source), the operator's name and the exception — and the others go on. As Kafka
Streams' processing exception handler, it applies to stateless functions only: a
stateful operator (windows, joins, process functions) that raised half-way through a
batch would leave its state half-updated, so there the task still fails.
"""

from __future__ import annotations

import json
from typing import Any

from kstream.runtime.reader import describe_error
from kstream.runtime.records import DeadLetter, Output


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

    def dead_letter(self, operator: str, key: Any, value: Any, ts: int, e: BaseException) -> None:
        self.count += 1
        reason = f"operator {operator!r} raised {describe_error(e)}"
        self.out.append(
            DeadLetter(
                self.topic,
                self.partition,
                -1,
                reason,
                _as_bytes(key),
                _as_bytes(value),
                ts,
                operator,
            )
        )
