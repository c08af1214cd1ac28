"""The elastic benchmark's pure parts: pauses from advance times, exactness, re-processing,
ownership from worker logs."""

from __future__ import annotations

import json

from benchmarks.elastic_measure import (
    Exactness,
    check_exact,
    gaps_clear_of,
    gaps_overlapping,
    longest_pause,
    owners_at,
    reprocessed_by,
    running_events,
    stall_time,
)


def test_longest_pause_counts_only_gaps_overlapping_the_step() -> None:
    times = [0.0, 2.0, 4.0, 15.0, 17.0, 30.0, 40.0]
    # step [5, 16]: the gap 4 -> 15 overlaps it; 15 -> 17 too; 17 -> 30 does not
    assert gaps_overlapping(times, 5.0, 16.0) == [11.0, 2.0]
    assert longest_pause(times, 5.0, 16.0) == 11.0
    # a gap that ends exactly when the step starts still overlaps it
    assert longest_pause(times, 30.0, 31.0) == 13.0


def test_a_task_still_paused_at_the_end_counts_since_its_last_advance() -> None:
    assert longest_pause([0.0, 2.0, 4.0], 5.0, 20.0) == 16.0
    assert longest_pause([], 5.0, 20.0) == 15.0


def test_stall_time_sums_long_gaps_once_each() -> None:
    times = [0.0, 2.0, 4.0, 10.0, 12.0, 14.0, 21.0, 23.0, 40.0]
    # gaps > 4 s: 4->10 (6), 14->21 (7), 23->40 (17, outside both windows)
    assert stall_time(times, [(5.0, 6.0), (8.0, 20.0)], 4.0) == 13.0
    assert stall_time(times, [(24.0, 30.0)], 4.0) == 17.0
    assert stall_time(times, [(1.0, 3.0)], 4.0) == 0.0


def test_exact_output_passes() -> None:
    ref = {("k1", 0): (2, 3), ("k2", 0): (1, 5), ("k1", 1000): (1, 7)}
    out = [(("k1", 0), 2, 3), (("k2", 0), 1, 5)]
    # ("k1", 1000) ends at 2000 > 1500: not required yet
    assert check_exact(ref, out, 1500, 1000) == Exactness(2, 0, 0, 0)
    assert check_exact(ref, out, 1500, 1000).exact


def test_lost_duplicated_and_wrong_windows_are_counted() -> None:
    ref = {("k1", 0): (2, 3), ("k2", 0): (1, 5), ("k3", 0): (4, 10), ("k4", 0): (3, 6)}
    out = [
        (("k1", 0), 2, 3),
        (("k1", 0), 2, 3),  # emitted twice: 2 duplicated records
        (("k2", 0), 1, 6),  # another record than the reference's: wrong
        (("k4", 0), 2, 5),  # one record missing
        (("k9", 0), 1, 1),  # a window the input never had
    ]
    got = check_exact(ref, out, 1000, 1000)  # k3 missing: 4 lost
    assert got == Exactness(5, records_lost=5, records_duplicated=3, wrong_windows=1)
    assert not got.exact


def test_reprocessed_by_counts_repeat_sightings_in_the_span_by_the_given_tasks() -> None:
    seen = [(1, 1.0), (2, 1.5), (3, 2.0), (1, 6.0), (2, 7.0), (3, 7.5), (4, 8.0), (3, 20.0)]
    task = {1: "a", 2: "b", 3: "a", 4: "a"}.__getitem__
    # from 5 to 10: ids 1, 2 and 3 seen again (4 is new); tasks a: 1 and 3
    assert reprocessed_by(seen, 5.0, 10.0, task, {"a"}) == 2
    assert reprocessed_by(seen, 5.0, 10.0, task, {"a", "b"}) == 3
    assert reprocessed_by(seen, 0.0, 5.0, task, {"a", "b"}) == 0
    # out of time order in the input: sorted first
    assert reprocessed_by(list(reversed(seen)), 5.0, 30.0, task, {"a"}) == 3


def test_ownership_from_worker_json_logs() -> None:
    def line(t: str, tasks: list[str]) -> str:
        return json.dumps(
            {"time": t, "level": "INFO", "message": f"attempt 3 resumed: running {tasks!r}"}
        )

    w0 = running_events(
        "w0.0",
        [
            line("2026-01-01T00:00:01.000+00:00", ["stage0-0", "stage1-0"]),
            "not json",
            json.dumps({"time": "2026-01-01T00:00:01+00:00", "message": "other"}),
        ],
    )
    w1 = running_events("w1.0", [line("2026-01-01T00:00:05.000+00:00", ["stage1-0"])])
    assert w0 == [(1767225601.0, "w0.0", ["stage0-0", "stage1-0"])]
    events = w0 + w1
    assert owners_at(events, 1767225602.0) == {"stage0-0": "w0.0", "stage1-0": "w0.0"}
    assert owners_at(events, 1767225606.0) == {"stage0-0": "w0.0", "stage1-0": "w1.0"}
    assert owners_at(events, 1767225600.0) == {}
    adopted = json.dumps(
        {
            "time": "2026-01-01T00:00:07.000+00:00",
            "message": "attempt 3 adopted stage0-1 from checkpoint 9, the other tasks ran on: "
            "running ['stage0-0', 'stage0-1']",
        }
    )
    w0 += running_events("w0.0", [adopted])
    assert w0[-1] == (1767225607.0, "w0.0", ["stage0-0", "stage0-1"])
    assert owners_at(w0 + w1, 1767225608.0)["stage0-1"] == "w0.0"


def test_a_pause_that_runs_into_a_step_where_the_task_moves_is_not_an_unmoved_tasks() -> None:
    times = [0.0, 2.0, 4.0, 11.0, 13.0]  # the 4 -> 11 gap runs into the next step (10-20)
    assert gaps_overlapping(times, 0.0, 10.0) == [2.0, 2.0, 7.0]
    assert gaps_clear_of(times, 0.0, 10.0, [(10.0, 20.0)]) == [2.0, 2.0]
    assert gaps_clear_of(times, 0.0, 10.0, []) == [2.0, 2.0, 7.0]
    assert gaps_clear_of([1.0], 0.0, 10.0, []) == [9.0]  # (still paused at the end)
    assert gaps_clear_of([], 0.0, 10.0, []) == [10.0]
    assert gaps_clear_of([], 0.0, 10.0, [(5.0, 6.0)]) == []
