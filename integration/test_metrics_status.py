"""Operating a running job on a real broker: the /metrics counters equal the job's exact
counts, and `kstream status --json` describes it.

A coordinator and a worker run as processes, each serving /metrics. The input is
known record by record: good records, undecodable ones (dead letters) and, once the
watermark has passed their window, late ones. The heartbeat timeout is longer than
the test, so stopping the worker at the end causes no failover while the
coordinator's counters are compared with the control topic.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from integration.cli_job import CLI
from integration.e2e.harness import REPO
from kstream.kafka.clients import (
    TopicSpec,
    committed_group_offsets,
    ensure_topics,
    make_admin,
    make_producer,
)
from kstream.kafka.control import ControlReader
from kstream.names import group_id
from kstream.protocol.messages import CheckpointAborted, CheckpointCompleted, Restore

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z, a window boundary
TOPOLOGY = """
from kstream.api import Topology, Tumbling, WatermarkStrategy

topology = Topology({app!r})
(
    topology.source({src!r}, value_serde="json",
                    watermark=WatermarkStrategy(max_out_of_orderness_ms=1000))
    .key_by(lambda v: v["k"], key_serde="str")
    .window(Tumbling(60_000))
    .count()
    .map(lambda r: {{"k": r.key, "start": r.start, "count": r.value}})
    .to({dst!r}, key_serde="str", value_serde="json")
)
"""
GOOD, BAD, LATE = 300, 7, 11

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _scrape(port: int) -> Samples:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: Samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def _value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def _wait(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}; last: {last!r}")


def test_metrics_equal_the_jobs_exact_counts_and_status_describes_it(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    src, dst, app = unique_name("in"), unique_name("out"), unique_name("app")
    ensure_topics(make_admin(kafka_bootstrap), [TopicSpec(src, 1), TopicSpec(dst, 1)])
    topology = tmp_path / "counts.py"
    topology.write_text(TOPOLOGY.format(app=app, src=src, dst=dst))
    store = f"file://{tmp_path}/store"
    common = ["--bootstrap", kafka_bootstrap, "--app-id", app, "--store", store,
              "--interval", "0.5", "--timeout", "60", "--metrics-host", "127.0.0.1"]  # fmt: skip
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str, *args: str) -> tuple[subprocess.Popen[bytes], Path, int]:
        log = tmp_path / f"{name}.log"
        low = _free_port()
        proc = subprocess.Popen(
            [*CLI, "-v", *args, *common, "--metrics-port", f"{low}-{low + 50}"],
            stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=REPO,
        )  # fmt: skip
        procs.append(proc)
        found = _wait(
            f"{name}'s metrics endpoint",
            lambda: (
                proc.poll() is None
                and re.search(r"metrics at http://127\.0\.0\.1:(\d+)/metrics", log.read_text())
            ),
        )
        return proc, log, int(found.group(1))

    try:
        coord, coord_log, coord_port = start(
            "coordinator", "coordinator", str(topology), "--heartbeat-timeout", "600"
        )
        worker, worker_log, worker_port = start(
            "worker", "worker", str(topology), "--state-dir", str(tmp_path / "state"),
            "--coordinator", "external",  # the coordinator above is deployed on its own
        )  # fmt: skip
        producer = make_producer(kafka_bootstrap)
        # 1. Good records over 5 minutes of event time, with undecodable ones among them.
        for i in range(GOOD):
            value = json.dumps({"k": f"k{i % 5}"}).encode()
            producer.produce(src, value, timestamp=T0 + i * 1000)
            if i % 40 == 0 and i // 40 < BAD:
                producer.produce(src, b"{not json", timestamp=T0 + i * 1000)
        assert producer.flush(30) == 0
        total = GOOD + BAD
        w = _wait(
            "every record read and the watermark past the first window",
            lambda: (
                (s := _scrape(worker_port))
                and _value(s, "kstream_records_in_total", task="stage0-0", topic=src) == total
                and _value(s, "kstream_event_time_lag_seconds", task="stage1-0") > 0
                and s
            ),
        )
        # 2. Late records: their window [T0, T0+60s) fired long ago.
        for i in range(LATE):
            producer.produce(src, json.dumps({"k": "late"}).encode(), timestamp=T0 + i)
        assert producer.flush(30) == 0
        total += LATE
        operator = _wait(
            "the late records counted",
            lambda: [
                dict(labels)["operator"]
                for (name, labels), v in _scrape(worker_port).items()
                if name == "kstream_late_records_dropped_total" and v == LATE
            ],
        )
        assert operator == ["stage1.window0"]  # its stable id (docs/guide.md: stable operator ids)

        # 3. kstream status --json against the running job: wait for a checkpoint that
        #    covers every record (no lag left), then check the whole picture.
        def status() -> dict[str, Any]:
            out = subprocess.run(
                [*CLI, "status", "--app-id", app, "--bootstrap", kafka_bootstrap, "--store", store, "--json"],
                capture_output=True, text=True, cwd=REPO, timeout=60,
            )  # fmt: skip
            assert out.returncode == 0, out.stderr[-3000:]
            doc: dict[str, Any] = json.loads(out.stdout)
            return doc

        st = _wait("status showing no lag", lambda: (d := status())["total_lag"] == 0 and d)
        assert (st["app_id"], st["phase"], st["attempt"]) == (app, "running", 1)
        assert st["lag"] == [
            {"topic": src, "partition": 0, "checkpoint_offset": total, "end_offset": total,
             "lag": 0}
        ]  # fmt: skip
        (member,) = st["workers"]
        assert member["tasks"] == member["owns"] == ["stage0-0", "stage1-0"]
        assert member["last_heartbeat_s"] < 30
        assert st["coordinator"]["last_seen_s"] < 30
        assert st["checkpoints"] and all(c["status"] == "completed" for c in st["checkpoints"])
        assert [e["kind"] for e in st["events"]] == ["restore"]  # the job's start, nothing else
        assert st["events"][0]["reason"] == "to checkpoint None: job start"

        # 4. The worker's counters are exact and stay exact (nothing counted twice).
        for samples in (w, _scrape(worker_port)):
            assert _value(samples, "kstream_tasks_running") == 2
        s = _scrape(worker_port)
        assert _value(s, "kstream_records_in_total", task="stage0-0", topic=src) == total
        assert _value(s, "kstream_dead_letters_total", topic=src, reason="deserialize") == BAD
        assert sum(v for (n, _), v in s.items() if n == "kstream_dead_letters_total") == BAD
        assert (
            _value(s, "kstream_late_records_dropped_total", task="stage1-0", operator=operator[0])
            == LATE
        )
        internal = f"{app}.stage0.repartition"
        good_in = GOOD + LATE
        assert _value(s, "kstream_records_out_total", task="stage0-0", topic=internal) == good_in
        assert _value(s, "kstream_task_restores_total", source="start") == 2
        assert _value(s, "kstream_consumer_lag_records", topic=src, partition="0") == 0
        assert _value(s, "kstream_state_size_bytes", task="stage1-0") > 0

        # 5. Stop the worker (a final checkpoint), then compare the coordinator's counters
        #    with the control topic: no failover follows (heartbeat timeout 600 s).
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0, worker_log.read_text()[-3000:]
        reader = ControlReader(kafka_bootstrap, app)
        try:
            history = reader.read_to_end()
        finally:
            reader.close()
        completed = {m.checkpoint_id for m in history if isinstance(m, CheckpointCompleted)}
        aborted = [m for m in history if isinstance(m, CheckpointAborted)]
        c = _scrape(coord_port)
        assert completed and _value(c, "kstream_checkpoints_completed_total") == len(completed)
        assert _value(c, "kstream_last_completed_checkpoint_id") == max(completed)
        assert _value(c, "kstream_checkpoint_duration_seconds_count") == len(completed)
        failed = sum(v for (n, _), v in c.items() if n == "kstream_checkpoints_failed_total")
        gone = sum(v for (n, _), v in c.items() if n == "kstream_checkpoints_aborted_total")
        assert failed + gone == len(aborted)
        assert _value(c, "kstream_job_restarts_total", cause="start") == 1
        assert [m.attempt for m in history if isinstance(m, Restore)] == [1]
        assert _value(c, "kstream_job_attempt") == 1
        coord.send_signal(signal.SIGTERM)
        assert coord.wait(timeout=30) == 0, coord_log.read_text()[-3000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_status_of_a_job_without_checkpoints_shows_lag_from_committed_offsets(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    src, dst, app = unique_name("in"), unique_name("out"), unique_name("app")
    ensure_topics(make_admin(kafka_bootstrap), [TopicSpec(src, 1), TopicSpec(dst, 1)])
    topology = tmp_path / "upper.py"
    topology.write_text(
        "from kstream.api import Topology\n"
        f"topology = Topology({app!r})\n"
        f"topology.source({src!r}, value_serde='str').map(str.upper).to({dst!r}, "
        "value_serde='str')\n"
    )
    producer = make_producer(kafka_bootstrap)
    for i in range(50):
        producer.produce(src, f"r{i}".encode())
    assert producer.flush(30) == 0
    # Checkpointing off: the worker commits the group's offsets about every second.
    log = tmp_path / "worker.log"
    worker = subprocess.Popen(
        [*CLI, "-v", "worker", str(topology), "--bootstrap", kafka_bootstrap, "--app-id", app,
         "--no-checkpointing", "--store", f"file://{tmp_path}/store",
         "--state-dir", str(tmp_path / "state")],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=REPO,
    )  # fmt: skip
    try:
        admin = make_admin(kafka_bootstrap)
        _wait(
            "the worker to commit offset 50",
            lambda: (
                worker.poll() is None
                and committed_group_offsets(admin, group_id(app)) == {(src, 0): 50}
            ),
        )
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0, log.read_text()[-3000:]
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    for i in range(50, 60):  # 10 more, not read by anyone
        producer.produce(src, f"r{i}".encode())
    assert producer.flush(30) == 0
    out = subprocess.run(
        [*CLI, "status", "--app-id", app, "--bootstrap", kafka_bootstrap, "--store",
         f"file://{tmp_path}/store", "--json"],
        capture_output=True, text=True, cwd=REPO, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    st = json.loads(out.stdout)
    assert (st["phase"], st["lag_basis"], st["checkpoints"]) == ("not started", "committed", [])
    assert st["lag"] == [
        {"topic": src, "partition": 0, "checkpoint_offset": 50, "end_offset": 60, "lag": 10}
    ]
