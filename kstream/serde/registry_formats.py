"""Protobuf and JSON Schema through a Confluent-compatible Schema Registry:
``ProtobufSerde.registry(...)`` and ``JsonSchemaSerde.registry(...)``.

Both are confluent-kafka's own serializers and deserializers
(``confluent_kafka.schema_registry.protobuf`` and ``.json_schema``) behind the
:class:`kstream.serde.Serde` interface, with the registry client and the outage
handling of :mod:`kstream.serde.registry`: schemas are fetched by id once and cached
by the client; a record that does not decode, names an unknown schema id or (JSON
Schema) does not validate raises ``SerdeError`` (dead-lettered with the reason); a
registry outage raises ``SerdeUnavailable`` after retries (the task fails).

Writing registers the schema under its subject (``auto_register=True``) or only
looks it up (``False``, the default, as production registries are run).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from typing import Any

from kstream.serde.base import Serde, SerdeError, SerdeUnavailable
from kstream.serde.registry import (
    RegistryAccess,
    not_registered,
    serialization_context,
    serializer_conf,
)

__all__ = ["JsonSchemaSerde", "ProtobufSerde", "RegistrySerde"]


def _no_subject(_ctx: Any, _record_name: str | None) -> None:
    """Readers need no subject: the writer's schema id names the schema."""
    return None


class RegistrySerde(Serde):
    """One of confluent-kafka's registry serializer/deserializer pairs as a Serde.

    ``make_serializer(client, conf)`` and ``make_deserializer(client, conf)`` build them
    on first use (when the job's ``schema.registry.*`` settings are known).
    """

    name = "registry"

    def __init__(
        self,
        fmt: str,
        access: RegistryAccess,
        make_serializer: Callable[[Any, dict[str, Any]], Any],
        make_deserializer: Callable[[Any, dict[str, Any]], Any],
        *,
        subject: str | None,
        strategy: str,
        topic: str | None,
        is_key: bool,
        auto_register: bool,
    ) -> None:
        self.fmt, self.access = fmt, access
        self.name = f"{fmt.lower().replace(' ', '-')}-registry"
        self.subject, self.strategy, self.topic, self.is_key = subject, strategy, topic, is_key
        self.auto_register = auto_register
        self._make_serializer, self._make_deserializer = make_serializer, make_deserializer
        self._serializer: Any = None
        self._deserializer: Any = None
        self._ctx = serialization_context(topic, is_key)
        self._lock = threading.Lock()

    def _built(self, which: str) -> Any:
        with self._lock:
            try:
                if which == "serializer" and self._serializer is None:
                    conf = serializer_conf(
                        subject=self.subject,
                        strategy=self.strategy,
                        topic=self.topic,
                        auto_register=self.auto_register,
                    )
                    self._serializer = self._make_serializer(self.access.client, conf)
                if which == "deserializer" and self._deserializer is None:
                    conf = {"subject.name.strategy": _no_subject}
                    self._deserializer = self._make_deserializer(self.access.client, conf)
            except (ValueError, TypeError) as e:
                raise SerdeUnavailable(f"cannot use {self.fmt} through the registry: {e}") from e
        return self._serializer if which == "serializer" else self._deserializer

    def serialize(self, value: Any) -> bytes | None:
        if value is None:
            return None
        ser = self._serializer or self._built("serializer")

        def write() -> bytes:
            try:
                return ser(value, self._ctx)
            except Exception as e:
                if _from_registry(e):
                    raise
                raise SerdeError(f"value is not valid {self.fmt}: {type(e).__name__}: {e}") from e

        return self.access.call(
            f"the {self.fmt} schema of {self.subject or self.strategy + ' subject'}",
            write,
            missing=not_registered(self.auto_register),
        )

    def deserialize(self, data: bytes | None) -> Any:
        if data is None:
            return None
        if len(data) < 6 or data[0] != 0:
            raise SerdeError(f"not Schema Registry framed {self.fmt}: {data[:8]!r}...")
        de = self._deserializer or self._built("deserializer")
        sid = int.from_bytes(data[1:5], "big")

        def read() -> Any:
            try:
                return de(data, self._ctx)
            except Exception as e:
                if _from_registry(e):
                    raise
                raise SerdeError(
                    f"invalid {self.fmt} data (writer schema id {sid}): {type(e).__name__}: {e}"
                ) from e

        return self.access.call(f"{self.fmt} schema id {sid}", read)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.fmt}, url={self.access.where!r})"


def _from_registry(e: Exception) -> bool:
    """Whether ``e`` is the registry's answer or an unreachable registry (not bad data)."""
    from confluent_kafka.schema_registry.common._httpx_compat import httpx
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    return isinstance(e, SchemaRegistryError | httpx.TransportError | OSError)


class ProtobufSerde:
    """Protobuf messages of one generated class, through a Schema Registry."""

    @staticmethod
    def registry(
        url: str | None = None,
        *,
        message_type: Any,
        subject: str | None = None,
        strategy: str = "topic",
        topic: str | None = None,
        is_key: bool = False,
        auto_register: bool = False,
        config: Mapping[str, Any] | None = None,
        retry_for: float | None = None,
    ) -> RegistrySerde:
        """Reads values as ``message_type`` instances; writes those (or dicts of their
        fields) under ``subject`` (or the ``strategy``'s subject for ``topic``)."""
        from google.protobuf.json_format import ParseDict

        def make_serializer(client: Any, conf: dict[str, Any]) -> Any:
            from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

            ser = ProtobufSerializer(message_type, client, conf=conf)

            def serialize(value: Any, ctx: Any) -> bytes:
                if isinstance(value, Mapping):
                    value = ParseDict(dict(value), message_type())
                return ser(value, ctx)

            return serialize

        def make_deserializer(client: Any, conf: dict[str, Any]) -> Any:
            from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer

            return ProtobufDeserializer(message_type, conf=conf, schema_registry_client=client)

        return RegistrySerde(
            "Protobuf",
            RegistryAccess(url, config, retry_for),
            make_serializer,
            make_deserializer,
            subject=subject,
            strategy=strategy,
            topic=topic,
            is_key=is_key,
            auto_register=auto_register,
        )


class JsonSchemaSerde:
    """JSON values validated against a JSON Schema, through a Schema Registry."""

    @staticmethod
    def registry(
        url: str | None = None,
        *,
        schema: Mapping[str, Any] | str,
        subject: str | None = None,
        strategy: str = "topic",
        topic: str | None = None,
        is_key: bool = False,
        auto_register: bool = False,
        config: Mapping[str, Any] | None = None,
        retry_for: float | None = None,
    ) -> RegistrySerde:
        """Reads values (dicts) validated against ``schema``; writes them under ``subject``
        (or the ``strategy``'s subject for ``topic``)."""
        text = schema if isinstance(schema, str) else json.dumps(dict(schema))

        def make_serializer(client: Any, conf: dict[str, Any]) -> Any:
            from confluent_kafka.schema_registry.json_schema import JSONSerializer

            return JSONSerializer(text, client, conf=conf)

        def make_deserializer(client: Any, conf: dict[str, Any]) -> Any:
            from confluent_kafka.schema_registry.json_schema import JSONDeserializer

            return JSONDeserializer(text, conf=conf, schema_registry_client=client)

        return RegistrySerde(
            "JSON Schema",
            RegistryAccess(url, config, retry_for),
            make_serializer,
            make_deserializer,
            subject=subject,
            strategy=strategy,
            topic=topic,
            is_key=is_key,
            auto_register=auto_register,
        )
