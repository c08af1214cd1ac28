"""The Schema Registry of workload w5r: Apicurio Registry started for the run with
``kstream.dev.schemaregistry`` (Java 17+, Maven once), ``schemas/event.avsc``
registered in it, so the input can be framed with that schema's id.

The in-memory registry starts empty, so its id is part of the input topic's name
(``InputSpec.schema_id``): an input loaded under another registry's id is never reused
with the wrong one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from benchmarks.generate import EVENT_SCHEMA_FILE
from benchmarks.workloads import load_schema
from kstream.dev.jvm import DevServerError
from kstream.dev.schemaregistry import SchemaRegistry

SUBJECT = "bench.in.avro-sr-value"


@dataclass(frozen=True)
class Registry:
    """A running registry (``url``) and the id of the input's schema, or why there is none."""

    url: str = ""
    schema_id: int = 0
    unavailable: str | None = None


@contextmanager
def registry(workdir: Path, needed: bool) -> Iterator[Registry]:
    """A registry for the run when ``needed`` (w5r chosen), stopped afterwards."""
    if not needed:
        yield Registry(unavailable="not needed")
        return
    server = SchemaRegistry(workdir / "registry")
    try:
        url = server.start()
    except DevServerError as e:
        yield Registry(unavailable=f"Schema Registry: {str(e).splitlines()[0][:200]}")
        return
    try:
        client = SchemaRegistryClient({"url": url})
        sid = client.register_schema(
            SUBJECT, Schema(json.dumps(load_schema(EVENT_SCHEMA_FILE)), "AVRO")
        )
        yield Registry(url, sid)
    finally:
        server.stop()
