"""What every Schema Registry serde shares: client settings, one client per registry,
and the line between bad data and an outage.

The serdes (:mod:`kstream.serde.registry_avro`, :mod:`kstream.serde.registry_formats`)
use the registry client ``confluent-kafka`` ships (``confluent_kafka.schema_registry``,
install ``kstream[schema-registry]``), which caches schemas by id and ids by schema.

**Settings.** The client's settings (``url``, ``basic.auth.user.info``,
``ssl.ca.location``, ``bearer.auth.*``, ``timeout``...) come, later wins, from the
job's Kafka client settings whose names start with ``schema.registry.`` (``-X
schema.registry.url=...``, ``KSTREAM_KAFKA_SCHEMA_REGISTRY_URL``, ``--kafka-config``;
installed by :func:`use_settings` when a job is planned; they never reach librdkafka),
then the serde's own ``config``, then its ``url``. One setting is kstream's, not the
client's: ``schema.registry.retry.for.s``, how long an outage is retried (default
60 s; a serde's ``retry_for`` wins).

**Bad data or outage.** A registry that answers "no such schema" (404) makes the
record bad: ``SerdeError``, and the source sends it to the dead-letter topic. A
registry that cannot be reached, times out or answers 408/429/5xx is an outage: the
call is retried with exponential backoff for ``retry_for`` seconds, then
``SerdeUnavailable`` fails the task (no record is sent to the dead-letter topic for
it). A refusal (401/403) or any other answer fails the task at once.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from kstream.serde.base import SerdeError, SerdeUnavailable

__all__ = [
    "PREFIX",
    "RegistryAccess",
    "client_config",
    "registry_settings",
    "split_settings",
    "use_settings",
]

PREFIX = "schema.registry."
"""Job client settings with this prefix are the registry client's (prefix removed)."""

T = TypeVar("T")
RETRY_FOR = "retry.for.s"
DEFAULT_RETRY_FOR = 60.0

_NUMERIC = {
    "timeout": float,
    "max.retries": int,
    "retries.wait.ms": int,
    "retries.max.wait.ms": int,
    "cache.capacity": int,
    "cache.latest.ttl.sec": int,
}
_RETRIABLE = frozenset({408, 429, 500, 502, 503, 504})
_NOT_FOUND = 404

_settings: dict[str, str] = {}
_clients: dict[tuple[tuple[str, str], ...], Any] = {}
_lock = threading.Lock()


def split_settings(settings: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """``(kafka, registry)``: the ``schema.registry.*`` settings apart from the others."""
    kafka = {k: v for k, v in settings.items() if not k.startswith(PREFIX)}
    registry = {k: v for k, v in settings.items() if k.startswith(PREFIX)}
    return kafka, registry


def use_settings(settings: Mapping[str, str]) -> None:
    """Make the ``schema.registry.*`` entries of ``settings`` (a job's client settings)
    the defaults of every registry serde of this process."""
    global _settings
    _settings = dict(split_settings(settings)[1])


def registry_settings() -> dict[str, str]:
    """The ``schema.registry.*`` defaults installed by :func:`use_settings`."""
    return dict(_settings)


def client_config(url: str | None, config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The registry client's configuration: defaults < ``config`` < ``url`` (see module doc)."""
    conf: dict[str, Any] = {k.removeprefix(PREFIX): v for k, v in _settings.items()}
    conf.update({k.removeprefix(PREFIX): v for k, v in (config or {}).items()})
    if url:
        conf["url"] = url
    if not conf.get("url"):
        raise SerdeUnavailable(
            "no schema registry URL: pass url= to the serde or set -X schema.registry.url=URL "
            "(or KSTREAM_KAFKA_SCHEMA_REGISTRY_URL)"
        )
    for name, kind in _NUMERIC.items():
        if isinstance(conf.get(name), str):
            try:
                conf[name] = kind(conf[name])
            except ValueError:
                raise SerdeUnavailable(
                    f"schema registry setting {name}={conf[name]!r} is not a number"
                ) from None
    conf.setdefault("max.retries", 0)  # RegistryAccess.call retries, with its own deadline
    conf.pop(RETRY_FOR, None)  # kstream's, not the client's
    return conf


def _client(conf: Mapping[str, Any]) -> Any:
    """One shared ``SchemaRegistryClient`` per configuration (its caches are shared too)."""
    key = tuple(sorted((k, str(v)) for k, v in conf.items()))
    with _lock:
        client = _clients.get(key)
        if client is None:
            try:
                from confluent_kafka.schema_registry import SchemaRegistryClient
            except ImportError as e:  # the extra is not installed
                raise SerdeUnavailable(
                    f"schema registry serdes need confluent-kafka's registry client: "
                    f"pip install 'kstream[schema-registry]' ({e})"
                ) from e
            try:
                client = SchemaRegistryClient(dict(conf))
            except (ValueError, TypeError) as e:
                raise SerdeUnavailable(f"invalid schema registry settings: {e}") from e
            _clients[key] = client
        return client


def _preload() -> None:
    """Import the registry client now, while the topology is built: it is ~0.35 s of
    imports (httpx, authlib) that would otherwise land in the first batch of records.
    Not installed: said with what to do at first use (:func:`_client`)."""
    with contextlib.suppress(ImportError):
        import confluent_kafka.schema_registry  # noqa: F401


class RegistryAccess:
    """The client of one serde and the retry of its calls (see the module doc)."""

    def __init__(
        self,
        url: str | None,
        config: Mapping[str, Any] | None,
        retry_for: float | None,
        backoff: tuple[float, float] = (0.1, 5.0),
    ) -> None:
        self._url, self._config = url, dict(config or {})
        self._retry_for = retry_for
        self.backoff = backoff
        self._conf: dict[str, Any] | None = None
        self._sleep: Callable[[float], None] = time.sleep
        self._clock: Callable[[], float] = time.monotonic  # tests: the time slept
        _preload()

    @property
    def retry_for(self) -> float:
        """Seconds an outage is retried: the serde's, else the job's setting, else 60."""
        if self._retry_for is not None:
            return self._retry_for
        merged = {k.removeprefix(PREFIX): v for k, v in _settings.items()}
        merged.update({k.removeprefix(PREFIX): v for k, v in self._config.items()})
        try:
            return float(merged.get(RETRY_FOR, DEFAULT_RETRY_FOR))
        except ValueError:
            raise SerdeUnavailable(
                f"schema registry setting {PREFIX}{RETRY_FOR}={merged[RETRY_FOR]!r} is not a number"
            ) from None

    @property
    def client(self) -> Any:
        """The shared client (created on first use: the job's settings are known by then)."""
        if self._conf is None:
            self._conf = client_config(self._url, self._config)
        return _client(self._conf)

    @property
    def where(self) -> str:
        """The registry's URL, for messages."""
        if self._conf is None:
            try:
                self._conf = client_config(self._url, self._config)
            except SerdeUnavailable:
                return "(no URL)"
        return str(self._conf["url"])

    def call(
        self,
        what: str,
        fn: Callable[[], T],
        missing: Callable[[str], Exception] | None = None,
    ) -> T:
        """``fn()`` (a registry call), retried through an outage. A 404 raises
        ``missing(reason)`` if given (e.g. an output schema not registered: the task
        fails), else ``SerdeError`` (an input record names an unknown schema)."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        start = self._clock()
        delay, most = self.backoff
        attempts = 0
        while True:
            attempts += 1
            try:
                return fn()
            except SchemaRegistryError as e:
                status = e.http_status_code
                if status == _NOT_FOUND:
                    reason = f"{what}: not in the schema registry {self.where} ({e.error_message})"
                    raise (SerdeError(reason) if missing is None else missing(reason)) from e
                if status not in _RETRIABLE:
                    raise SerdeUnavailable(
                        f"schema registry {self.where} refused {what}: HTTP {status} "
                        f"(error {e.error_code}): {e.error_message}; check the registry and "
                        "the schema.registry.* settings"
                    ) from e
                cause = f"HTTP {status}: {e.error_message}"
            except (SerdeError, SerdeUnavailable):
                raise
            except Exception as e:  # httpx transport errors, timeouts, refused connections
                if not _is_transport_error(e):
                    raise
                cause = f"{type(e).__name__}: {e}"
            elapsed = self._clock() - start
            if elapsed + delay > self.retry_for:
                raise SerdeUnavailable(
                    f"schema registry {self.where} unreachable: {what} failed {attempts} times "
                    f"over {elapsed:.1f}s ({cause}); the task fails, no record is dead-lettered: "
                    "start the registry or fix the schema.registry.* settings, then restart"
                )
            self._sleep(delay)
            delay = min(delay * 2, most)


def _is_transport_error(e: Exception) -> bool:
    """Whether ``e`` says the registry could not be reached (not what it answered)."""
    from confluent_kafka.schema_registry.common._httpx_compat import httpx  # httpx or httpx2

    return isinstance(e, httpx.TransportError | OSError)


STRATEGIES = ("topic", "record", "topic_record")


def serializer_conf(
    *,
    subject: str | None,
    strategy: str,
    topic: str | None,
    auto_register: bool,
) -> dict[str, Any]:
    """The configuration of one of confluent-kafka's registry serializers: which subject
    its schema is registered (or looked up) under, and whether it may register it."""
    from confluent_kafka.schema_registry import (
        record_subject_name_strategy,
        topic_record_subject_name_strategy,
        topic_subject_name_strategy,
    )

    if strategy not in STRATEGIES:
        raise ValueError(f"unknown subject strategy {strategy!r}; one of {STRATEGIES}")
    if subject is None and strategy != "record" and not topic:
        raise ValueError(
            f"the {strategy!r} subject strategy needs the topic: pass topic=... (or subject=...)"
        )
    named: Callable[..., str | None]
    if subject is not None:
        fixed = subject

        def named(_ctx: Any, _record_name: str | None) -> str:
            return fixed
    else:
        named = {
            "topic": topic_subject_name_strategy,
            "record": record_subject_name_strategy,
            "topic_record": topic_record_subject_name_strategy,
        }[strategy]
    return {
        "auto.register.schemas": auto_register,
        "use.latest.version": False,
        "subject.name.strategy": named,
    }


def serialization_context(topic: str | None, is_key: bool) -> Any:
    """The ``SerializationContext`` of every record a serde writes or reads."""
    from confluent_kafka.serialization import MessageField, SerializationContext

    return SerializationContext(topic or "", MessageField.KEY if is_key else MessageField.VALUE)


def not_registered(auto_register: bool) -> Callable[[str], Exception]:
    """What a 404 on writing means: the output schema is not registered (configuration)."""

    def refuse(reason: str) -> Exception:
        hint = (
            "register it (production keeps auto_register=False) or pass auto_register=True"
            if not auto_register
            else "check the subject and the registry"
        )
        return SerdeUnavailable(f"{reason}: {hint}")

    return refuse
