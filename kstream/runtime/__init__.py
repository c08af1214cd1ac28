"""Task runtime: operators, stream events, barrier alignment, watermarks, windows."""

from kstream.runtime.events import (
    MAX_TS,
    MIN_TS,
    Barrier,
    EndOfInput,
    PipelinedEventError,
    StreamEvent,
    Watermark,
)
from kstream.runtime.operators import partition_for_key
from kstream.runtime.records import (
    AlignmentAborted,
    DeadLetter,
    InternalEvent,
    InternalRecord,
    Output,
    OutputBatch,
    OutputEvent,
    Position,
    SnapshotPoint,
    SourceRecord,
)
from kstream.runtime.task import Task

__all__ = [
    "MAX_TS",
    "MIN_TS",
    "AlignmentAborted",
    "Barrier",
    "DeadLetter",
    "EndOfInput",
    "InternalEvent",
    "InternalRecord",
    "Output",
    "OutputBatch",
    "OutputEvent",
    "PipelinedEventError",
    "Position",
    "SnapshotPoint",
    "SourceRecord",
    "StreamEvent",
    "Task",
    "Watermark",
    "partition_for_key",
]
