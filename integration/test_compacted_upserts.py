"""A rolling aggregation's update stream on a real broker: `kstream run --bounded` of
``topologies/running_totals.py`` creates its sink compacted, and the latest record per
key (what compaction keeps; tombstones for closed accounts) equals the example's
``expected_output``."""

from __future__ import annotations

import json
import runpy
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka.admin import ConfigResource, ResourceType

from integration.e2e.harness import REPO, write_renamed_topology
from integration.edge_tools import read_all
from integration.test_bounded_run import CLI
from kstream.kafka.clients import TopicSpec, ensure_topics, make_admin, make_producer

EXAMPLE = REPO / "topologies" / "running_totals.py"


def test_update_stream_upserts_into_a_compacted_topic(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    source, sink, app = unique_name("purchases"), unique_name("totals"), unique_name("app")
    admin = make_admin(kafka_bootstrap)
    ensure_topics(admin, [TopicSpec(source, 3)])  # the sink is the job's to create
    rows: list[tuple[None, dict[str, Any], int]] = []
    producer = make_producer(kafka_bootstrap)
    for i in range(300):
        user = f"u{i % 7}"
        value: dict[str, Any] = {"user": user, "amount": i % 13 + 1, "ts": 1_000 + i}
        if i in (100, 297):  # u2 closed and reopened; u3 closed at the end
            value = {"user": user, "close": True, "ts": 1_000 + i}
        rows.append((None, value, 1_000 + i))
        producer.produce(
            source, json.dumps(value).encode(), partition=(i % 7) % 3, timestamp=1_000 + i
        )
    assert producer.flush(30) == 0
    topology = write_renamed_topology(
        EXAMPLE, {"purchases": source, "user-totals": sink}, tmp_path / "running_totals.py"
    )
    done = subprocess.run(
        [*CLI, "run", str(topology), "--bootstrap", kafka_bootstrap, "--app-id", app, "--bounded",
         "--store", f"file://{tmp_path}/store", "--state-dir", str(tmp_path / "state")],
        capture_output=True, text=True, timeout=180, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]

    resource = ConfigResource(ResourceType.TOPIC, sink)
    config = admin.describe_configs([resource])[resource].result(timeout=30)
    assert config["cleanup.policy"].value == "compact"
    latest: dict[str, Any] = {}
    for r in read_all(kafka_bootstrap, sink):
        assert r.key is not None
        latest[r.key.decode()] = None if r.value is None else json.loads(r.value)
    expected = runpy.run_path(str(EXAMPLE))["expected_output"]({"purchases": rows})
    assert latest == expected
    assert latest["u3"] is None and latest["u2"] is not None
