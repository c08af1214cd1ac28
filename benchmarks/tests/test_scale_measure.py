"""The partitions x workers curves' parsing and aggregation (no broker, no process)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.scale_curves import BEGIN, END, section, write_section
from benchmarks.scale_measure import (
    ControlRecord,
    Point,
    ProcSample,
    barriers_per_checkpoint,
    control_stats,
    latest,
    peak,
    proc_sample,
    read_rate,
    records_in,
    row,
    table,
)

METRICS = """\
# HELP kstream_records_in_total Records read by a task, per input topic.
# TYPE kstream_records_in_total counter
kstream_records_in_total{task="stage0-0",topic="in"} 120.0
kstream_records_in_total{task="stage0-1",topic="in"} 80.0
kstream_records_in_total{task="stage1-0",topic="app.stage0.repartition"} 500.0
kstream_records_in_created{task="stage0-0",topic="in"} 1.7e+09
kstream_records_out_total{task="stage0-0",topic="in"} 999.0
"""


def test_records_in_sums_the_tasks_reading_the_topic_only() -> None:
    assert records_in(METRICS, "in") == 200
    assert records_in(METRICS, "app.stage0.repartition") == 500
    assert records_in(METRICS, "other") == 0
    assert records_in("", "in") == 0


def test_proc_sample_reads_threads_and_rss_and_peak_takes_each_largest() -> None:
    status = "Name:\tkstream\nThreads:\t72\nVmRSS:\t  106496 kB\nVmHWM:\t 200000 kB\n"
    assert proc_sample(status, 119) == ProcSample(72, 119, 104.0)
    samples = [ProcSample(70, 130, 100.0), ProcSample(75, 120, 90.0)]
    assert peak(samples) == ProcSample(75, 130, 100.0)
    assert peak([]) == ProcSample(0, 0, 0.0)


def test_read_rate_spans_last_zero_to_first_final_sample() -> None:
    samples = [(10.0, 0), (10.5, 0), (11.0, 50), (12.0, 150), (12.5, 200), (13.0, 200)]
    assert read_rate(samples) == (200 / 2.0, 200)
    # replays after a rollback count: the final count is what was read
    assert read_rate([(0.0, 0), (1.0, 300), (2.0, 250 + 100)]) == (350 / 2.0, 350)
    assert read_rate([]) == (0.0, 0)
    assert read_rate([(1.0, 0), (2.0, 0)]) == (0.0, 0)
    assert read_rate([(1.0, 100)]) == (0.0, 100)  # read before the first poll: not timed


def _rec(ts: int, **body: object) -> ControlRecord:
    return ControlRecord.parse(ts, json.dumps({"v": 1, **body}).encode())


def test_control_stats_durations_records_per_checkpoint_and_first_completion() -> None:
    records = [
        _rec(900, type="Heartbeat", member="a"),
        _rec(1000, type="TriggerCheckpoint", checkpoint_id=1, attempt=0, timestamp=995),
        _rec(1040, type="AcknowledgeCheckpoints", checkpoint_id=1, attempt=0, member="a"),
        _rec(1050, type="AcknowledgeCheckpoints", checkpoint_id=1, attempt=0, member="b"),
        _rec(1100, type="CheckpointCompleted", checkpoint_id=1, attempt=0),
        _rec(2000, type="Heartbeat", member="a"),
        _rec(6000, type="TriggerCheckpoint", checkpoint_id=2, attempt=0, timestamp=6000),
        _rec(6030, type="AcknowledgeCheckpoints", checkpoint_id=2, attempt=0, member="a"),
        _rec(6300, type="CheckpointCompleted", checkpoint_id=2, attempt=0),
        _rec(11000, type="TriggerCheckpoint", checkpoint_id=3, attempt=0, timestamp=11000),
        _rec(11500, type="CheckpointAborted", checkpoint_id=3, reason="timeout"),
        ControlRecord.parse(11600, b"not json"),
    ]
    s = control_stats(records)
    assert s.completed == [1, 2]
    assert s.first_complete_ms == 1100
    assert s.durations_ms == [105.0, 300.0]
    assert s.per_checkpoint == [4, 3]
    assert s.per_interval == 4.0  # records in (1100, 6300]: heartbeat, trigger, ack, completed
    assert s.aborted == 1
    assert s.by_type["Heartbeat"] == 2 and s.by_type["?"] == 1


def test_control_stats_of_a_job_that_never_checkpointed() -> None:
    s = control_stats([_rec(1, type="TriggerCheckpoint", checkpoint_id=1, attempt=0, timestamp=1)])
    assert (s.completed, s.first_complete_ms, s.durations_ms, s.per_interval) == ([], None, [], 0.0)


def test_barriers_per_checkpoint_counts_barriers_of_each_checkpoint_scaled() -> None:
    def ev(kind: str, cid: int) -> tuple[str, bytes | None]:
        return kind, json.dumps({"v": 1, "checkpoint_id": cid, "attempt": 0}).encode()

    events: list[tuple[str, bytes | None]] = (
        [ev("barrier", 1)] * 4 + [ev("watermark", 1)] * 4 + [ev("barrier", 2)] * 2
    )
    events += [ev("barriers", 2)]  # a worker's set: one record
    events += [("barrier", b"junk"), ("end_of_input", None)]
    assert barriers_per_checkpoint(events, [1, 2, 3]) == [4, 3, 0]
    assert barriers_per_checkpoint(events, [1], scale=1024 / 8) == [512]


def _point(**kw: object) -> Point:
    base: dict[str, object] = dict(label="before", partitions=4, workers=1, records=200_000)
    return Point(**{**base, **kw})  # type: ignore[arg-type]


def test_row_of_a_measured_point_and_of_one_that_gave_up() -> None:
    ok = _point(
        tasks=8, rate=97_330.4, read=200_100, covered_s=7.3, first_checkpoint_s=7.29,
        checkpoints=3, duration_ms=[84.0, 42.0, 56.0], control_per_checkpoint=6,
        control_per_interval=15.5, barriers_per_checkpoint=16, threads=74, open_files=145,
        rss_mb=161.3, kill_to_output_s=10.22, exact="yes",
    )  # fmt: skip
    assert row(ok) == (
        "| 4 | 1 | 8 | 97 330 | 7.3 | 7.3 | 56 / 84 | 6 / 16 | 16 | 74 / 145 / 161 | 10.2 "
        "| yes | 100 records read again after rollbacks |"
    )
    gave_up = _point(
        partitions=1024,
        tasks=2048,
        threads=9800,
        open_files=19_000,
        rss_mb=7000.0,
        failure="no checkpoint in 240 s; 9800 threads in 1 worker(s) at give-up",
    )
    assert row(gave_up) == (
        "| 1024 | 1 | 2 048 | - | - | - | - | - | - | 9800 / 19000 / 7000 | - | - "
        "| no checkpoint in 240 s; 9800 threads in 1 worker(s) at give-up |"
    )
    assert table([gave_up, ok]).splitlines()[2:] == [row(ok), row(gave_up)]
    assert row(_point(failure="gave up", read=7643)).endswith(
        "| gave up; 7 643 records read by then |"
    )
    settled = _point(threads=300, open_files=1700, rss_mb=780.0, end_threads=90,
                     end_open_files=400, end_rss_mb=300.4)  # fmt: skip
    assert "| 300 / 1700 / 780 (at the end: 90 / 400 / 300) |" in row(settled)


def test_latest_keeps_the_last_point_of_each_label_partitions_workers() -> None:
    a, b, c = _point(rate=1.0), _point(rate=2.0), _point(label="after", rate=3.0)
    assert latest([a, c, b]) == [b, c]
    assert Point.from_json(b.to_json()) == b


def test_section_has_one_table_per_run_and_replaces_itself_in_the_doc(tmp_path: Path) -> None:
    run = dict(title="before (per-task producers)", date="2026-12-05 01:30 UTC",
               command="python -m benchmarks.scale_curves", machine="2 CPUs", load=1.5,
               records=200_000, keys=1_000, budget=240.0)  # fmt: skip
    results = {
        "runs": {
            "before": {**run, "more": [{**run, "command": "python -m x --partitions 1024"}]},
            "after": {**run, "title": "after"},
        },
        "points": [vars(_point(rate=10.0)), vars(_point(label="after", rate=20.0))],
    }
    text = section(results, "plots/scale_curves.png")
    assert text.startswith(BEGIN) and text.endswith(END)
    before_at, after_at = text.index("### before (per-task"), text.index("### after (")
    assert before_at < after_at
    assert text.count("| partitions | workers |") == 2
    assert "![scale curves](plots/scale_curves.png)" in text
    assert text.count("More points") == 1 and "python -m x --partitions 1024" in text
    doc = tmp_path / "SCALING.md"
    doc.write_text("# curves\n\n## earlier\n\ntext\n")
    write_section(doc, text)
    write_section(doc, text.replace("| 10 |", "| 11 |"))
    body = doc.read_text()
    assert body.count(BEGIN) == 1 and body.startswith("# curves\n\n## earlier\n\ntext\n\n")
    assert "| 11 |" in body and "| 10 |" not in body
