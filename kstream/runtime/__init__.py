"""The task engine (task, gate, graph, watermarks), and the names tests and embedders import
from it: stream elements (:mod:`kstream.elements`) and `partition_for_key` (:mod:`kstream.operators.core`)."""

from kstream.elements.events import (
    MAX_TS,
    MIN_TS,
    Barrier,
    EndOfInput,
    PipelinedEventError,
    StreamEvent,
    Watermark,
)
from kstream.elements.records import (
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
from kstream.operators.core import partition_for_key
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
