"""The ``/metrics`` endpoint each worker and coordinator serves (``--metrics-port``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from prometheus_client import REGISTRY, CollectorRegistry, start_http_server

log = logging.getLogger(__name__)


class MetricsPortError(ValueError):
    """A ``--metrics-port`` value that is not a port, a range, or 0."""


@dataclass(frozen=True)
class PortSpec:
    """``0`` (off), one port, or a range ``LOW-HIGH`` (the first free one is taken, so
    several processes on one host can share one setting, as Flink's reporter does)."""

    low: int
    high: int

    @classmethod
    def parse(cls, text: str | int) -> PortSpec:
        s = str(text).strip()
        try:
            lo, _, hi = s.partition("-")
            low, high = int(lo), int(hi or lo)
        except ValueError as e:
            raise MetricsPortError(f"--metrics-port {s!r}: give a port, LOW-HIGH or 0") from e
        if not (0 <= low <= high <= 65535) or (low == 0 and high != 0):
            raise MetricsPortError(f"--metrics-port {s!r}: ports are 1-65535 (0: off)")
        return cls(low, high)

    @property
    def off(self) -> bool:
        return self.low == 0


def serve_metrics(
    spec: PortSpec | str | int, host: str = "0.0.0.0", registry: CollectorRegistry = REGISTRY
) -> int | None:
    """Serve ``registry`` at ``http://host:PORT/metrics`` in a daemon thread; the port, or
    None when off. Raises OSError when no port of the range is free."""
    spec = spec if isinstance(spec, PortSpec) else PortSpec.parse(spec)
    if spec.off:
        return None
    last: OSError | None = None
    for port in range(spec.low, spec.high + 1):
        try:
            start_http_server(port, addr=host, registry=registry)
        except OSError as e:
            last = e
            continue
        log.debug("metrics at http://%s:%d/metrics", host, port)
        return port
    raise OSError(f"no free metrics port in {spec.low}-{spec.high} on {host}: {last}")
