"""docker/: the Prometheus scrape configuration and the Grafana dashboard are valid and
refer only to metrics kstream exports (no Docker engine here: checked as files)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

from kstream.metrics import Metrics

DOCKER = Path(__file__).resolve().parent.parent / "docker"


def _exported_names() -> set[str]:
    """Every sample name the metrics can produce (with _total, _bucket, _sum, _count...)."""
    m = Metrics(CollectorRegistry())
    names = set()
    with m.coordinating():  # the job's families too (one worker exports them)
        families = list(m.registry.collect())
    for fam in families:
        base = fam.name
        names |= {base, f"{base}_total", f"{base}_created", f"{base}_info"}
        names |= {f"{base}_bucket", f"{base}_sum", f"{base}_count"}
    return names


def test_compose_runs_prometheus_and_grafana_with_their_mounted_files() -> None:
    compose: dict[str, Any] = yaml.safe_load((DOCKER / "compose.yml").read_text())
    services = compose["services"]
    # No coordinator service: the workers elect it (its metrics are the host worker's).
    assert {"kafka", "minio", "worker", "prometheus", "grafana"} <= services.keys()
    assert "coordinator" not in services
    port = services["worker"]["environment"]["KSTREAM_METRICS_PORT"]
    assert port == "9250"
    for svc in ("prometheus", "grafana"):
        for volume in services[svc]["volumes"]:
            src = volume.split(":")[0]
            assert (DOCKER / src).exists(), f"{svc} mounts missing {src}"
    prom: dict[str, Any] = yaml.safe_load((DOCKER / "prometheus" / "prometheus.yml").read_text())
    jobs = {j["job_name"]: j for j in prom["scrape_configs"]}
    assert set(jobs) == {"kstream-worker"}
    dns = jobs["kstream-worker"]["dns_sd_configs"][0]
    assert (dns["names"], dns["type"], str(dns["port"])) == (["worker"], "A", port)
    ds = yaml.safe_load((DOCKER / "grafana/provisioning/datasources/prometheus.yml").read_text())[
        "datasources"
    ][0]
    assert (ds["uid"], ds["url"]) == ("prometheus", "http://prometheus:9090")
    provider = yaml.safe_load((DOCKER / "grafana/provisioning/dashboards/kstream.yml").read_text())[
        "providers"
    ][0]
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"


def test_dashboard_shows_the_required_panels_from_exported_metrics_only() -> None:
    dash = json.loads((DOCKER / "grafana/dashboards/kstream.json").read_text())
    titles = [p["title"] for p in dash["panels"]]
    for wanted in ("Throughput in", "Consumer lag", "Event-time lag", "Checkpoint duration",
                   "Restarts"):  # fmt: skip
        assert any(t.startswith(wanted) for t in titles), wanted
    exported = _exported_names()
    used = set()
    for p in dash["panels"]:
        assert p["datasource"]["uid"] == "prometheus"
        for t in p["targets"]:
            used |= set(re.findall(r"\bkstream_[a-z_]+", t["expr"]))
    assert used and used <= exported, sorted(used - exported)
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
