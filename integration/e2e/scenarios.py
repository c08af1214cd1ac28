"""Known inputs for the crash tests and the output each topology must produce from them.

Event time runs from ``BASE`` and advances much faster than wall time (about 10-20
event-seconds per wall-second), so windows close during the run. Per source
partition, records are at most 4 s out of order (every topology allows 5 s), so
no on-time record is ever late, whatever the processing timing.

*Late* records carry ``ts = BASE - 1 h``. The generator writes them only after the
job committed output (a fired window): then every checkpoint a restore can go back
to has a watermark past ``BASE``, so these records are behind it by far more than
any allowed lateness and are dropped in every run. They are not passed to
``expected_output``; if they were counted, windows at ``BASE - 1 h`` would appear.

*Closing* records at the end, one per source partition, push the watermark past
every window of the real input. Their own windows may or may not fire, so the
comparison keeps only windows ending at or before ``cutoff``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from integration.e2e.generator import InputRecord
from integration.e2e.harness import REPO, canonical
from kstream.job import load_topology

BASE = 1_767_225_600_000  # 2026-01-01T00:00:00Z, a multiple of every window size
LATE_TS = BASE - 3_600_000
MAX_DISORDER_MS = 4_000
PARTITIONS = 3

WORDS = [
    "apple", "banana", "cherry", "delta", "echo", "fig", "grape", "hotel", "india",
    "juliet", "kilo", "lima", "mango", "nectar", "oscar", "papa",
]  # fmt: skip


@dataclass(frozen=True)
class Scenario:
    """One topology's crash test input, with what to compare."""

    name: str
    topology_file: Path
    sources: dict[str, int]  # logical source topic -> partitions
    sink: str  # logical sink topic
    records: list[InputRecord]  # in produce order; topics are the logical names
    expected: list[str]  # canonical JSON of the expected output rows (compared rows only)
    keep: Callable[[Mapping[str, Any]], bool]  # which output rows are compared

    def actual(self, values: list[bytes | None]) -> list[str]:
        """Canonical JSON of the compared rows among the sink's values."""
        rows = [json.loads(v) for v in values if v is not None]
        return canonical([r for r in rows if self.keep(r)])

    def renamed(self, renames: Mapping[str, str]) -> list[InputRecord]:
        return [
            InputRecord(renames[r.topic], r.partition, r.key, r.value, r.ts, r.kind)
            for r in self.records
        ]


def _expected(topology_file: Path, good: Mapping[str, list[tuple[Any, Any, int]]]) -> list[Any]:
    module_expected = _module(topology_file)["expected_output"]
    return list(module_expected(good))


def _module(path: Path) -> dict[str, Any]:
    import runpy

    return runpy.run_path(str(path))


def _disordered(rng: random.Random, n: int, step_ms: int, start: int = BASE) -> list[int]:
    """``n`` timestamps advancing by ``step_ms``, about 20 % of them up to 4 s behind."""
    out = []
    for i in range(n):
        t = start + i * step_ms
        if rng.random() < 0.2:
            t -= rng.randrange(0, MAX_DISORDER_MS)
        out.append(max(start, t))
    return out


def _interleave(per_partition: list[list[InputRecord]]) -> list[InputRecord]:
    """Round-robin over the partitions' sequences (keeps each partition's order)."""
    out: list[InputRecord] = []
    longest = max(len(s) for s in per_partition)
    for i in range(longest):
        for seq in per_partition:
            if i < len(seq):
                out.append(seq[i])
    return out


def _insert_late(rng: random.Random, seq: list[InputRecord], late: list[InputRecord]) -> None:
    """Put the late records into the second half of ``seq``, in order."""
    at = sorted(rng.randrange(len(seq) // 2, len(seq) - 10) for _ in late)
    for offset, (i, r) in enumerate(zip(at, late, strict=True)):
        seq.insert(i + offset, r)


def wordcount(
    rng: random.Random,
    per_partition: int = 500,
    late: int = 12,
    *,
    base: int = BASE,
    closing: bool = True,
) -> Scenario:
    """Lines of 1-4 words; 60 s windows; event time = Kafka timestamp, 1 s per line per
    partition from ``base``. Compared: windows in ``[base, end of the input]``."""
    path = REPO / "topologies" / "wordcount.py"
    step = 1_000
    seqs: list[list[InputRecord]] = []
    for p in range(PARTITIONS):
        seqs.append(
            [
                InputRecord(
                    "lines", p, None, " ".join(rng.choices(WORDS, k=rng.randint(1, 4))).encode(), ts
                )
                for ts in _disordered(rng, per_partition, step, base)
            ]
        )
    span = per_partition * step
    cutoff = base + span + 60_000
    records = _interleave(seqs)
    if late:
        late_records = [
            InputRecord(
                "lines",
                rng.randrange(PARTITIONS),
                None,
                rng.choice(WORDS).encode(),
                LATE_TS + i,
                "late",
            )
            for i in range(late)
        ]
        _insert_late(rng, records, late_records)
    if closing:
        records += [
            InputRecord("lines", p, None, b"closing", base + span + 180_000)
            for p in range(PARTITIONS)
        ]
    good = {"lines": [(None, r.value.decode(), r.ts) for r in records if r.kind == "ok"]}
    expected = [row for row in _expected(path, good) if row["end"] <= cutoff]
    return Scenario(
        "wordcount",
        path,
        {"lines": PARTITIONS},
        "word-counts",
        records,
        canonical(expected),
        lambda row: int(row["end"]) <= cutoff,
    )


def user_spend(
    rng: random.Random, per_partition: int = 500, late: int = 12, bad: int = 0
) -> Scenario:
    """Purchases of 12 users (4 per partition); 10 s windows, 30 s allowed lateness."""
    path = REPO / "topologies" / "user_spend.py"
    step = 600
    seqs: list[list[InputRecord]] = []
    for p in range(PARTITIONS):
        users = [f"u{p + PARTITIONS * j}" for j in range(4)]
        seq = []
        for ts in _disordered(rng, per_partition, step):
            u = rng.choice(users)
            value = {"user": u, "amount": rng.randint(1, 100), "ts": ts}
            seq.append(InputRecord("purchases", p, u.encode(), json.dumps(value).encode(), ts))
        seqs.append(seq)
    span = per_partition * step
    cutoff = BASE + span + 10_000
    records = _interleave(seqs)
    late_records = []
    for i in range(late):
        p = rng.randrange(PARTITIONS)
        value = {"user": f"u{p}", "amount": 1000 + i, "ts": LATE_TS + i}
        late_records.append(
            InputRecord(
                "purchases", p, f"u{p}".encode(), json.dumps(value).encode(), LATE_TS + i, "late"
            )
        )
    _insert_late(rng, records, late_records)
    for i in range(bad):
        # undecodable: invalid JSON, invalid UTF-8 — each value unique to identify it in the DLQ
        raw = f"{{not json {i}".encode() if i % 2 == 0 else b"\xff\xfe" + str(i).encode()
        at = rng.randrange(10, len(records) - 10)
        records.insert(
            at,
            InputRecord("purchases", rng.randrange(PARTITIONS), b"bad", raw, records[at].ts, "bad"),
        )
    closing_ts = BASE + span + 120_000
    for p in range(PARTITIONS):
        closing = {"user": "closing", "amount": 0, "ts": closing_ts}
        records.append(
            InputRecord("purchases", p, b"closing", json.dumps(closing).encode(), closing_ts)
        )
    good = {"purchases": [(r.key, json.loads(r.value), r.ts) for r in records if r.kind == "ok"]}
    expected = [row for row in _expected(path, good) if row["end"] <= cutoff]
    return Scenario(
        "user_spend",
        path,
        {"purchases": PARTITIONS},
        "user-spend",
        records,
        canonical(expected),
        lambda row: int(row["end"]) <= cutoff,
    )


def orders_payments(rng: random.Random, orders: int = 1200) -> Scenario:
    """Orders (1 s apart in event time) and 0-2 payments each, -2..+12 min from the order;
    all records in event-time order up to 4 s of disorder per partition."""
    path = REPO / "topologies" / "orders_payments.py"
    events: list[tuple[int, str, dict[str, Any]]] = []
    for i in range(orders):
        ts = BASE + i * 1_000
        oid = f"o{i}"
        events.append((ts, "orders", {"order_id": oid, "amount": rng.randint(5, 500), "ts": ts}))
        for _ in range(rng.choice([0, 1, 1, 1, 2])):
            pts = ts + rng.randrange(-120_000, 720_000)
            events.append(
                (pts, "payments", {"order_id": oid, "paid": rng.randint(5, 500), "ts": pts})
            )
    events.sort(key=lambda e: e[0])
    per: dict[tuple[str, int], list[InputRecord]] = {}
    for n, (ts, topic, value) in enumerate(events):
        p = n % PARTITIONS
        per.setdefault((topic, p), []).append(
            InputRecord(topic, p, value["order_id"].encode(), json.dumps(value).encode(), ts)
        )
    # disorder within each partition: swap neighbours less than 4 s apart
    for seq in per.values():
        for i in range(1, len(seq)):
            if rng.random() < 0.2 and seq[i].ts - seq[i - 1].ts < MAX_DISORDER_MS:
                seq[i - 1], seq[i] = seq[i], seq[i - 1]
    # produce order: by each partition's running maximum event time (keeps every
    # partition's order, and all partitions advance together in event time)
    keyed: list[tuple[int, str, int, InputRecord]] = []
    for (topic, p), seq in per.items():
        running = BASE - 10**9
        for i, r in enumerate(seq):
            running = max(running, r.ts)
            keyed.append((running, topic, p * 10**6 + i, r))
    merged = sorted(keyed, key=lambda x: (x[0], x[1], x[2]))
    records = [r for *_k, r in merged]
    good: dict[str, list[tuple[Any, Any, int]]] = {"orders": [], "payments": []}
    for r in records:
        good[r.topic].append((r.key, json.loads(r.value), r.ts))
    expected = _expected(path, good)
    return Scenario(
        "orders_payments",
        path,
        {"orders": PARTITIONS, "payments": PARTITIONS},
        "paid-orders",
        records,
        canonical(expected),
        lambda row: True,
    )


def order_states(rng: random.Random, orders: int = 600) -> Scenario:
    """The per-order state machine (a process function with event-time timers): orders
    6 s apart, each on one partition (its Kafka key); 80 % paid 1-40 min later (a quarter
    of those after the 30 min deadline), most paid ones shipped, a few created twice.
    Up to 4 s of disorder per partition; closing orders push the watermark past every
    deadline. Compared: rows up to the last real event or deadline."""
    path = REPO / "topologies" / "order_states.py"
    minute = 60_000
    events: list[tuple[int, int, dict[str, Any]]] = []
    for i in range(orders):
        oid, t0 = f"o{i}", BASE + i * 6_000
        events.append((t0, i, {"order_id": oid, "event": "created", "ts": t0}))
        if rng.random() < 0.05:
            t = t0 + rng.randrange(0, 10 * minute)
            events.append((t, i, {"order_id": oid, "event": "created", "ts": t}))
        if rng.random() < 0.8:
            paid = t0 + rng.randrange(minute, 40 * minute)
            events.append((paid, i, {"order_id": oid, "event": "paid", "ts": paid}))
            if rng.random() < 0.7:
                shipped = paid + rng.randrange(minute, 20 * minute)
                events.append((shipped, i, {"order_id": oid, "event": "shipped", "ts": shipped}))
    cutoff = max(max(t for t, _i, _e in events), BASE + orders * 6_000 + 30 * minute)
    per: list[list[InputRecord]] = [[] for _ in range(PARTITIONS)]
    for ts, i, value in sorted(events, key=lambda e: e[0]):
        p = i % PARTITIONS
        per[p].append(
            InputRecord(
                SOURCE_ORDER_EVENTS, p, value["order_id"].encode(), json.dumps(value).encode(), ts
            )
        )
    for seq in per:  # disorder: swap neighbours less than 4 s apart
        for i in range(1, len(seq)):
            if rng.random() < 0.2 and seq[i].ts - seq[i - 1].ts < MAX_DISORDER_MS:
                seq[i - 1], seq[i] = seq[i], seq[i - 1]
    # produce order: by each partition's running maximum event time
    keyed: list[tuple[int, int, InputRecord]] = []
    for p, seq in enumerate(per):
        running = BASE - 10**9
        for i, r in enumerate(seq):
            running = max(running, r.ts)
            keyed.append((running, p * 10**6 + i, r))
    records = [r for *_k, r in sorted(keyed, key=lambda x: (x[0], x[1]))]
    closing_ts = cutoff + 10 * minute
    for p in range(PARTITIONS):
        value = {"order_id": f"closing-{p}", "event": "created", "ts": closing_ts}
        records.append(
            InputRecord(
                SOURCE_ORDER_EVENTS,
                p,
                f"closing-{p}".encode(),
                json.dumps(value).encode(),
                closing_ts,
            )
        )
    good = {
        SOURCE_ORDER_EVENTS: [
            (r.key.decode() if r.key else None, json.loads(r.value), r.ts) for r in records
        ]
    }
    expected = [row for row in _expected(path, good) if row["ts"] <= cutoff]
    return Scenario(
        "order_states",
        path,
        {SOURCE_ORDER_EVENTS: PARTITIONS},
        "order-status",
        records,
        canonical(expected),
        lambda row: int(row["ts"]) <= cutoff,
    )


SOURCE_ORDER_EVENTS = "order-events"


def check_topology_names(s: Scenario) -> None:
    """The scenario's logical topics are the topology's (a renamed one would miss records)."""
    topo = load_topology(s.topology_file)
    topics = {n.params.get("topic") for n in topo.nodes}
    missing = (set(s.sources) | {s.sink}) - topics
    assert not missing, f"{s.name}: topics {missing} are not in {s.topology_file}"
