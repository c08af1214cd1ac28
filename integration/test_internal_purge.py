"""Internal repartition topics are purged below what retained checkpoints restore from."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

from integration.cli_job import CLI
from integration.e2e.harness import REPO, write_renamed_topology
from kstream.checkpointstorage.metadata import list_checkpoints, purgeable_offsets
from kstream.checkpointstorage.urls import open_store
from kstream.kafka.clients import (
    TopicSpec,
    ensure_topics,
    make_admin,
    make_consumer,
    make_producer,
    watermark_offsets,
)

T0 = 1_767_225_600_000


def test_internal_topics_are_purged_below_the_retained_checkpoints(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    lines, counts, app = unique_name("lines"), unique_name("counts"), unique_name("app")
    ensure_topics(make_admin(kafka_bootstrap), [TopicSpec(lines, 2), TopicSpec(counts, 2)])
    topology = write_renamed_topology(
        REPO / "topologies" / "wordcount.py", {"lines": lines, "word-counts": counts},
        tmp_path / "wc.py",
    )  # fmt: skip
    p = make_producer(kafka_bootstrap)
    for i in range(400):
        p.produce(lines, b"a b c d", str(i).encode(), partition=i % 2, timestamp=T0 + i * 1000)
    assert p.flush(30) == 0
    store = f"file://{tmp_path}/store"
    run = subprocess.run(
        [*CLI, "run", str(topology), "--bootstrap", kafka_bootstrap, "--app-id", app,
         "--store", store, "--state-dir", str(tmp_path / "state"), "--interval", "0.5",
         "--retained", "1", "--stop-when-idle", "2"],
        capture_output=True, text=True, timeout=180, cwd=REPO,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]

    retained = list_checkpoints(open_store(store), app)
    assert len(retained) == 1
    expected = purgeable_offsets(retained)
    internal = f"{app}.stage0.repartition"
    assert sorted(expected) == [(internal, 0), (internal, 1)]
    c = make_consumer(kafka_bootstrap, unique_name("probe"))
    try:
        for (topic, part), offset in expected.items():
            low, high = watermark_offsets(c, topic, part)
            # 400 lines x 4 words went through: the purge point is well inside the topic.
            assert 0 < offset <= high
            assert low == offset, f"{topic}[{part}] starts at {low}, expected {offset}"
    finally:
        c.close()
