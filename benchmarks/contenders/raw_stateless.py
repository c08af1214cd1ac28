"""Raw stateless: workload 1 (decode → filter → map → encode) written by hand on the raw
client — what plain Python costs on top of the raw pipe. JSON or schemaless Avro."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro

from benchmarks.contenders.rawloop import BatchHandler, Output, consume_error, run_raw
from benchmarks.workloads import (
    EVENT_SCHEMA_FILE,
    OUT_EVENT_SCHEMA_FILE,
    contender_parser,
    keep,
    load_schema,
    transform,
)


def json_handler() -> BatchHandler:
    """Workload 1 on JSON values."""
    loads = json.loads
    dumps = json.JSONEncoder(separators=(",", ":")).encode

    def handle(msgs: list[Any], out: Output) -> int:
        produce = out.produce
        n = 0
        for m in msgs:
            if m.error() is not None:
                raise consume_error("raw_stateless", m)
            event = loads(m.value())
            if keep(event):
                produce(dumps(transform(event)).encode(), m.key())
                n += 1
        return n

    return handle


def avro_handler() -> BatchHandler:
    """Workload 1 on schemaless Avro values (workload 5)."""
    in_schema = fastavro.parse_schema(load_schema(EVENT_SCHEMA_FILE))
    out_schema = fastavro.parse_schema(load_schema(OUT_EVENT_SCHEMA_FILE))
    reader = fastavro.schemaless_reader
    writer = fastavro.schemaless_writer
    BytesIO = io.BytesIO

    def handle(msgs: list[Any], out: Output) -> int:
        produce = out.produce
        n = 0
        for m in msgs:
            if m.error() is not None:
                raise consume_error("raw_stateless", m)
            event = reader(BytesIO(m.value()), in_schema, None)
            if keep(event):  # type: ignore[arg-type]
                buf = BytesIO()
                writer(buf, out_schema, transform(event))  # type: ignore[arg-type]
                produce(buf.getvalue(), m.key())
                n += 1
        return n

    return handle


def main() -> None:
    a = contender_parser(__doc__ or "").parse_args()
    handle = avro_handler() if a.format == "avro" else json_handler()
    run_raw("raw_stateless", a.bootstrap, a.input, a.output, a.group, a.end_offsets, handle).emit()


if __name__ == "__main__":
    main()
