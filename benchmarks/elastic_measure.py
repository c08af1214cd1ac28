"""The pure parts of the elastic-job benchmark (``benchmarks/elastic.py``): output pauses
from the times a read_committed consumer saw each task's output advance, the exactness of
the windowed output against the input the harness produced, re-processed records from
the job's side-effect log, and who ran which task from the workers' JSON logs.

Definitions (what the table reports):

- A task's *advances*: the wall-clock times at which a read_committed consumer saw new
  output of that task (a stage-2 task: the output key's repartition partition).
- A task's *pause* in a step: the longest gap between two successive advances among
  the gaps that overlap the step (from the disruption's start until the job settled).
- The job's *stall time*: over the union of every task's advances, the sum of the gaps
  that overlap a step and are longer than ``stall_s`` (2 checkpoint intervals), each
  counted in full.
- *Re-processed*: records a stage's operator saw more than once (the job's ``peek``
  logs each record id it processes, with the time; a sighting after the first is
  re-processing), in all or by the tasks that did not move in the step.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

WindowKey = tuple[str, int]  # (output key, window start ms)


def gaps_overlapping(times: Sequence[float], t0: float, t1: float) -> list[float]:
    """The gaps between successive ``times`` (sorted) that overlap ``[t0, t1]``; a gap
    still open at ``t1`` (no advance after it) counts up to ``t1``."""
    out = []
    for a, b in itertools.pairwise(times):
        if b >= t0 and a <= t1:
            out.append(b - a)
    if not times:
        out.append(t1 - t0)
    elif times[-1] < t1:  # still paused at the end: since its last advance
        out.append(t1 - times[-1])
    return out


def gaps_clear_of(
    times: Sequence[float], t0: float, t1: float, moves: Iterable[tuple[float, float]]
) -> list[float]:
    """``gaps_overlapping`` ``[t0, t1]`` that overlap none of ``moves`` (the windows of
    the steps in which the task moved): in back-to-back steps, a gap that runs into the
    next step, where the task moves, is that move's pause, not one of a task that stayed."""
    spans = list(moves)
    ends = [*times, t1] if not times or times[-1] < t1 else list(times)
    starts = [t0] if not times else []
    out = []
    for a, b in itertools.pairwise([*starts, *ends]):
        if b >= t0 and a <= t1 and not any(b >= s and a <= e for s, e in spans):
            out.append(b - a)
    return out


def longest_pause(times: Sequence[float], t0: float, t1: float) -> float:
    """The longest gap between advances that overlaps ``[t0, t1]``."""
    return max(gaps_overlapping(times, t0, t1), default=0.0)


def stall_time(
    times: Sequence[float], windows: Iterable[tuple[float, float]], stall_s: float
) -> float:
    """Sum of the gaps between successive ``times`` longer than ``stall_s`` that overlap
    any of ``windows`` (each gap counted once, in full)."""
    spans = list(windows)
    total = 0.0
    for a, b in itertools.pairwise(times):
        if b - a > stall_s and any(b >= t0 and a <= t1 for t0, t1 in spans):
            total += b - a
    return total


@dataclass(frozen=True)
class Exactness:
    windows_checked: int
    records_lost: int  # input records whose window is missing or undercounted
    records_duplicated: int  # extra counts: a window emitted twice or overcounted
    wrong_windows: int  # the right count, but another sum of record ids (other records)

    @property
    def exact(self) -> bool:
        return not (self.records_lost or self.records_duplicated or self.wrong_windows)


def check_exact(
    reference: Mapping[WindowKey, tuple[int, int]],
    output: Iterable[tuple[WindowKey, int, int]],
    complete_before_ms: int,
    window_ms: int,
) -> Exactness:
    """Compare the output windows ``((key, start), count, sum of ids)`` with the
    reference: every window the output holds must match it exactly and appear once, and
    every reference window ending at or before ``complete_before_ms`` must be there."""
    got: dict[WindowKey, list[tuple[int, int]]] = {}
    for wk, count, ids in output:
        got.setdefault(wk, []).append((count, ids))
    lost = dup = wrong = 0
    checked = 0
    for wk, (count, ids) in reference.items():
        seen = got.get(wk)
        if not seen:
            if wk[1] + window_ms <= complete_before_ms:
                lost += count
                checked += 1
            continue
        checked += 1
        c, s = seen[0]
        dup += sum(extra for extra, _ in seen[1:])
        if c > count:
            dup += c - count
        elif c < count:
            lost += count - c
        elif s != ids:  # the right count of other records
            wrong += 1
    for wk, seen in got.items():  # windows the input never had
        if wk not in reference:
            checked += 1
            dup += sum(c for c, _ in seen)
    return Exactness(checked, lost, dup, wrong)


def reprocessed_by(
    seen: Iterable[tuple[int, float]],
    t0: float,
    t1: float,
    task_of: Callable[[int], str],
    tasks: Collection[str],
) -> int:
    """Re-processing by ``tasks`` from ``t0`` to ``t1``: the ``(record id, time)`` sightings
    in that span of a record seen before (at any earlier time), whose task
    (``task_of(id)``) is one of ``tasks``."""
    first: set[int] = set()
    n = 0
    for rid, when in sorted(seen, key=lambda x: x[1]):
        if when > t1:
            break
        if rid in first:
            n += when >= t0 and task_of(rid) in tasks
        else:
            first.add(rid)
    return n


def owners_at(events: Sequence[tuple[float, str, Sequence[str]]], t: float) -> dict[str, str]:
    """Who ran each task at time ``t``: from ``(time, worker, tasks it runs)`` events
    (a worker's "attempt N resumed: running [...]" lines), the latest claim before ``t``
    wins."""
    owner: dict[str, str] = {}
    for when, worker, tasks in sorted(events, key=lambda e: e[0]):
        if when > t:
            break
        for task in tasks:
            owner[task] = worker
    return owner


# "attempt N resumed: running [...]", or after an adoption (cooperative assignment)
# "attempt N adopted ... the other tasks ran on: running [...]": every task it runs.
_RUNNING = re.compile(r"(?:resumed|ran on): running (\[[^\]]*\])")


def running_events(worker: str, log_lines: Iterable[str]) -> list[tuple[float, str, list[str]]]:
    """``(unix time, worker, tasks)`` of each "resumed: running [...]" (or "ran on:
    running [...]": an adoption) line of a worker's JSON log (``KSTREAM_LOG_FORMAT=json``); other lines are skipped."""
    out = []
    for line in log_lines:
        if "running [" not in line:
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        found = _RUNNING.search(str(rec.get("message", "")))
        if found is None:
            continue
        tasks = json.loads(found.group(1).replace("'", '"'))
        out.append((datetime.fromisoformat(rec["time"]).timestamp(), worker, list(tasks)))
    return out
