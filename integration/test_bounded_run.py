"""Bounded (batch) runs of a real job: `kstream run --bounded` on a real broker.

A bounded run reads every source up to the end offsets seen at start, fires every
window at the end of input, stores its final state once (no barrier) and publishes
its exactly-once output; the next bounded run continues from that state.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

from integration.cli_job import CLI
from integration.e2e.harness import REPO, write_renamed_topology
from integration.edge_tools import read_all
from kstream.checkpointstorage.layout import numbered_manifest
from kstream.kafka.clients import TopicSpec, ensure_topics, make_admin, make_producer

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z, a window boundary


def _produce(bootstrap: str, topic: str, lines: list[tuple[str, int]]) -> None:
    p = make_producer(bootstrap)
    for i, (line, ts) in enumerate(lines):
        p.produce(topic, line.encode(), str(i).encode(), partition=i % 3, timestamp=ts)
    assert p.flush(30) == 0


def _run(topology: Path, bootstrap: str, app: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "run", str(topology), "--bootstrap", bootstrap, "--app-id", app, "--bounded",
         "--store", f"file://{tmp}/store", "--state-dir", str(tmp / "state")],
        capture_output=True, text=True, timeout=180, cwd=REPO,
    )  # fmt: skip


def _counts(bootstrap: str, topic: str) -> list[tuple[str, int, int]]:
    out = []
    for r in read_all(bootstrap, topic):
        assert r.value is not None
        v = json.loads(r.value)
        out.append((v["word"], v["start"], v["count"]))
    return sorted(out)


def test_a_bounded_run_fires_every_window_and_the_next_run_continues_from_its_state(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    lines_topic, counts_topic, app = unique_name("lines"), unique_name("counts"), unique_name("app")
    ensure_topics(
        make_admin(kafka_bootstrap), [TopicSpec(lines_topic, 3), TopicSpec(counts_topic, 3)]
    )
    topology = write_renamed_topology(
        REPO / "topologies" / "wordcount.py",
        {"lines": lines_topic, "word-counts": counts_topic},
        tmp_path / "wordcount_renamed.py",
    )
    # Window [T0, T0+60s): "a" x3, "b" x1; window [T0+60s, T0+120s): "a" x1. The last
    # window never sees a later record: only the end of input fires it.
    _produce(
        kafka_bootstrap,
        lines_topic,
        [("a b", T0), ("a", T0 + 10_000), ("a", T0 + 59_999), ("a", T0 + 60_000)],
    )
    first = _run(topology, kafka_bootstrap, app, tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    assert _counts(kafka_bootstrap, counts_topic) == [
        ("a", T0, 3),
        ("a", T0 + 60_000, 1),
        ("b", T0, 1),
    ]
    finals = [p.name for p in (tmp_path / "store" / app / "tasks" / "stage1-0").iterdir()]
    assert [numbered_manifest(name) for name in finals] == [("final", 1)], finals

    # Nothing new: the second run starts where the first ended and adds nothing.
    second = _run(topology, kafka_bootstrap, app, tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    assert len(read_all(kafka_bootstrap, counts_topic)) == 3

    # New input in a later window: only it is counted, from the stored state onwards.
    _produce(kafka_bootstrap, lines_topic, [("c c", T0 + 180_000)])
    third = _run(topology, kafka_bootstrap, app, tmp_path)
    assert third.returncode == 0, third.stderr[-3000:]
    assert _counts(kafka_bootstrap, counts_topic) == [
        ("a", T0, 3),
        ("a", T0 + 60_000, 1),
        ("b", T0, 1),
        ("c", T0 + 180_000, 2),
    ]
