"""A job upgrade on a real broker: word count v1 runs with input flowing, `kstream
savepoint --stop` takes its last checkpoint and stops it, v2 (a filter added before
the window, a map after it: every node id after the filter moves) starts from the
savepoint with input still flowing. The exact ``read_committed`` output over both
versions equals plain-Python word count: no window count restarts at zero (windows
open at the savepoint are emitted by v2 with v1's records counted), none is doubled.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from integration.cli_job import CLI
from integration.e2e.harness import REPO
from integration.edge_tools import read_all
from integration.steadyfeed import SteadyFeed, wait_for_line, wait_for_output
from kstream.checkpointstorage.savepoints import read_savepoint
from kstream.checkpointstorage.urls import open_store
from kstream.kafka.clients import TopicSpec, ensure_topics, make_admin, make_producer

WORDS = ("apple", "berry", "cherry", "date", "elder")
BASE = 1_600_000_000_000
STEP_MS, WINDOW_MS = 10, 1_000  # hopping windows of 2 s every 1 s: any cut is inside one
END_TS = BASE + 10_000_000  # the end marker's event time: every data window fires

TOPOLOGY = """
from kstream.api import Hopping, Topology, WatermarkStrategy

topology = Topology("wc")
lines = topology.source(
    {src!r}, value_serde="str", timestamp=lambda v, _ts: int(v.split()[1]),
    watermark=WatermarkStrategy(max_out_of_orderness_ms=0, idle_timeout_s=None),
)
{v2_filter}
counts = (
    lines.map(lambda v: v.split()[0])
    .key_by(lambda w: w, key_serde="str")
    .window(Hopping({window} * 2, {window}))
    .count()
    .map(lambda r: {{"word": r.key, "start": r.start, "count": r.value}})
)
{v2_map}
counts.to({dst!r}, key_serde="str", value_serde="json")
"""
V2_FILTER = 'lines = lines.filter(lambda v: not v.startswith("#"))'
V2_MAP = 'counts = counts.map(lambda row: {**row, "v": 2})'


def _line(i: int) -> tuple[int, str]:
    """Record i: (partition, "word event_time")."""
    return i % 2, f"{WORDS[(i * 7 + i // 3) % len(WORDS)]} {BASE + i * STEP_MS}"


@pytest.mark.parametrize("green", [False, True], ids=["same-app", "blue-green"])
def test_upgrade_from_a_savepoint_keeps_every_count(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path, green: bool
) -> None:
    """``blue-green``: v2 runs under a new app id and writes a new topic; the two
    outputs together are exact (v2's internal topics start empty; v1's buffered
    output is v1's, published by its stop)."""
    src, dst, app = unique_name("lines"), unique_name("counts"), unique_name("wc")
    dst2, app2 = (unique_name("counts2"), unique_name("wc2")) if green else (dst, app)
    ensure_topics(
        make_admin(kafka_bootstrap), [TopicSpec(t, 2) for t in dict.fromkeys((src, dst, dst2))]
    )
    for version in (1, 2):
        (tmp_path / f"v{version}.py").write_text(
            TOPOLOGY.format(
                src=src,
                dst=dst if version == 1 else dst2,
                window=WINDOW_MS,
                v2_filter=V2_FILTER if version == 2 else "",
                v2_map=V2_MAP if version == 2 else "",
            )
        )
    store_url = f"file://{tmp_path}/store"
    common = ["--bootstrap", kafka_bootstrap, "--store", store_url, "--interval", "1"]

    def start(name: str, *extra: str) -> tuple[subprocess.Popen[bytes], Path]:
        log = tmp_path / f"{name}.log"
        proc = subprocess.Popen(
            [*CLI, "-v", "run", str(tmp_path / f"{name}.py"), *common, "--state-dir",
             str(tmp_path / name), "--app-id", app if name == "v1" else app2, *extra],
            stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=REPO,
        )  # fmt: skip
        return proc, log

    with SteadyFeed(kafka_bootstrap, src, _line) as feed:  # input flows the whole upgrade
        # 1. v1 runs until some of its output is committed.
        v1, log1 = start("v1")
        wait_for_line(v1, log1, "resumed: running", 90)
        wait_for_output(kafka_bootstrap, dst, v1, log1, 90)

        # 2. Savepoint + stop: v1's workers stop with their output published.
        sp = subprocess.run(
            [*CLI, "savepoint", "--app-id", app, "--bootstrap", kafka_bootstrap, "--store", store_url,
             "--name", "upgrade", "--stop", "--timeout", "90"],
            capture_output=True, cwd=REPO, timeout=120,
        )  # fmt: skip
        assert sp.returncode == 0, sp.stderr.decode()[-4000:]
        path = sp.stdout.decode().strip()
        assert path == f"{app}/savepoints/upgrade"
        assert v1.wait(timeout=60) == 0, log1.read_text()[-4000:]
        assert "stopping: the final checkpoint completed" in log1.read_text()
        saved = read_savepoint(open_store(store_url), path)
        cut = {k: v for t in saved.tasks.values() for k, v in t.offsets.items()}

        # 3. v2 from the savepoint, input still flowing; then the end markers fire
        #    every data window and v2 stops once idle with everything committed.
        v2, log2 = start("v2", "--from-savepoint", path, "--stop-when-idle", "4")
        wait_for_line(v2, log2, "resumed: running", 90)
        time.sleep(2)  # input keeps flowing into v2 (the assertions hold for any amount)
    p = make_producer(kafka_bootstrap)
    for part in (0, 1):
        p.produce(src, f"zzend {END_TS}".encode(), partition=part)
    assert p.flush(30) == 0
    assert v2.wait(timeout=120) == 0, log2.read_text()[-4000:]
    assert "starting from savepoint" in log2.read_text() or "imported" in log2.read_text()

    # 4. The exact output of both versions together.
    expected: Counter[tuple[str, int]] = Counter()
    v1_records: Counter[tuple[str, int]] = Counter()
    for i in range(feed.produced):
        part, value = _line(i)
        word, ts = value.split()
        first = int(ts) - (int(ts) - BASE) % WINDOW_MS
        for window in ((word, first - WINDOW_MS), (word, first)):  # hopping: 2 windows each
            expected[window] += 1
            if i // 2 < cut[f"{src}:{part}"]:  # offset of record i in its partition
                v1_records[window] += 1
    rows = [json.loads(r.value) for r in read_all(kafka_bootstrap, dst) if r.value]
    if green:
        rows += [json.loads(r.value) for r in read_all(kafka_bootstrap, dst2) if r.value]
    keys = Counter((r["word"], r["start"]) for r in rows)
    assert [k for k, n in keys.items() if n > 1] == []  # no window emitted twice
    got = {(r["word"], r["start"]): r["count"] for r in rows}
    assert got == dict(expected)  # no count restarted at zero, none lost
    by_v2 = {(r["word"], r["start"]) for r in rows if r.get("v") == 2}
    straddling = {w for w in by_v2 if 0 < v1_records[w] < expected[w]}
    assert straddling, (
        f"no window open across the savepoint was finished by v2: cut {cut}, produced "
        f"{feed.produced}, {len(by_v2)} of {len(rows)} rows by v2, last v1 window "
        f"{max((r['start'] for r in rows if 'v' not in r), default=None)}, first v2 window "
        f"{min((r['start'] for r in rows if 'v' in r), default=None)}"
    )
    assert len(by_v2) < len(rows)  # v1 emitted some windows, v2 the rest
