"""Rescaling on a real broker (issue 45). A keyed stage, with input flowing: a hopping-window
word count runs its window stage on 4 tasks; ``kstream savepoint --stop``; it continues
from the savepoint on 12 tasks (``key_by(partitions=12)``, a new app id: its repartition
topic is new), savepoints again and continues on 3. The exact ``read_committed`` output
of the three runs together equals plain-Python word count — the output of a job that
never rescaled: no window count restarts at zero, none is lost or doubled. A source
stage: the input topic grows from 4 to 12 partitions under the same app id, the counts
are exact too; its new partitions are read from the beginning, or from a time given.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from confluent_kafka.admin import NewPartitions

from integration.cli_job import CLI
from integration.e2e.harness import REPO
from integration.edge_tools import read_all
from integration.steadyfeed import SavepointRuns, SteadyFeed, wait_for_line, wait_for_output
from kstream.checkpointstorage.savepoints import read_savepoint
from kstream.checkpointstorage.urls import open_store
from kstream.kafka.clients import TopicSpec, ensure_topics, make_admin, make_producer

WORDS = tuple(f"w{i:02d}" for i in range(40))  # enough keys to spread over 12 tasks
BASE = 1_600_000_000_000
STEP_MS, WINDOW_MS = 10, 1_000  # hopping windows of 2 s every 1 s: any cut is inside one
END_TS = BASE + 10_000_000  # the end marker's event time: every data window fires
PARTITIONS = (4, 12, 3)  # the window stage's tasks in each run

TOPOLOGY = """
from kstream.api import Hopping, Topology, WatermarkStrategy

topology = Topology("wc")
lines = topology.source(
    {src!r}, value_serde="str", timestamp=lambda v, _ts: int(v.split()[1]),
    watermark=WatermarkStrategy(max_out_of_orderness_ms=0, idle_timeout_s=None),
)
(
    lines.map(lambda v: v.split()[0])
    .key_by(lambda w: w, key_serde="str", partitions={partitions})
    .window(Hopping({window} * 2, {window}), name="counts")
    .count()
    .map(lambda r: {{"word": r.key, "start": r.start, "count": r.value, "run": {run}}})
    .to({dst!r}, key_serde="str", value_serde="json")
)
"""


def iso(ms: int) -> str:
    """Epoch ms as ISO 8601 (what ``--new-partitions-from`` takes besides epoch ms)."""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat()


def _line(i: int) -> tuple[int, str]:
    """Record i: (partition, "word event_time")."""
    return i % 2, f"{WORDS[(i * 7 + i // 3) % len(WORDS)]} {BASE + i * STEP_MS}"


def test_a_window_stage_rescaled_4_12_3_with_input_flowing_counts_exactly(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    src = unique_name("lines")
    dsts = [unique_name(f"counts{n}") for n in range(3)]
    apps = [unique_name(f"wc{n}") for n in range(3)]
    ensure_topics(make_admin(kafka_bootstrap), [TopicSpec(t, 2) for t in (src, *dsts)])
    for run, n in enumerate(PARTITIONS):
        (tmp_path / f"r{run}.py").write_text(
            TOPOLOGY.format(src=src, dst=dsts[run], window=WINDOW_MS, partitions=n, run=run)
        )
    store_url = f"file://{tmp_path}/store"
    runs = SavepointRuns(tmp_path, kafka_bootstrap, store_url, apps)

    def start(run: int, *extra: str) -> tuple[subprocess.Popen[bytes], Path]:
        return runs.start(run, *extra)

    def savepoint_stop(run: int, proc: subprocess.Popen[bytes], log: Path) -> str:
        wait_for_output(kafka_bootstrap, dsts[run], proc, log, 90)  # some committed first
        return runs.savepoint_stop(run, proc, log)

    with SteadyFeed(kafka_bootstrap, src, _line) as feed:  # ~400 records/s throughout
        r0, log0 = start(0)
        wait_for_line(r0, log0, "resumed: running", 90)
        sp0 = savepoint_stop(0, r0, log0)
        r1, log1 = start(1, "--from-savepoint", sp0)
        wait_for_line(r1, log1, "resumed: running", 120)
        assert "rescaling savepoint" in log1.read_text()
        sp1 = savepoint_stop(1, r1, log1)
        saved = read_savepoint(open_store(store_url), sp1)
        assert sorted(t for t in saved.tasks if t.startswith("stage1-")) == sorted(
            f"stage1-{q}" for q in range(12)
        )
        r2, log2 = start(2, "--from-savepoint", sp1, "--stop-when-idle", "4")
        wait_for_line(r2, log2, "resumed: running", 120)
        time.sleep(2)  # input keeps flowing into the last run (the assertions hold for any)
    p = make_producer(kafka_bootstrap)
    for part in (0, 1):
        p.produce(src, f"zzend {END_TS}".encode(), partition=part)
    assert p.flush(30) == 0
    assert r2.wait(timeout=120) == 0, log2.read_text()[-4000:]

    expected: Counter[tuple[str, int]] = Counter()
    for i in range(feed.produced):
        word, ts = _line(i)[1].split()
        first = int(ts) - (int(ts) - BASE) % WINDOW_MS
        for window in ((word, first - WINDOW_MS), (word, first)):  # hopping: 2 windows each
            expected[window] += 1
    rows = [json.loads(r.value) for d in dsts for r in read_all(kafka_bootstrap, d) if r.value]
    keys = Counter((r["word"], r["start"]) for r in rows)
    assert [k for k, n in keys.items() if n > 1] == []  # no window emitted twice
    got = {(r["word"], r["start"]): r["count"] for r in rows if r["word"] != "zzend"}
    assert got == dict(expected)  # no count restarted at zero, none lost
    assert {r["run"] for r in rows} == {0, 1, 2}  # every run emitted windows


SOURCE_TOPOLOGY = """
from kstream.api import Hopping, Topology, WatermarkStrategy

topology = Topology("wc")
(
    topology.source(
        {src!r}, keyed=True, value_serde="str", timestamp=lambda v, _ts: int(v),
        watermark=WatermarkStrategy(max_out_of_orderness_ms=0, idle_timeout_s=1.0),
    )
    .window(Hopping({window} * 2, {window}), name="counts")
    .count()
    .map(lambda r: {{"word": r.key, "start": r.start, "count": r.value}})
    .to({dst!r}, key_serde="str", value_serde="json")
)
"""


@pytest.mark.parametrize(
    "new_from_time", [False, True], ids=["new-from-beginning", "new-from-time"]
)
def test_a_source_topic_grown_4_to_12_keeps_every_count_under_the_same_app(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path, new_from_time: bool
) -> None:
    """The input topic grows from 4 to 12 partitions (its producers use Kafka's default
    partitioner, murmur2); the job is stopped with a savepoint and started from it on
    the new count under the same app id: its window state is redistributed to 12 tasks,
    old partitions resume at their offsets, new ones are read from the beginning — or,
    with ``--new-partitions-from TIME``, from their first record stamped at or after
    TIME: records written to them before (Kafka timestamps an hour earlier) are skipped."""
    src, dst, app = unique_name("keyed"), unique_name("counts"), unique_name("wc")
    admin = make_admin(kafka_bootstrap)
    ensure_topics(admin, [TopicSpec(src, 4), TopicSpec(dst, 2)])
    (tmp_path / "job.py").write_text(SOURCE_TOPOLOGY.format(src=src, dst=dst, window=WINDOW_MS))
    store_url = f"file://{tmp_path}/store"
    common = ["--bootstrap", kafka_bootstrap, "--store", store_url, "--interval", "1",
              "--app-id", app]  # fmt: skip
    sent: list[tuple[str, int]] = []
    producer = make_producer(kafka_bootstrap, extra={"partitioner": "murmur2_random"})

    def produce(first: int, last: int) -> None:
        for i in range(first, last):  # event time rises per key: nothing is late
            word, ts = WORDS[(i * 7 + i // 3) % len(WORDS)], BASE + i * STEP_MS
            producer.produce(src, str(ts).encode(), key=word.encode())
            sent.append((word, ts))
        assert producer.flush(30) == 0

    def run(name: str, *extra: str) -> tuple[subprocess.Popen[bytes], Path]:
        log = tmp_path / f"{name}.log"
        proc = subprocess.Popen(
            [*CLI, "-v", "run", str(tmp_path / "job.py"), *common, "--state-dir",
             str(tmp_path / name), *extra],
            stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=REPO,
        )  # fmt: skip
        return proc, log

    produce(0, 3000)
    before, log0 = run("before")
    wait_for_output(kafka_bootstrap, dst, before, log0, 90)

    def savepoint(name: str, *stop: str) -> str:
        sp = subprocess.run(
            [*CLI, "savepoint", "--app-id", app, "--bootstrap", kafka_bootstrap, "--store",
             store_url, "--name", name, *stop, "--timeout", "90"],
            capture_output=True, cwd=REPO, timeout=120,
        )  # fmt: skip
        assert sp.returncode == 0, sp.stderr.decode()[-4000:]
        return sp.stdout.decode().strip()

    # The old partitions must be read to their end before the topic grows (what the
    # producers wrote under 4 partitions is where 4 partitions put it): wait until a
    # savepoint covers all 3000 records, then stop with the savepoint.
    store = open_store(store_url)
    for n in range(60):
        meta = read_savepoint(store, savepoint(f"probe{n}"))
        if sum(int(o) for t in meta.tasks.values() for o in t.offsets.values()) == 3000:
            break
        time.sleep(0.5)
    else:
        raise AssertionError("the job did not read its input in 60 savepoints")
    path = savepoint("grow", "--stop")
    assert before.wait(timeout=60) == 0, log0.read_text()[-4000:]
    admin.create_partitions([NewPartitions(src, 12)])[src].result(30)
    deadline = time.monotonic() + 30
    while len(admin.list_topics(src, timeout=10).topics[src].partitions) != 12:
        assert time.monotonic() < deadline, "the topic did not grow"
        time.sleep(0.2)
    producer = make_producer(kafka_bootstrap, extra={"partitioner": "murmur2_random"})
    since = int(time.time() * 1000)  # what is stamped before it is skipped with the option
    for p in range(4, 12):  # key old<p> only in partition p: its state is that task's
        for k in range(5):
            ts = BASE + 30_000 + k * STEP_MS  # late for no task: the new ones have no watermark
            producer.produce(
                src, str(ts).encode(), key=f"old{p}".encode(), partition=p,
                timestamp=since - 3_600_000,
            )  # fmt: skip
            if not new_from_time:
                sent.append((f"old{p}", ts))
    produce(3000, 6000)  # into all 12 partitions, stamped now (at or after `since`)
    extra = ["--new-partitions-from", iso(since)] if new_from_time else []
    after, log1 = run("after", "--from-savepoint", path, "--stop-when-idle", "4", *extra)
    deadline = time.monotonic() + 120
    while "resumed: running" not in log1.read_text():
        assert after.poll() is None, log1.read_text()[-4000:]
        assert time.monotonic() < deadline, "the grown job did not start"
        time.sleep(0.2)
    assert "rescaling savepoint" in log1.read_text()
    produce(6000, 7000)
    for p in range(12):
        producer.produce(src, str(END_TS).encode(), key=b"zzend", partition=p)
    assert producer.flush(30) == 0
    assert after.wait(timeout=120) == 0, log1.read_text()[-4000:]

    expected: Counter[tuple[str, int]] = Counter()
    for word, ts in sent:
        first = ts - (ts - BASE) % WINDOW_MS
        for window in ((word, first - WINDOW_MS), (word, first)):  # hopping: 2 windows each
            expected[window] += 1
    rows = [json.loads(r.value) for r in read_all(kafka_bootstrap, dst) if r.value]
    keys = Counter((r["word"], r["start"]) for r in rows)
    assert [k for k, n in keys.items() if n > 1] == []  # no window emitted twice
    got = {(r["word"], r["start"]): r["count"] for r in rows if r["word"] != "zzend"}
    assert got == dict(expected)  # no count restarted at zero, none lost
