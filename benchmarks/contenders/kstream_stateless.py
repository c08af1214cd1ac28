"""kstream, workloads 1 and 5: decode → filter → map → encode → sink.

Written with the Topology API as a user would: a source with the value serde
(``json`` or ``AvroSerde`` with the benchmark schema; w5r's registry-framed input:
``AvroSerde(schema, schema_id=N)``, the fixed-schema path, or with ``--decode
registry`` ``AvroSerde.registry(url, reader_schema=schema)``), ``filter(keep)``,
``map(transform)``, ``to(...)`` with the output serde and ``--guarantee``. Keys are
passed through as bytes (as the Quix contender does).
"""

from __future__ import annotations

from benchmarks.contenders.kstreamapp import guarantee, run_job
from benchmarks.workloads import (
    EVENT_SCHEMA_FILE,
    OUT_EVENT_SCHEMA_FILE,
    contender_parser,
    keep,
    load_schema,
    transform,
)
from kstream.api import Topology
from kstream.serde import AvroSerde, JsonSerde, Serde


def main() -> None:
    a = contender_parser(__doc__ or "").parse_args()
    value_in: Serde
    value_out: Serde
    if a.format == "avro-sr" and a.decode == "registry":
        value_in = AvroSerde.registry(a.registry_url, reader_schema=load_schema(EVENT_SCHEMA_FILE))
        value_out = AvroSerde(load_schema(OUT_EVENT_SCHEMA_FILE))
    elif a.format == "avro-sr":
        value_in = AvroSerde(load_schema(EVENT_SCHEMA_FILE), schema_id=a.schema_id)
        value_out = AvroSerde(load_schema(OUT_EVENT_SCHEMA_FILE))
    elif a.format == "avro":
        value_in = AvroSerde(load_schema(EVENT_SCHEMA_FILE))
        value_out = AvroSerde(load_schema(OUT_EVENT_SCHEMA_FILE))
    else:
        value_in, value_out = JsonSerde(), JsonSerde()
    topology = Topology(a.group)
    (
        topology.source(a.input, key_serde="bytes", value_serde=value_in)
        .filter(keep)
        .map(transform)
        .to(a.output, key_serde="bytes", value_serde=value_out, guarantee=guarantee(a))
    )
    run_job("kstream_stateless", topology, a)


if __name__ == "__main__":
    main()
