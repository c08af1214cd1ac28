"""Rescaling a join and a session job on a real broker with input flowing (issue 45).

One job holds the orders/payments join (``topologies/orders_payments.py``'s shape: both
sides ``key_by`` order id, a windowed inner join) and a session-window count of clicks.
Its keyed stages run on 4 tasks; ``kstream savepoint --stop``; it continues from the
savepoint on 12 tasks (``key_by(partitions=12)``: a new app id, its repartition topics
are new), savepoints again and continues on 3 — while three feeds keep writing. The
``read_committed`` output of the three runs together is exactly that of a job that never
rescaled, computed in plain Python: every (order, payment) pair within the join window
once, every session once with its exact extent and count (join buffers and open sessions
cross both rescales).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from integration.edge_tools import read_all
from integration.steadyfeed import SavepointRuns, SteadyFeed, wait_for_line
from kstream.checkpointstorage.savepoints import read_savepoint
from kstream.checkpointstorage.urls import open_store
from kstream.kafka.clients import TopicSpec, ensure_topics, make_admin, make_producer
from tests.test_window_properties import session_counts

BASE = 1_600_000_000_000
STEP_MS = 10  # event time of record i: BASE + i * STEP_MS, in every feed
WITHIN_MS = 2_000  # the join window: some payments match their order, some do not
GAP_MS = 1_500  # the session gap
END_TS = BASE + 10_000_000  # closing records: every session closes
PARTITIONS = (4, 12, 3)  # the keyed stages' tasks in each run
USERS = tuple(f"u{i:02d}" for i in range(37))
PER_TICK = 20  # each feed writes ~200 records/s

TOPOLOGY = """
from kstream.api import Session, Topology, WatermarkStrategy

topology = Topology("rs")
wm = WatermarkStrategy(max_out_of_orderness_ms=0, idle_timeout_s=None)


def joined(order, payment):
    return {{"order_id": order["order_id"], "amount": order["amount"], "paid": payment["paid"],
            "order_ts": order["ts"], "payment_ts": payment["ts"], "run": {run}}}


orders = topology.source({orders!r}, timestamp=lambda v, _ts: v["ts"], watermark=wm)
payments = topology.source({payments!r}, timestamp=lambda v, _ts: v["ts"], watermark=wm)
(
    orders.key_by(lambda o: o["order_id"], key_serde="str", partitions={n})
    .join(
        payments.key_by(lambda p: p["order_id"], key_serde="str", partitions={n}),
        joined, within_ms={within}, name="paid",
    )
    .to({paid!r})
)
(
    topology.source(
        {clicks!r}, value_serde="str", timestamp=lambda v, _ts: int(v.split()[1]), watermark=wm
    )
    .key_by(lambda v: v.split()[0], key_serde="str", partitions={n})
    .window(Session({gap}), name="sessions")
    .count()
    .map(lambda r: {{"user": r.key, "start": r.start, "end": r.end, "count": r.value,
                     "run": {run}}})
    .to({sessions!r})
)
"""


def order(i: int) -> tuple[int, str]:
    return i % 2, json.dumps({"order_id": f"o{i}", "amount": i % 97 + 1, "ts": BASE + i * STEP_MS})


def payment_of(j: int) -> tuple[str, int]:
    """Payment j's order id and event time: 0.5, 1.5 or 2.5 s after its order (the last
    one outside the join window); an order has up to three payments."""
    return f"o{j - 100 * (j % 3)}", BASE + j * STEP_MS + 500


def payment(j: int) -> tuple[int, str]:
    oid, ts = payment_of(j)
    return j % 2, json.dumps({"order_id": oid, "paid": j % 89 + 1, "ts": ts})


def user_of(i: int) -> str:
    """Users in bursts of 5 records, each back 1.85 s later (a new session), with every
    11th record a user out of turn (which extends or bridges sessions)."""
    return USERS[(i * 3) % 37] if i % 11 == 0 else USERS[(i // 5) % 37]


def click(i: int) -> tuple[int, str]:
    return i % 2, f"{user_of(i)} {BASE + i * STEP_MS}"


def expected_pairs(orders: int, payments: int) -> Counter[tuple[Any, ...]]:
    """The never-rescaled join: every (order, payment) pair within ``WITHIN_MS``."""
    out: Counter[tuple[Any, ...]] = Counter()
    for j in range(payments):
        oid, pts = payment_of(j)
        i = int(oid[1:])
        if 0 <= i < orders and abs(pts - (BASE + i * STEP_MS)) <= WITHIN_MS:
            out[(oid, i % 97 + 1, j % 89 + 1, BASE + i * STEP_MS, pts)] += 1
    return out


def expected_sessions(clicks: int) -> Counter[tuple[Any, ...]]:
    """The never-rescaled session count: per user, records at most ``GAP_MS`` apart share
    a session ``[first, last + GAP_MS]``."""
    per: dict[str, list[int]] = {}
    for i in range(clicks):
        per.setdefault(user_of(i), []).append(BASE + i * STEP_MS)
    return session_counts(per, GAP_MS)


def test_a_join_and_a_session_job_rescaled_4_12_3_with_input_flowing_equal_a_job_never_rescaled(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    orders, payments, clicks = unique_name("orders"), unique_name("payments"), unique_name("clicks")
    paid, sessions = unique_name("paid"), unique_name("sessions")
    apps = [unique_name(f"rs{n}") for n in range(3)]
    ensure_topics(
        make_admin(kafka_bootstrap),
        [TopicSpec(t, 2) for t in (orders, payments, clicks, paid, sessions)],
    )
    topics = {"orders": orders, "payments": payments, "clicks": clicks, "paid": paid}
    for run, n in enumerate(PARTITIONS):
        (tmp_path / f"r{run}.py").write_text(
            TOPOLOGY.format(**topics, sessions=sessions, n=n, run=run, within=WITHIN_MS, gap=GAP_MS)
        )
    store_url = f"file://{tmp_path}/store"
    runs = SavepointRuns(tmp_path, kafka_bootstrap, store_url, apps)

    def start(run: int, *extra: str) -> tuple[subprocess.Popen[bytes], Path]:
        proc, log = runs.start(run, *extra)
        wait_for_line(proc, log, "resumed: running", 120)
        return proc, log

    def wait_for_rows_of(run: int, proc: subprocess.Popen[bytes], log: Path) -> None:
        """Until both sinks hold committed rows of ``run``: its tasks hold state, and
        emitted from it."""
        deadline = time.monotonic() + 90
        for topic in (paid, sessions):
            while not any(r.value and json.loads(r.value)["run"] == run
                          for r in read_all(kafka_bootstrap, topic)):  # fmt: skip
                assert proc.poll() is None, log.read_text()[-4000:]
                assert time.monotonic() < deadline, f"run {run}: nothing committed to {topic}"
                time.sleep(0.5)

    def savepoint_stop(run: int, proc: subprocess.Popen[bytes], log: Path) -> str:
        wait_for_rows_of(run, proc, log)
        return runs.savepoint_stop(run, proc, log)

    with ExitStack() as stack:  # three feeds, each ~200 records/s, throughout
        feeds = [
            stack.enter_context(SteadyFeed(kafka_bootstrap, topic, line, PER_TICK))
            for topic, line in ((orders, order), (payments, payment), (clicks, click))
        ]
        r0, log0 = start(0)
        sp0 = savepoint_stop(0, r0, log0)
        r1, log1 = start(1, "--from-savepoint", sp0)
        assert "rescaling savepoint" in log1.read_text()
        sp1 = savepoint_stop(1, r1, log1)
        saved = read_savepoint(open_store(store_url), sp1)
        stages = Counter(t.rsplit("-", 1)[0] for t in saved.tasks)
        assert sorted(stages.values()) == [2, 2, 2, 12, 12], stages  # 3 sources, join, sessions
        r2, log2 = start(2, "--from-savepoint", sp1, "--stop-when-idle", "4")
        assert "rescaling savepoint" in log2.read_text()
        wait_for_rows_of(2, r2, log2)  # the last run reads input that keeps coming
    p = make_producer(kafka_bootstrap)
    for part in (0, 1):  # push every watermark past every session
        p.produce(orders, json.dumps({"order_id": "zz", "amount": 0, "ts": END_TS}), partition=part)
        p.produce(payments, json.dumps({"order_id": "zy", "paid": 0, "ts": END_TS}), partition=part)
        p.produce(clicks, f"zzend {END_TS}".encode(), partition=part)
    assert p.flush(30) == 0
    assert r2.wait(timeout=120) == 0, log2.read_text()[-4000:]

    n_orders, n_payments, n_clicks = (f.produced for f in feeds)
    joined = [json.loads(r.value) for r in read_all(kafka_bootstrap, paid) if r.value]
    got_pairs = Counter(
        (r["order_id"], r["amount"], r["paid"], r["order_ts"], r["payment_ts"]) for r in joined
    )
    want_pairs = expected_pairs(n_orders, n_payments)
    assert got_pairs == want_pairs, (got_pairs - want_pairs, want_pairs - got_pairs)
    assert {r["run"] for r in joined} == {0, 1, 2}
    rows = [json.loads(r.value) for r in read_all(kafka_bootstrap, sessions) if r.value]
    got_sessions = Counter(
        (r["user"], r["start"], r["end"], r["count"]) for r in rows if r["user"] != "zzend"
    )
    want_sessions = expected_sessions(n_clicks)
    assert got_sessions == want_sessions, (
        got_sessions - want_sessions,
        want_sessions - got_sessions,
    )
    assert {r["run"] for r in rows} == {0, 1, 2}
