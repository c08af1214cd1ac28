"""Watermark alignment across workers (global alignment through the coordinator).

Two workers (``kstream worker``, coordinator elected among them) catch up on a backlog
of four partitions written before they start (the fast one starts once the slow one
runs its tasks, and joins at a hand-over checkpoint: it waited for the whole catch-up,
24 s, until internal records were read first, kstream.worker.internalfirst — then there
was no pair of reports to compare); one worker is slow (its map sleeps per
record, set by an environment variable only it has), so without alignment across
workers the other reads its two partitions to the end while the slow one is far
behind. The workers' watermark reports on the control topic show how far each has
read: whenever both read, within the drift bound (plus a batch and the reports' lag)
of each other — the fast worker's partitions were held — and the output is exactly the
windows of every record, as a live run (partitions in step) gives.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from integration.cli_job import CLI
from integration.e2e.harness import REPO
from integration.steadyfeed import wait_for_line
from integration.test_watermark_alignment import BASE, CLOSE, STEP_MS, produce, windows
from kstream.kafka.clients import TopicSpec, ensure_topics, make_admin
from kstream.kafka.control import ControlReader
from kstream.protocol.messages import Restore, TaskFailed, WatermarkReport

PARTITIONS = 4
PER_PARTITION = 12_000
DATA_END = BASE + PER_PARTITION * STEP_MS  # past it, a watermark is the close record's
DRIFT_MS = 5000
SLOW_S = 0.0004  # per record on the slow worker: ~10 s for its two partitions

TOPOLOGY = """
import os
import time
from kstream.api import Topology, Tumbling, WatermarkStrategy

SLOW = float(os.environ.get("KSTREAM_TEST_SLOW_S", "0"))

def slow(v):
    if SLOW:
        time.sleep(SLOW)
    return v

topology = Topology("galign")
(
    topology.source(
        {source!r},
        value_serde="json",
        watermark=WatermarkStrategy(max_out_of_orderness_ms=2000, max_drift_ms={drift}),
    )
    .map(slow)
    .key_by(lambda v: v["k"], key_serde="str")
    .window(Tumbling(1000))
    .count()
    .map(lambda r: {{"k": r.key, "start": r.start, "count": r.value}})
    .to({sink!r}, key_serde="str", value_serde="json")
)
"""


def _rows(per_partition: int = PER_PARTITION) -> list[tuple[int, int, bytes]]:
    rows = [
        (p, BASE + i * STEP_MS, json.dumps({"k": f"k{(i + p) % 7}"}).encode())
        for i in range(per_partition)
        for p in range(PARTITIONS)
    ]
    return rows + [(p, CLOSE, b'{"k":"close"}') for p in range(PARTITIONS)]


def write_backlog(
    bootstrap: str, src: str, out: str, topology: Path, per_partition: int = PER_PARTITION
) -> list[tuple[int, int, bytes]]:
    """The topics, the job (``TOPOLOGY``) at ``topology``, and the backlog written: its rows."""
    ensure_topics(make_admin(bootstrap), [TopicSpec(src, PARTITIONS), TopicSpec(out, 4)])
    topology.write_text(TOPOLOGY.format(source=src, sink=out, drift=DRIFT_MS))
    rows = _rows(per_partition)
    produce(bootstrap, src, rows, 0)
    return rows


def assert_exact_windows(bootstrap: str, out: str, rows: list[tuple[int, int, bytes]]) -> None:
    """Every record counted in its window, once: the output of a live run."""
    counts: Counter[tuple[str, int]] = Counter()
    for _p, ts, v in rows:
        if ts < CLOSE:
            counts[(json.loads(v)["k"], ts - ts % 1000)] += 1
    assert windows(bootstrap, out) == Counter(
        {(k, start, c): 1 for (k, start), c in counts.items()}
    )


def _worker(
    topology: Path, bootstrap: str, app: str, tmp: Path, name: str, slow: float
) -> subprocess.Popen[bytes]:
    env = {**os.environ, "KSTREAM_TEST_SLOW_S": str(slow)}
    return subprocess.Popen(
        [*CLI, "-v", "worker", str(topology), "--bootstrap", bootstrap, "--app-id", app,
         "--store", f"file://{tmp}/store", "--state-dir", str(tmp / f"state-{name}"),
         "--interval", "0.5", "--retained", "1000", "--stop-when-idle", "4",
         "--restart-delay", "0.2"],
        cwd=REPO, env=env, stdout=(tmp / f"{name}.log").open("ab"), stderr=subprocess.STDOUT,
    )  # fmt: skip


def test_a_fast_workers_partitions_are_held_within_the_drift_of_a_slow_workers(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    src, out, app = unique_name("in"), unique_name("out"), unique_name("galign")
    topology = tmp_path / "galign.py"
    rows = write_backlog(kafka_bootstrap, src, out, topology)

    # The slow worker first, the fast one once the slow one runs its tasks: started
    # together, the fast one was sometimes up first and read most of the backlog alone
    # (no other worker's report to hold it back) before the slow one's hand-over — then
    # no pair of reports to compare (CI, twice).
    procs = {"slow": _worker(topology, kafka_bootstrap, app, tmp_path, "slow", SLOW_S)}
    try:
        wait_for_line(procs["slow"], tmp_path / "slow.log", "resumed: running ['", 120)
        procs["fast"] = _worker(topology, kafka_bootstrap, app, tmp_path, "fast", 0.0)
        for name, proc in procs.items():
            try:
                rc = proc.wait(timeout=180)
            except subprocess.TimeoutExpired:
                rc = None
            log = (tmp_path / f"{name}.log").read_text(errors="replace")
            for line in log.splitlines():  # how each joined: shown when the test fails
                if "joining the group" in line or "WARNING" in line or "ERROR" in line:
                    print(f"[galign] {name}: {line[:300]}")
            assert rc == 0, f"{name} worker: exit {rc}\n" + "\n".join(log.splitlines()[-40:])
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)

    # Each worker's slowest watermark as it reported it on the control topic: whenever
    # both workers of an attempt reported, never more than the drift bound, a batch
    # (up to 2000 records of a partition: 20 s of event time) and the reports' lag apart.
    reader = ControlReader(kafka_bootstrap, app)
    latest: dict[int, dict[str, int]] = {}
    spreads = []
    history = reader.read_to_end()
    print("[galign] control:", Counter(type(m).__name__ for m in history))
    for msg in history:  # (what went wrong when the reports never pair up)
        if isinstance(msg, TaskFailed | Restore):
            print(f"[galign] {msg}"[:400])
    for msg in history:
        if isinstance(msg, WatermarkReport):
            mine = latest.setdefault(msg.attempt, {})
            if src in msg.slowest:
                mine[msg.member] = msg.slowest[src]
            else:
                mine.pop(msg.member, None)  # nothing left to read: holds no one back
            # (a worker at the close record, far ahead by design, read all its input:
            # its last slice carried it there between two looks at the hold)
            if len(mine) == 2 and min(mine.values()) > BASE and max(mine.values()) < DATA_END:
                spreads.append(max(mine.values()) - min(mine.values()))
    reader.close()
    print(f"[galign] spreads (ms) between the workers' reports: {spreads}")
    # Both workers reported progress at once (without the hold, the fast one reads to
    # its end before the slow one has a watermark: no such pair), always close: the
    # drift, a batch and the reports' lag apart — at the start one batch more, as a worker
    # waits at most 10 s for the attempt's first bound (a loaded machine's coordinator
    # took longer once: 30.1 s) — and the drift, a batch and the lag once aligned. (A
    # partition released from a hold once ran through all it had read meanwhile, from
    # 18 s to its end: the hold is now asked again after every slice fed.)
    batch_ms = 2000 * STEP_MS
    assert spreads, spreads
    assert max(spreads) <= DRIFT_MS + 2 * batch_ms + 5000, spreads
    assert spreads[-1] <= DRIFT_MS + batch_ms + 5000, spreads

    # Every record counted in its window: the output of a live run.
    assert_exact_windows(kafka_bootstrap, out, rows)
