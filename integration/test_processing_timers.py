"""Processing-time timers on a real worker: `kstream run` passes the wall clock to its
tasks, so a timer registered at "processing time + 300 ms" fires about 300 ms later,
once per key and time, and its output is published exactly once by the final
checkpoint of an idle stop."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from integration.e2e.harness import REPO
from integration.edge_tools import read_all
from integration.test_graceful_stop import CLI
from kstream.kafka.clients import TopicSpec, ensure_topics, make_admin, make_producer

TOPOLOGY = """
from kstream.api import Topology, ValueState

class Later:
    def process(self, key, value, ts, state, out):
        if state["at"].get() is None:
            at = state.processing_time + 300
            state["at"].set(at)
            state.register_processing_timer(at)

    def on_timer(self, key, at, state, out):
        out({{"key": key, "at": at, "domain": state.time_domain, "now": state.processing_time}})

topology = Topology("later")
topology.source({src!r}, keyed=True).process(Later, state={{"at": ValueState()}}).to({dst!r})
"""


def test_processing_time_timers_fire_on_the_wall_clock(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    src, dst, app = unique_name("in"), unique_name("out"), unique_name("app")
    ensure_topics(make_admin(kafka_bootstrap), [TopicSpec(src, 2), TopicSpec(dst, 2)])
    topology = tmp_path / "later.py"
    topology.write_text(TOPOLOGY.format(src=src, dst=dst))
    producer = make_producer(kafka_bootstrap)
    for i in range(60):  # 20 keys, 3 records each: one timer per key
        producer.produce(src, json.dumps(i).encode(), f"k{i % 20}".encode(), partition=i % 20 % 2)
    assert producer.flush(30) == 0
    started_ms = int(time.time() * 1000)
    log = tmp_path / "run.log"
    done = subprocess.run(
        [*CLI, "-v", "run", str(topology), "--bootstrap", kafka_bootstrap, "--app-id", app,
         "--interval", "120", "--store", f"file://{tmp_path}/store",
         "--state-dir", str(tmp_path / "state"), "--stop-when-idle", "3"],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, log.read_text()[-3000:]
    ended_ms = int(time.time() * 1000)
    rows = [json.loads(r.value) for r in read_all(kafka_bootstrap, dst) if r.value]
    assert sorted(r["key"] for r in rows) == sorted(f"k{i}" for i in range(20))
    for r in rows:
        assert r["domain"] == "processing"
        assert started_ms < r["at"] <= r["now"] < ended_ms  # epoch ms, fired once due
