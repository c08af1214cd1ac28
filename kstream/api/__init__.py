"""The topology API users import: sources, operators, windows, joins, sinks."""

from kstream.api.time import TimestampExtractor, WatermarkStrategy
from kstream.api.topology import KeyedStream, Node, Stream, Table, Topology, WindowedStream
from kstream.api.windows import Hopping, Session, Sliding, Tumbling, WindowResult, WindowSpec
from kstream.config import Guarantee

__all__ = [
    "Guarantee",
    "Hopping",
    "KeyedStream",
    "Node",
    "Session",
    "Sliding",
    "Stream",
    "Table",
    "TimestampExtractor",
    "Topology",
    "Tumbling",
    "WatermarkStrategy",
    "WindowResult",
    "WindowSpec",
    "WindowedStream",
]
