"""Late events behind a repartition: a backlog drops exactly what a live run drops
(issue 37).

Six partitions, each record at most 2 s out of order, about 1 % of them 120-300 s late;
source -> key_by -> 10 s tumbling count, allowed lateness 0, exactly-once sink. The
expected output is computed from the input by the documented rule, not by another
kstream run: a record is late when its window ended at or before its partition's
watermark just before it (the largest earlier timestamp minus the 5 s bound). A
*backlog* run (the input written before the job starts: partitions, and the upstream
tasks' write batches in each repartition partition, far apart in event time) and a
*live* run (the input written while the job runs) must both commit exactly it. Before
issue 37 the backlog counted most late events: the windows after the repartition
judged them against the minimum over the upstream tasks, far behind.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from integration.edge_tools import read_all
from integration.test_watermark_alignment import finish, job, produce, wait_for_checkpoint
from kstream.kafka.clients import TopicSpec, ensure_topics, make_admin

PARTITIONS = 6
PER_PARTITION = 3000
STEP_MS = 50  # event time between a partition's records
BASE = 1_767_225_600_000
SIZE = 10_000
BOUND = 5_000  # max_out_of_orderness_ms
CLOSE = BASE + 10_000_000  # closing records: fire every real window
SEED = 37

TOPOLOGY = """
from kstream.api import Topology, Tumbling, WatermarkStrategy

topology = Topology("late")
(
    topology.source(
        {source!r}, value_serde="json", watermark=WatermarkStrategy(max_out_of_orderness_ms=5000)
    )
    .key_by(lambda v: v["k"], key_serde="str")
    .window(Tumbling(10_000))
    .count()
    .map(lambda r: {{"k": r.key, "start": r.start, "count": r.value}})
    .to({sink!r}, key_serde="str", value_serde="json")
)
"""


def make_input() -> list[tuple[int, int, bytes]]:
    """``(partition, timestamp, value)`` in the order a live producer writes them:
    partitions in step, each record up to 2 s early, about 1 % 120-300 s late."""
    rnd = random.Random(SEED)
    rows = []
    for i in range(PER_PARTITION):
        for p in range(PARTITIONS):
            t = BASE + i * STEP_MS - rnd.randrange(2_000)
            if rnd.randrange(100) == 0:
                t -= rnd.randrange(120_000, 300_001)
            rows.append((p, t, json.dumps({"k": f"k{(i * 7 + p) % 11}"}).encode()))
    rows += [(p, CLOSE, b'{"k":"close"}') for p in range(PARTITIONS)]
    return rows


def expected(rows: list[tuple[int, int, bytes]]) -> tuple[Counter[tuple[str, int, int]], int]:
    """The windows the rule gives, as ``(key, start, count)``, and how many are late."""
    marks: dict[int, int] = {}
    counts: Counter[tuple[str, int]] = Counter()
    late = 0
    for p, ts, value in rows:
        start = ts - ts % SIZE
        if p in marks and start + SIZE <= marks[p]:
            late += 1
        elif ts < CLOSE:
            counts[(json.loads(value)["k"], start)] += 1
        marks[p] = max(marks.get(p, ts - BOUND), ts - BOUND)
    return Counter({(k, s, n): 1 for (k, s), n in counts.items()}), late


def windows(bootstrap: str, topic: str) -> Counter[tuple[str, int, int]]:
    out: Counter[tuple[str, int, int]] = Counter()
    for r in read_all(bootstrap, topic):
        assert r.value is not None
        v = json.loads(r.value)
        if v["start"] < CLOSE - SIZE:
            out[(v["k"], v["start"], v["count"])] += 1
    return out


def test_backlog_and_live_runs_drop_exactly_the_late_events(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    rows = make_input()
    want, late = expected(rows)
    assert late > 100  # late events were written, and the rule drops them
    admin = make_admin(kafka_bootstrap)
    runs = {name: (unique_name(f"in-{name}"), unique_name(f"out-{name}"), unique_name(name))
            for name in ("backlog", "live")}  # fmt: skip
    ensure_topics(
        admin, [TopicSpec(t, PARTITIONS) for src, out, _ in runs.values() for t in (src, out)]
    )
    topo: dict[str, Path] = {}
    for name, (src, out, _) in runs.items():
        topo[name] = tmp_path / f"late_{name}.py"
        topo[name].write_text(TOPOLOGY.format(source=src, sink=out))

    src, out, app = runs["backlog"]
    produce(kafka_bootstrap, src, rows, 0)
    finish(job(topo["backlog"], kafka_bootstrap, app, tmp_path), "backlog run", tmp_path, app)

    src, out, app = runs["live"]
    live = job(topo["live"], kafka_bootstrap, app, tmp_path)
    wait_for_checkpoint(tmp_path, app, above=0, proc=live)
    produce(kafka_bootstrap, src, rows, pace=3000)
    finish(live, "live run", tmp_path, app)

    for name in ("backlog", "live"):
        got = windows(kafka_bootstrap, runs[name][1])
        extra, missing = got - want, want - got
        assert not extra and not missing, (
            f"{name}: {sum(extra.values())} windows that must not exist or have wrong "
            f"counts, e.g. {sorted(extra)[:5]}; {sum(missing.values())} expected windows "
            f"missing, e.g. {sorted(missing)[:5]}"
        )
