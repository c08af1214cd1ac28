"""Stream events carried between tasks besides data records (docs/design.md §3).

Each event says whether it *requires pipelined execution*: a bounded run that
meets such an event fails at once (``PipelinedEventError``). Their wire form on
internal topics belongs to ``kstream.kafka.internal``; the worker decodes them
into these classes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

MAX_TIMESTAMP = 2**63 - 1
"""The largest timestamp Kafka allows (event times are ``0 .. MAX_TIMESTAMP``)."""
MIN_TS = -(2**66)
"""Event time before every record and watermark (the watermark of an input that said
nothing yet). Watermarks reach down to ``-max_out_of_orderness_ms``."""
MAX_TS = 2**66
"""Event time after every window end (the watermark of an ended input). Event times are
at most ``2**63 - 1`` and window sizes, gaps, lateness and join bounds below ``2**63``,
so every window end and expiry time computed from them lies below it: Python's
integers do not overflow, and a record near ``2**63`` fires like any other."""


@dataclass(frozen=True, slots=True)
class Barrier:
    """Checkpoint boundary ``checkpoint_id`` of ``attempt``; ``timestamp`` is a watermark."""

    checkpoint_id: int
    attempt: int
    timestamp: int
    requires_pipelined: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class Watermark:
    """Event time has reached ``timestamp``: records below it are late.

    ``judged``: the writer's records after this event (until its next ``Watermark``)
    were judged late against this watermark, ahead of ``timestamp`` (a run of its own
    upstream writer's records, :mod:`kstream.runtime.lateness`): the reader judges them
    against it too. ``None``: against ``timestamp``. It moves no watermark: windows
    fire on ``timestamp``."""

    timestamp: int
    judged: int | None = None
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
