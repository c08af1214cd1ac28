"""One internal partition's batch decoded into the runtime's records and events
(docs/design.md §3): a data record, a task's own event, or a set of several tasks'
barriers or watermarks (:mod:`kstream.kafka.eventsets`), which becomes one event per
task at the set's offset. A malformed record is handed back with its reason, for the
dead-letter topic; the rest of the batch goes on."""

from __future__ import annotations

from collections.abc import Sequence

from kstream.elements.records import InternalEvent, InternalRecord
from kstream.kafka.eventsets import SET_KINDS, decode_set
from kstream.kafka.internal import Headers, InternalRecordError, decode_event, read_origin

__all__ = ["decode_records"]


def decode_records(
    records: Sequence[tuple[bytes | None, bytes | None, int | None, int, Headers | None]],
) -> tuple[list[InternalRecord | InternalEvent], list[tuple[int, str]]]:
    """The records and events of one internal partition's batch of ``(key, value,
    timestamp, offset, headers)``, and the malformed ones as ``(index, reason)``."""
    items: list[InternalRecord | InternalEvent] = []
    bad: list[tuple[int, str]] = []
    for i, (key, value, ts, offset, headers) in enumerate(records):
        try:
            origin = read_origin(headers)
            if origin.event is None:
                if origin.time is not None:
                    ts = origin.time
                record = InternalRecord(
                    origin.task, origin.attempt, offset, key, value, ts or 0,
                    origin.writer, origin.seq,
                )  # fmt: skip
                items.append(record)
            elif origin.event in SET_KINDS:
                items.extend(
                    InternalEvent(task, origin.attempt, offset, event, origin.writer, origin.seq)
                    for task, event in decode_set(origin, value)
                )
            else:
                event = decode_event(origin, value)
                items.append(
                    InternalEvent(
                        origin.task, origin.attempt, offset, event, origin.writer, origin.seq
                    )
                )
        except InternalRecordError as e:
            bad.append((i, f"malformed internal record: {e}"))
    return items, bad
