"""Quix Streams, workload 6: deduplication within an hour of event time per key with a
stateful ``apply`` (state per message key, in RocksDB): a record is passed on unless
one of the same key was passed on less than an hour (of the value's ``ts``) from it.
"""

from __future__ import annotations

from typing import Any

from benchmarks.contenders.quixapp import make_app, run_and_report
from benchmarks.workloads import DEDUP_WITHIN_MS, contender_parser


def dedup(event: dict[str, Any], state: Any) -> dict[str, Any] | None:
    last = state.get("seen")
    t = event["ts"]
    if last is None or abs(t - last) >= DEDUP_WITHIN_MS:
        state.set("seen", t)
        return event
    return None


def main() -> None:
    a = contender_parser(__doc__ or "").parse_args()
    app, progress = make_app(a)
    source = app.topic(a.input, key_deserializer="bytes", value_deserializer="json")
    sink = app.topic(a.output, key_serializer="bytes", value_serializer="json")
    sdf = app.dataframe(source)
    sdf = sdf.apply(dedup, stateful=True).filter(lambda event: event is not None)
    sdf.to_topic(sink)
    run_and_report("quix_dedup", app, progress)


if __name__ == "__main__":
    main()
