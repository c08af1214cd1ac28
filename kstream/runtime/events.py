"""Stream events carried between tasks besides data records (DESIGN §3).

Each event says whether it *requires pipelined execution*: a bounded run that
meets such an event fails at once (``PipelinedEventError``). Events travel on
internal topics as small JSON documents (``encode_event``/``decode_event``);
nothing is ever unpickled or executed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import ClassVar

from kstream.serde import SerdeError

MIN_TS = -(2**62)
"""Event time before every record (the watermark of an input that said nothing yet)."""
MAX_TS = 2**62
"""Event time after every record (the watermark of an ended input)."""

_EVENT_VERSION = 1


@dataclass(frozen=True, slots=True)
class Barrier:
    """Checkpoint boundary ``checkpoint_id`` of ``attempt``; ``timestamp`` is a watermark."""

    checkpoint_id: int
    attempt: int
    timestamp: int
    requires_pipelined: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class Watermark:
    """Event time has reached ``timestamp``: records below it are late."""

    timestamp: int
    requires_pipelined: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class EndOfInput:
    """The writer of this input has no more records (bounded run)."""

    requires_pipelined: ClassVar[bool] = False


StreamEvent = Barrier | Watermark | EndOfInput


class PipelinedEventError(RuntimeError):
    """A bounded run met an event that needs streaming execution."""

    def __init__(self, event: StreamEvent, topic: str, partition: int, task_id: str) -> None:
        self.event = event
        self.topic = topic
        self.partition = partition
        super().__init__(
            f"kstream: task {task_id} runs in bounded (batch) mode but received {event!r} on "
            f"{topic}[{partition}], an event that requires pipelined (streaming) execution. "
            f"Likely misconfiguration: checkpointing is enabled for a bounded run, or an upstream "
            f"stage runs in streaming mode. Disable checkpointing for bounded runs or run all "
            f"stages in the same mode."
        )


def encode_event(event: StreamEvent) -> bytes:
    """The JSON form written as an internal-topic record (marked by a header)."""
    if isinstance(event, Barrier):
        doc: dict[str, object] = {
            "type": "barrier",
            "checkpoint_id": event.checkpoint_id,
            "attempt": event.attempt,
            "timestamp": event.timestamp,
        }
    elif isinstance(event, Watermark):
        doc = {"type": "watermark", "timestamp": event.timestamp}
    else:
        doc = {"type": "end_of_input"}
    doc["v"] = _EVENT_VERSION
    return json.dumps(doc, separators=(",", ":")).encode()


def decode_event(data: bytes) -> StreamEvent:
    """Parse ``encode_event`` output; ``SerdeError`` naming the problem otherwise."""
    try:
        doc = json.loads(data)
        kind = doc["type"]
        if kind == "barrier":
            return Barrier(int(doc["checkpoint_id"]), int(doc["attempt"]), int(doc["timestamp"]))
        if kind == "watermark":
            return Watermark(int(doc["timestamp"]))
        if kind == "end_of_input":
            return EndOfInput()
    except (ValueError, KeyError, TypeError) as e:
        raise SerdeError(f"malformed stream event {data[:80]!r}: {e}") from e
    raise SerdeError(f"unknown stream event type {kind!r}")
