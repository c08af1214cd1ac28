"""Serializers/deserializers for record keys and values and for state values.

One registry for the whole project: sources, sinks and state tables all use these.
"""

from kstream.serde.avro import AvroSerde
from kstream.serde.base import (
    BytesSerde,
    JsonSerde,
    Serde,
    SerdeError,
    SerdeUnavailable,
    StrSerde,
    serde_by_name,
)
from kstream.serde.registry_formats import JsonSchemaSerde, ProtobufSerde

__all__ = [
    "AvroSerde",
    "BytesSerde",
    "JsonSchemaSerde",
    "JsonSerde",
    "ProtobufSerde",
    "Serde",
    "SerdeError",
    "SerdeUnavailable",
    "StrSerde",
    "serde_by_name",
]
