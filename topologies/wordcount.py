"""Word count per one-minute tumbling window.

Input ``lines`` (value: UTF-8 text, key ignored, timestamp: the Kafka record
timestamp). Each line is split on whitespace; every word is counted per
``[start, start + 60 s)`` window (windows aligned to the epoch, end exclusive).

Output ``word-counts``: key = the word (UTF-8), value = JSON
``{"word": w, "start": start_ms, "end": end_ms, "count": n}``, record timestamp
``end - 1``. One record per (word, window) with at least one occurrence, emitted when
the watermark passes the window end (``max timestamp seen - 5 s`` per partition) or
at the end of a bounded run. Exact (equal to ``expected_output``) when no partition
runs more than 5 s out of order; later records are dropped as late and counted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from kstream.api import Topology, Tumbling, WatermarkStrategy, WindowResult

SOURCE = "lines"
SINK = "word-counts"
WINDOW_MS = 60_000


def _row(r: WindowResult) -> dict[str, Any]:
    return {"word": r.key, "start": r.start, "end": r.end, "count": r.value}


topology = Topology("wordcount")
(
    topology.source(
        SOURCE,
        value_serde="str",
        watermark=WatermarkStrategy(max_out_of_orderness_ms=5_000, idle_timeout_s=30.0),
    )
    .flat_map(str.split)
    .key_by(lambda word: word, key_serde="str")
    .window(Tumbling(WINDOW_MS))
    .count()
    .map(_row)
    .to(SINK, key_serde="str", value_serde="json")
)


def expected_output(
    input_records: Mapping[str, Iterable[tuple[Any, Any, int]]],
) -> list[dict[str, Any]]:
    """The output values for ``{topic: [(key, value, timestamp_ms)]}``, sorted by
    (start, word); compare with the sink's values sorted the same way."""
    counts: Counter[tuple[int, str]] = Counter()
    for _key, line, ts in input_records.get(SOURCE, ()):
        start = ts - ts % WINDOW_MS
        for word in line.split():
            counts[(start, word)] += 1
    return [
        {"word": w, "start": s, "end": s + WINDOW_MS, "count": n}
        for (s, w), n in sorted(counts.items())
    ]
