"""Event time does not depend on how fast partitions are read (issue 14).

One input — four partitions, disorder within the bound, and records far behind the
drift bound — and three runs of the same job (source -> key_by -> 1 s tumbling count,
exactly-once sink): *live* (the input is written while the job runs, partitions in
step), *backlog* (written before the job starts: the consumer may read one partition
far ahead of the others) and *backlog with kill -9* (the job process is killed twice
during its catch-up and restarted; it restores from the last checkpoint). Watermark
alignment keeps the partitions of a catch-up within the drift bound of each other, and
per-record watermarks (restored with the state) judge every record alike, so the
three committed outputs are identical, record for record — also in which far-behind
records were dropped as late.

A slow map (0.2 ms per record) makes the catch-up last a few seconds, long enough to
kill it.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from integration.cli_job import CLI
from integration.e2e.harness import REPO, wait_until
from integration.edge_tools import read_all
from kstream.kafka.clients import TopicSpec, ensure_topics, make_admin, make_producer

PARTITIONS = 4
PER_PARTITION = 6000
STEP_MS = 10  # event time between a partition's records
BASE = 1_767_225_600_000
JITTER_MS = 1500  # disorder within max_out_of_orderness_ms (2000)
BEHIND_MS = 300_000  # far behind: 60 x the drift bound (5 s)
WARM_UP = 3000  # far-behind records only after every partition read its first batches
CLOSE = BASE + 10_000_000  # closing records: fire every real window

TOPOLOGY = """
import time
from kstream.api import Topology, Tumbling, WatermarkStrategy

def slow(v):
    time.sleep(0.0002)
    return v

topology = Topology("align")
(
    topology.source(
        {source!r},
        value_serde="json",
        watermark=WatermarkStrategy(max_out_of_orderness_ms=2000, max_drift_ms=5000),
    )
    .map(slow)
    .key_by(lambda v: v["k"], key_serde="str")
    .window(Tumbling(1000))
    .count()
    .map(lambda r: {{"k": r.key, "start": r.start, "count": r.value}})
    .to({sink!r}, key_serde="str", value_serde="json")
)
"""


def make_input(seed: int) -> list[tuple[int, int, bytes]]:
    """``(partition, timestamp, value)`` in the order a live producer writes them:
    partitions in step, record i of each partition at ``BASE + i * STEP_MS`` give or
    take the jitter; every 97th record after the warm-up is far behind."""
    rnd = random.Random(seed)
    rows = []
    for i in range(PER_PARTITION):
        for p in range(PARTITIONS):
            t = BASE + i * STEP_MS + rnd.randrange(JITTER_MS)
            if i >= WARM_UP and rnd.randrange(97) == 0:
                t -= BEHIND_MS
            rows.append((p, t, json.dumps({"k": f"k{(i + p) % 7}", "i": i}).encode()))
    rows += [(p, CLOSE, b'{"k":"close","i":-1}') for p in range(PARTITIONS)]
    return rows


def produce(bootstrap: str, topic: str, rows: list[tuple[int, int, bytes]], pace: float) -> None:
    """Write ``rows`` in order, ``pace`` records per second (0: as fast as possible)."""
    p = make_producer(bootstrap, extra={"linger.ms": 5})
    start = time.monotonic()
    for n, (part, ts, value) in enumerate(rows):
        p.produce(topic, value, None, partition=part, timestamp=ts)
        if pace and n % 200 == 0:
            p.poll(0)
            ahead = start + n / pace - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)  # pacing a producer, not synchronising a test
    assert p.flush(60) == 0


def job(topology: Path, bootstrap: str, app: str, tmp: Path) -> subprocess.Popen[bytes]:
    log = (tmp / f"{app}.log").open("ab")
    return subprocess.Popen(
        [*CLI, "-v", "run", str(topology), "--bootstrap", bootstrap, "--app-id", app,
         "--store", f"file://{tmp}/store-{app}", "--state-dir", str(tmp / f"state-{app}"),
         "--interval", "0.5", "--stop-when-idle", "4", "--restart-delay", "0.2"],
        cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip


def finish(proc: subprocess.Popen[bytes], what: str, tmp: Path, app: str) -> None:
    try:
        rc = proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
        rc = None
    tail = (tmp / f"{app}.log").read_text(errors="replace").splitlines()[-40:]
    assert rc == 0, f"{what}: exit {rc}\n" + "\n".join(tail)


def checkpoints(tmp: Path, app: str) -> list[int]:
    d = tmp / f"store-{app}" / app / "checkpoints"
    if not d.exists():
        return []
    return sorted(int(p.stem.split("-")[1]) for p in d.glob("chk-*.json"))


def wait_for_checkpoint(tmp: Path, app: str, above: int, proc: subprocess.Popen[bytes]) -> None:
    """Until a checkpoint newer than ``above`` completed (or the job exited)."""
    wait_until(
        f"a checkpoint above {above} of {app}",
        lambda: (checkpoints(tmp, app) or [0])[-1] > above or proc.poll() is not None,
        120,
        lambda: f"checkpoints {checkpoints(tmp, app)}, exit code {proc.poll()}",
    )


def windows(bootstrap: str, topic: str) -> Counter[tuple[str, int, int]]:
    out: Counter[tuple[str, int, int]] = Counter()
    for r in read_all(bootstrap, topic):
        assert r.value is not None
        v = json.loads(r.value)
        if v["start"] < CLOSE - 1000:
            out[(v["k"], v["start"], v["count"])] += 1
    return out


def test_live_backlog_and_killed_catch_up_give_identical_output(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    seed = int(os.environ.get("KSTREAM_ALIGN_SEED", random.randrange(1_000_000)))
    print(f"[align] seed {seed}")
    rows = make_input(seed)
    admin = make_admin(kafka_bootstrap)
    runs = {name: (unique_name(f"in-{name}"), unique_name(f"out-{name}"), unique_name(name))
            for name in ("live", "backlog", "killed")}  # fmt: skip
    ensure_topics(
        admin, [TopicSpec(t, PARTITIONS) for src, out, _ in runs.values() for t in (src, out)]
    )
    topo: dict[str, Path] = {}
    for name, (src, out, _) in runs.items():
        topo[name] = tmp_path / f"align_{name}.py"
        topo[name].write_text(TOPOLOGY.format(source=src, sink=out))

    # Backlog inputs first, then the live run while its input is written.
    for name in ("backlog", "killed"):
        produce(kafka_bootstrap, runs[name][0], rows, 0)
    src, out, app = runs["live"]
    live = job(topo["live"], kafka_bootstrap, app, tmp_path)
    wait_for_checkpoint(tmp_path, app, above=0, proc=live)
    produce(kafka_bootstrap, src, rows, pace=2500)
    finish(live, "live run", tmp_path, app)

    src, out, app = runs["backlog"]
    finish(job(topo["backlog"], kafka_bootstrap, app, tmp_path), "backlog run", tmp_path, app)

    # Kill -9 twice during the catch-up, each time after a new checkpoint completed.
    src, out, app = runs["killed"]
    seen = 0
    for _ in range(2):
        proc = job(topo["killed"], kafka_bootstrap, app, tmp_path)
        wait_for_checkpoint(tmp_path, app, above=seen, proc=proc)
        assert proc.poll() is None, "the job finished before it could be killed"
        seen = checkpoints(tmp_path, app)[-1]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        print(f"[align] kill -9 after checkpoint {seen}")
    finish(job(topo["killed"], kafka_bootstrap, app, tmp_path), "run after kills", tmp_path, app)

    results = {name: windows(kafka_bootstrap, runs[name][1]) for name in runs}
    # Every record within the disorder bound is counted, every far-behind one is late.
    on_time = sum(1 for _, ts, _ in rows if BASE <= ts < CLOSE)
    assert len(rows) - PARTITIONS - on_time > 50  # far-behind records were written
    assert sum(count for _, _, count in results["live"]) == on_time
    assert results["backlog"] == results["live"], "backlog differs from live"
    assert results["killed"] == results["live"], "killed catch-up differs from live"


COUNTS = """
from kstream.api import Topology, WatermarkStrategy

topology = Topology("align_counts")
(
    topology.source(
        {source!r},
        value_serde="json",
        watermark=WatermarkStrategy(max_out_of_orderness_ms=2000, max_drift_ms=5000),
    )
    .key_by(lambda v: v["k"], key_serde="str")
    .count()
    .to({sink!r}, key_serde="str", value_serde="json")
)
"""


def test_an_empty_partition_holds_no_one_back(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    """A backlog on three of four partitions, the fourth empty, the input spanning six
    times the drift bound: every record is read and counted. An empty partition never
    delivers, so librdkafka gives it no read position; taken for a partition with records
    left, it held the other three back after their first batches for good (a
    1024-partition input of 1 000 keys has ~380 empty partitions: the job read 92 % and
    stalled). A running count per key, no window: what is read is counted, whatever
    event time does (an empty partition holds event time back for good unless its
    strategy has an idle_timeout_s, as in Flink)."""
    src, out, app = unique_name("in-empty"), unique_name("out-empty"), unique_name("empty")
    ensure_topics(make_admin(kafka_bootstrap), [TopicSpec(src, PARTITIONS), TopicSpec(out, 4)])
    per_partition = 3000  # 30 s of event time at STEP_MS: 6 x the 5 s drift bound
    rows = [
        (p, BASE + i * STEP_MS, json.dumps({"k": f"k{(i + p) % 7}", "i": i}).encode())
        for i in range(per_partition)
        for p in range(PARTITIONS - 1)
    ]
    produce(kafka_bootstrap, src, rows, 0)
    topology = tmp_path / "align_empty.py"
    topology.write_text(COUNTS.format(source=src, sink=out))
    finish(job(topology, kafka_bootstrap, app, tmp_path), "backlog run", tmp_path, app)
    final: dict[bytes | None, int] = {}
    for r in read_all(kafka_bootstrap, out):
        assert r.value is not None
        final[r.key] = max(final.get(r.key, 0), json.loads(r.value))
    assert len(final) == 7
    assert sum(final.values()) == per_partition * (PARTITIONS - 1)
