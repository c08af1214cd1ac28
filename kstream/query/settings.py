"""Where a worker serves queries (docs/queries.md): its settings, from the environment."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from kstream.config import ConfigError
from kstream.metrics.server import MetricsPortError, PortSpec
from kstream.query.operators import SOURCE_PARTITIONERS


@dataclass(frozen=True)
class QuerySettings:
    """Where a worker serves queries: ``port`` (a port, ``LOW-HIGH``: the first free
    one, ``0``: no endpoint), ``host`` (loopback unless configured), ``token`` (every
    request must carry it as a bearer token; the workers forward with it),
    ``advertise`` (the URL other workers forward to; default ``http://host:port``,
    the host name when bound to every interface), ``source_partitioner`` (how the
    producers of source topics partition: ``murmur2`` or ``crc32``), ``sidecar``
    (checkpointed point lookups answered by a child process: :mod:`kstream.query.sidecar`)."""

    port: str = "0"
    host: str = "127.0.0.1"
    token: str | None = None
    advertise: str | None = None
    source_partitioner: str = "murmur2"
    sidecar: bool = False

    def __post_init__(self) -> None:
        try:
            PortSpec.parse(self.port)
        except MetricsPortError as e:
            raise ConfigError(f"KSTREAM_QUERY_PORT: {e}") from e
        if self.source_partitioner not in SOURCE_PARTITIONERS:
            raise ConfigError(
                f"KSTREAM_QUERY_SOURCE_PARTITIONER={self.source_partitioner!r}: use "
                + " or ".join(SOURCE_PARTITIONERS)
            )

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> QuerySettings:
        """From ``KSTREAM_QUERY_PORT``, ``_HOST``, ``_TOKEN``, ``_ADVERTISE`` and
        ``_SOURCE_PARTITIONER`` and ``_SIDECAR`` (``1``: a sidecar; none by default)."""
        return cls(
            port=env.get("KSTREAM_QUERY_PORT", "0"),
            host=env.get("KSTREAM_QUERY_HOST", "127.0.0.1"),
            token=env.get("KSTREAM_QUERY_TOKEN") or None,
            advertise=env.get("KSTREAM_QUERY_ADVERTISE") or None,
            source_partitioner=env.get("KSTREAM_QUERY_SOURCE_PARTITIONER", "murmur2"),
            sidecar=env.get("KSTREAM_QUERY_SIDECAR", "0") not in ("0", "off", "false", ""),
        )
