"""Quix Streams, workloads 1 and 5: decode → filter → map → encode → sink.

Written as Quix's documentation recommends: ``app.topic`` with the value
(de)serializer, ``sdf.filter``, ``sdf.apply``, ``sdf.to_topic``.
"""

from __future__ import annotations

from benchmarks.contenders.quixapp import make_app, run_and_report
from benchmarks.workloads import (
    EVENT_SCHEMA_FILE,
    OUT_EVENT_SCHEMA_FILE,
    contender_parser,
    keep,
    load_schema,
    transform,
)


def main() -> None:
    a = contender_parser(__doc__ or "").parse_args()
    app, progress = make_app(a)
    if a.format == "avro":
        from quixstreams.models.serializers.avro import AvroDeserializer, AvroSerializer

        source = app.topic(
            a.input,
            key_deserializer="bytes",
            value_deserializer=AvroDeserializer(load_schema(EVENT_SCHEMA_FILE)),
        )
        sink = app.topic(
            a.output,
            key_serializer="bytes",
            value_serializer=AvroSerializer(load_schema(OUT_EVENT_SCHEMA_FILE)),
        )
    else:
        source = app.topic(a.input, key_deserializer="bytes", value_deserializer="json")
        sink = app.topic(a.output, key_serializer="bytes", value_serializer="json")

    sdf = app.dataframe(source)
    sdf = sdf.filter(keep)
    sdf = sdf.apply(transform)
    sdf.to_topic(sink)
    run_and_report("quix_stateless", app, progress)


if __name__ == "__main__":
    main()
