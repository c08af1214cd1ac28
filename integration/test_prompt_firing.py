"""Prompt stops and checkpoints during a window firing of 1.5 M windows (issue 13
point 7) on a real broker.

15 000 keys, one record each, in hopping windows of 100 s advancing by 1 s: 1.5 M
windows, none due until one record far ahead moves the watermark past all of them.
Each fired window goes through a filter that costs a few microseconds (16 SHA-256
rounds), keeping about 1 in 256. One unsliced firing of 1 M such windows took 5.7 s
on the 2-core CI machine (the task alone on RocksDB), so this one is about 8 s of
work; the test checks the work the two runs log adds up to at least 4 s.
The job must take checkpoints
while the firing goes on, stop on SIGTERM within seconds with the firing half done
(its progress in the final checkpoint), and a second run must finish the firing from
there: the ``read_committed`` output is exactly the plain-Python expectation.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path

from integration.cli_job import CliJob, run_args, run_to_end
from integration.edge_tools import read_all
from kstream.checkpointstorage.file import FileStore
from kstream.checkpointstorage.metadata import completed_ids
from kstream.kafka.clients import AdminClient, TopicSpec, ensure_topics, make_producer

T0 = 1_767_225_600_000
KEYS = 15_000
SIZE, ADVANCE = 100_000, 1_000

TOPOLOGY = """
import hashlib
from kstream.api import Hopping, Topology, WatermarkStrategy


def picked(r):
    h = hashlib.sha256(f"{{r.key}}/{{r.start}}".encode()).digest()
    for _ in range(16):
        h = hashlib.sha256(h).digest()
    return h[0] == 0


topology = Topology("firing")
(
    topology.source(
        "{src}", keyed=True, watermark=WatermarkStrategy(max_out_of_orderness_ms=600_000)
    )
    .window(Hopping({size}, {advance}))
    .count()
    .filter(picked)
    .map(lambda r: [r.key, r.start, r.value])
    .to("{out}", value_serde="json")
)
"""


def _picked(key: str, start: int) -> bool:
    h = hashlib.sha256(f"{key}/{start}".encode()).digest()
    for _ in range(16):
        h = hashlib.sha256(h).digest()
    return h[0] == 0


def expected_output() -> list[tuple[str, int, int]]:
    """Every picked window of every key, count 1 (the far record's windows stay open)."""
    out = []
    for i in range(KEYS):
        key, ts = f"k{i:06d}", T0 + i
        last = ts - ts % ADVANCE
        for start in range(last, ts - SIZE, -ADVANCE):
            if _picked(key, start):
                out.append((key, start, 1))
    return sorted(out)


def _output(bootstrap: str, topic: str) -> list[tuple[str, int, int]]:
    rows = [json.loads(r.value or b"") for r in read_all(bootstrap, topic)]
    return [(k, s, v) for k, s, v in rows]


def test_checkpoints_and_sigterm_take_effect_mid_firing_and_a_restart_finishes_it_exactly_once(
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    src, out, app = unique_name("in"), unique_name("out"), unique_name("firing")
    ensure_topics(kafka_admin, [TopicSpec(src, 1), TopicSpec(out, 1)])
    topology = tmp_path / "firing_topology.py"
    topology.write_text(TOPOLOGY.format(src=src, out=out, size=SIZE, advance=ADVANCE))
    p = make_producer(kafka_bootstrap)
    for i in range(KEYS):
        p.produce(src, b"1", f"k{i:06d}".encode(), timestamp=T0 + i)
    p.produce(src, b"1", b"far", timestamp=T0 + 3_600_000)  # watermark past every window
    assert p.flush(30) == 0
    expected = expected_output()
    store = FileStore(tmp_path / "store")
    args = run_args(topology, kafka_bootstrap, app, tmp_path)
    job = CliJob(args, tmp_path / "first.log")
    try:
        job.wait_for(r"firing windows up to \d+ in slices", 90)
        # A checkpoint barrier goes in between two slices and the checkpoint completes
        # while the firing goes on.
        n = int(job.wait_for(r"checkpoint (\d+) taken mid-firing", 30).group(1))
        job.wait_until(lambda: n in completed_ids(store, app), f"completed checkpoint {n}", 30)
        code, took = job.stop()
    finally:
        job.kill()
    log = job.log()
    assert code == 0, log[-3000:]
    assert "the final checkpoint completed" in log, log[-3000:]
    assert not re.search(r"windows up to \d+ fired", log), "the firing ended before the stop"
    # The final checkpoint was taken mid-firing too: its progress went into it.
    *_, (final, work_before) = re.findall(
        r"checkpoint (\d+) taken mid-firing \(\d+ slices here, ([\d.]+) s", log
    )
    assert int(final) > n
    first = _output(kafka_bootstrap, out)
    assert len(set(first)) == len(first) and set(first) <= set(expected)
    assert 0 < len(first) < len(expected)

    # The restart goes on with the firing from the final checkpoint.
    code, log2 = run_to_end([*args, "--stop-when-idle", "2"], timeout=150)
    assert code == 0, log2[-3000:]
    assert "restored mid-firing" in log2, log2[-3000:]
    m = re.search(r"windows up to \d+ fired \((\d+) slices here, ([\d.]+) s of work\)", log2)
    assert m, log2[-3000:]
    work_after = float(m.group(2))
    assert sorted(_output(kafka_bootstrap, out)) == expected
    # SIGTERM did not wait for the rest of the firing: it stopped well before that work.
    assert took < 8.0, f"SIGTERM took {took:.1f} s"
    assert took < work_after, (took, work_after)
    total = float(work_before) + work_after
    assert total >= 4.0, f"the firing was {total:.1f} s of work: too small to show anything"
