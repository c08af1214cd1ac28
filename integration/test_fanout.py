"""Fan-out on a real broker: a `kstream run --bounded` job whose keyed streams are each
read by several operators (after a key_by, a window, a join and a table) writes
exactly the example's expected output to every sink.

The profiles table is read by a first bounded run, the clicks and orders by a second
that continues from its state, so every table lookup sees the profiles.
"""

from __future__ import annotations

import json
import runpy
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from integration.cli_job import CLI
from integration.e2e.harness import REPO, write_renamed_topology
from integration.edge_tools import read_all
from kstream.kafka.clients import TopicSpec, ensure_topics, make_admin, make_producer

EXAMPLE = REPO / "topologies" / "fanout.py"


def _produce(bootstrap: str, topic: str, records: list[tuple[str, Any, int]]) -> None:
    p = make_producer(bootstrap)
    for key, value, ts in records:
        p.produce(topic, json.dumps(value).encode(), key.encode(), timestamp=ts)
    assert p.flush(30) == 0


def _run_bounded(topology: Path, bootstrap: str, app: str, tmp: Path) -> None:
    done = subprocess.run(
        [*CLI, "run", str(topology), "--bootstrap", bootstrap, "--app-id", app, "--bounded",
         "--store", f"file://{tmp}/store", "--state-dir", str(tmp / "state")],
        capture_output=True, text=True, timeout=180, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]


def test_fan_out_after_key_by_window_join_and_table_writes_every_sink_exactly(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    example = runpy.run_path(str(EXAMPLE))
    sample: dict[str, list[tuple[str, Any, int]]] = example["SAMPLE"]
    expected: dict[str, list[tuple[Any, Any]]] = example["EXPECTED"]
    names = {topic: unique_name(topic) for topic in [*sample, *expected]}
    ensure_topics(make_admin(kafka_bootstrap), [TopicSpec(t, 2) for t in names.values()])
    topology = write_renamed_topology(EXAMPLE, names, tmp_path / "fanout_renamed.py")
    app = unique_name("app")

    _produce(kafka_bootstrap, names["profiles"], sample["profiles"])
    _run_bounded(topology, kafka_bootstrap, app, tmp_path)
    _produce(kafka_bootstrap, names["clicks"], sample["clicks"])
    _produce(kafka_bootstrap, names["orders"], sample["orders"])
    _run_bounded(topology, kafka_bootstrap, app, tmp_path)

    written = {}
    for topic in expected:
        records = read_all(kafka_bootstrap, names[topic])
        written[topic] = sorted(
            (r.key.decode() if r.key is not None else None, json.loads(r.value or b"null"))
            for r in records
        )
    assert written == expected
