"""The alert rules the docs ship: valid Prometheus rules over metrics kstream exports."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

from kstream.metrics import Metrics

RULES = Path(__file__).resolve().parents[1] / "docs" / "alerts.rules.yml"


def _exported_names() -> set[str]:
    m = Metrics(CollectorRegistry())
    with m.coordinating():
        families = list(m.registry.collect())
    names = set()
    for fam in families:
        base = fam.name
        names |= {base, f"{base}_total", f"{base}_info", f"{base}_bucket", f"{base}_count"}
    return names


def _rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def test_every_rule_is_an_alert_over_exported_metrics_only() -> None:
    rules = _rules()
    assert {r["alert"] for r in rules} == {
        "KstreamNoCompletedCheckpoint",
        "KstreamNoCoordinator",
        "KstreamRestartsPerHour",
        "KstreamDeadLetters",
        "KstreamConsumerLagGrowing",
    }
    exported = _exported_names()
    for rule in rules:
        used = set(re.findall(r"\bkstream_[a-z_]+", rule["expr"]))
        assert used and used <= exported, (rule["alert"], sorted(used - exported))
        assert rule["labels"]["severity"] in {"page", "warn"}
        assert rule["annotations"]["summary"].startswith("kstream: ")
        # Balanced brackets: a cheap guard against a broken expression where promtool is absent.
        expr = rule["expr"]
        for a, b in ("()", "[]", "{}"):
            assert expr.count(a) == expr.count(b), (rule["alert"], a + b)


def test_promtool_accepts_the_rules_where_it_is_installed() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:  # Debian's `prometheus` package brings it; the parse above still ran
        return
    done = subprocess.run(
        [promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 5 rules found" in done.stdout
