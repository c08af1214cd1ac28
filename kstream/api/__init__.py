"""The topology API users import: sources, operators, windows, joins, sinks."""

from kstream.api.process import ListState, MapState, ValueState
from kstream.api.time import TimestampExtractor, WatermarkStrategy
from kstream.api.topology import (
    JoinedStream,
    KeyedStream,
    Node,
    Stream,
    Table,
    Topology,
    WindowedStream,
)
from kstream.api.windows import Hopping, Session, Sliding, Tumbling, WindowResult, WindowSpec
from kstream.config import Guarantee

__all__ = [
    "Guarantee",
    "Hopping",
    "JoinedStream",
    "KeyedStream",
    "ListState",
    "MapState",
    "Node",
    "Session",
    "Sliding",
    "Stream",
    "Table",
    "TimestampExtractor",
    "Topology",
    "Tumbling",
    "ValueState",
    "WatermarkStrategy",
    "WindowResult",
    "WindowSpec",
    "WindowedStream",
]
