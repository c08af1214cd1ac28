"""Prometheus metrics of a kstream process (definitions, bounded labels, the endpoint)."""

from kstream.metrics.registry import METRICS, Metrics
from kstream.metrics.server import MetricsPortError, PortSpec, serve_metrics

__all__ = ["METRICS", "Metrics", "MetricsPortError", "PortSpec", "serve_metrics"]
