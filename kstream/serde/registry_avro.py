"""Avro through a Confluent-compatible Schema Registry: ``AvroSerde.registry(...)``.

**Reading.** Each record carries the Confluent wire-format header (magic byte 0, the
writer's 4-byte schema id) before its Avro body. The writer's schema is fetched by id
once (``SchemaRegistryClient.get_schema``, references resolved as confluent-kafka's
own ``AvroDeserializer`` resolves them) and kept with its reader, by id; the body is
then decoded by fastavro against the serde's ``reader_schema`` (Avro schema
resolution: fields added with defaults, fields removed, promotions), or as written
when no reader schema is given. Decoding is fastavro's ``schemaless_reader``, as the
fixed-schema :class:`kstream.serde.avro.AvroSerde` does it, with the same bounds on
hostile bytes; per record the registry path adds only the header check and a dict
look-up (confluent-kafka's ``AvroDeserializer`` would add its rule engine per record).

Bad records raise ``SerdeError`` (the source dead-letters them with the reason): no
wire-format header, an unknown schema id, a writer schema that does not resolve
against the reader schema, an undecodable body. A registry outage raises
``SerdeUnavailable`` after retries (:mod:`kstream.serde.registry`).

**Writing** is confluent-kafka's ``AvroSerializer``: the schema is registered under
its subject (``auto_register=True``) or only looked up (``False``, the default, as
production registries are run), once; a schema not registered fails the task.
"""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import fastavro
from fastavro.read import SchemaResolutionError

from kstream.serde.avro_bounds import Walk, analyse, named_types
from kstream.serde.base import Serde, SerdeError, SerdeUnavailable
from kstream.serde.registry import (
    RegistryAccess,
    not_registered,
    serialization_context,
    serializer_conf,
)

__all__ = ["RegistryAvroSerde"]

_MAX_BAD_IDS = 10_000
_BAD_ID_SECONDS = 30.0  # an unknown id is asked again after this (a registry replica may lag)


class _Writer:
    """How to read bodies one writer schema id wrote."""

    __slots__ = ("empty", "guarded", "named", "reader", "writer")

    def __init__(self, writer: Any, reader: Any) -> None:
        self.writer = writer
        self.reader = None if reader == writer else reader
        self.named = named_types(writer, {})
        recursive, self.empty = analyse(writer, self.named)
        self.guarded = recursive or any(self.empty.values())


class RegistryAvroSerde(Serde):
    """Avro with writers' schemas from a Schema Registry; see the module doc.

    ``reader_schema``: what values look like to the topology (None: as each writer
    wrote them). ``schema``: what this serde writes (default: ``reader_schema``).
    ``subject``/``strategy``/``topic``: the subject the written schema goes under
    (``strategy`` "topic" -> ``<topic>-value``, "record" -> the record's full name,
    "topic_record"). ``retry_for``: seconds an outage is retried before the task fails.
    """

    name = "avro-registry"

    def __init__(
        self,
        url: str | None = None,
        *,
        reader_schema: Mapping[str, Any] | str | None = None,
        schema: Mapping[str, Any] | str | None = None,
        subject: str | None = None,
        strategy: str = "topic",
        topic: str | None = None,
        is_key: bool = False,
        auto_register: bool = False,
        config: Mapping[str, Any] | None = None,
        retry_for: float | None = None,
    ) -> None:
        self.access = RegistryAccess(url, config, retry_for)
        self.reader_schema = (
            None if reader_schema is None else fastavro.parse_schema(_as_json(reader_schema))
        )
        self._schema_text = None
        written = schema if schema is not None else reader_schema
        if written is not None:
            self._schema_text = json.dumps(_as_json(written))
        self.subject, self.strategy, self.topic, self.is_key = subject, strategy, topic, is_key
        self.auto_register = auto_register
        self._serializer_conf = (
            serializer_conf(
                subject=subject, strategy=strategy, topic=topic, auto_register=auto_register
            )
            if schema is not None  # a reader's reader_schema alone needs no subject
            else None
        )
        self._writers: dict[int, _Writer] = {}
        self._bad_ids: dict[int, tuple[str, float]] = {}  # id -> (reason, until)
        self._serializer: Any = None
        self._ctx: Any = None
        self._lock = threading.Lock()

    # ---- reading -------------------------------------------------------------------

    def deserialize(self, data: bytes | None) -> Any:
        if data is None:
            return None
        if len(data) < 5 or data[0] != 0:
            raise SerdeError(_no_header(data))
        sid = int.from_bytes(data[1:5], "big")
        w = self._writers.get(sid) or self._writer(sid)
        return self._read(w, sid, data)

    def deserialize_many(self, items: Sequence[bytes | None]) -> list[Any]:
        writers = self._writers
        reader = fastavro.schemaless_reader
        out: list[Any] = []
        append = out.append
        for data in items:
            if data is None or len(data) < 5 or data[0] != 0:
                append(self.deserialize(data))
                continue
            sid = int.from_bytes(data[1:5], "big")
            w = writers.get(sid)
            if w is None or w.guarded:
                append(self.deserialize(data))
                continue
            buf = io.BytesIO(data)
            buf.seek(5)
            try:
                value = reader(buf, w.writer, w.reader)
            except Exception:
                value = self._read(w, sid, data)  # raises with the reason
            if buf.tell() != len(data):
                self._read(w, sid, data)  # raises: trailing bytes
            append(value)
        return out

    def _read(self, w: _Writer, sid: int, data: bytes) -> Any:
        if w.guarded:
            Walk(w.named, w.empty, data, 5).value(w.writer, 0)
        buf = io.BytesIO(data)
        buf.seek(5)
        try:
            value = fastavro.schemaless_reader(buf, w.writer, w.reader)
        except SchemaResolutionError as e:
            raise SerdeError(
                f"writer schema id {sid} cannot be resolved against the reader schema: {e}"
            ) from e
        except Exception as e:  # fastavro raises many kinds on bad bytes; all mean "invalid"
            raise SerdeError(
                f"invalid Avro data (writer schema id {sid}): {type(e).__name__}: {e}"
            ) from e
        if buf.tell() != len(data):
            raise SerdeError(
                f"invalid Avro data (writer schema id {sid}): {len(data) - buf.tell()} trailing bytes"
            )
        return value

    def _writer(self, sid: int) -> _Writer:
        """The reader of writer schema ``sid``: fetched once (an unknown id: SerdeError)."""
        bad = self._bad_ids.get(sid)
        if bad is not None and time.monotonic() < bad[1]:
            raise SerdeError(bad[0])
        try:
            w = self.access.call(f"schema id {sid}", lambda: self._fetch(sid))
        except SerdeError as e:
            if len(self._bad_ids) >= _MAX_BAD_IDS:
                self._bad_ids.clear()
            self._bad_ids[sid] = (str(e), time.monotonic() + _BAD_ID_SECONDS)
            raise
        self._writers[sid] = w
        return w

    def _fetch(self, sid: int) -> _Writer:
        from confluent_kafka.schema_registry.avro import (
            _resolve_named_schema,
            parse_schema_with_repo,
        )

        client = self.access.client
        registered = client.get_schema(sid)
        if (registered.schema_type or "AVRO") != "AVRO":
            raise SerdeError(f"schema id {sid} is a {registered.schema_type} schema, not Avro")
        named: Any = _resolve_named_schema(registered, client)  # the sync one at run time
        try:
            writer = parse_schema_with_repo(registered.schema_str, named_schemas=named)
        except Exception as e:
            raise SerdeError(f"schema id {sid} is not a valid Avro schema: {e}") from e
        return _Writer(writer, self.reader_schema)

    # ---- writing -------------------------------------------------------------------

    def serialize(self, value: Any) -> bytes | None:
        if value is None:
            return None
        ser = self._serializer or self._make_serializer()
        ctx = self._ctx
        from confluent_kafka.serialization import SerializationError

        def write() -> bytes:
            try:
                return ser(value, ctx)
            except (SerializationError, TypeError, ValueError, KeyError, AttributeError) as e:
                if type(e).__name__ == "SchemaRegistryError":
                    raise
                raise SerdeError(f"value does not match the Avro schema: {e}") from e

        return self.access.call(
            f"the schema of subject {self._subject_text()}",
            write,
            missing=not_registered(self.auto_register),
        )

    def _make_serializer(self) -> Any:
        if self._serializer_conf is None and self._schema_text is not None:
            self._serializer_conf = serializer_conf(
                subject=self.subject,
                strategy=self.strategy,
                topic=self.topic,
                auto_register=self.auto_register,
            )
        if self._serializer_conf is None:
            raise SerdeError(
                "this registry Avro serde has no schema to write with: pass schema= (or reader_schema=)"
            )
        from confluent_kafka.schema_registry.avro import AvroSerializer

        with self._lock:
            if self._serializer is None:
                self._ctx = serialization_context(self.topic, self.is_key)
                try:
                    self._serializer = AvroSerializer(
                        self.access.client, self._schema_text, conf=self._serializer_conf
                    )
                except (ValueError, TypeError) as e:
                    raise SerdeUnavailable(f"cannot write Avro through the registry: {e}") from e
        return self._serializer

    def _subject_text(self) -> str:
        if self.subject is not None:
            return repr(self.subject)
        return f"of the {self.strategy!r} strategy (topic {self.topic!r})"

    def __repr__(self) -> str:
        name = self.reader_schema.get("name", "?") if isinstance(self.reader_schema, dict) else "?"
        return f"RegistryAvroSerde(url={self.access.where!r}, reader_schema={name})"


def _as_json(schema: Mapping[str, Any] | str) -> Any:
    return json.loads(schema) if isinstance(schema, str) else dict(schema)


def _no_header(data: bytes) -> str:
    if len(data) < 5:
        return f"not Schema Registry framed: {len(data)} bytes, shorter than the 5-byte header"
    return f"not Schema Registry framed: magic byte {data[0]}, expected 0"
