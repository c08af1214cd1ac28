"""Quix Streams, workloads 2 and 3 (and the job of workload 4's Quix side): a keyed
tumbling-window count in RocksDB state, emitting each window when it closes.

``--guarantee exactly-once`` or ``at-least-once`` maps to Quix's
``processing_guarantee``; ``--commit-interval`` to its checkpoint interval.
"""

from __future__ import annotations

from benchmarks.contenders.quixapp import make_app, run_and_report
from benchmarks.workloads import contender_parser


def main() -> None:
    a = contender_parser(__doc__ or "").parse_args()
    app, progress = make_app(a)
    source = app.topic(a.input, key_deserializer="bytes", value_deserializer="json")
    sink = app.topic(a.output, key_serializer="bytes", value_serializer="json")

    sdf = app.dataframe(source)
    # "partition": a window closes when the partition's event time passes its end (a
    # watermark, as in kstream), not only when the same key shows up again.
    sdf = sdf.tumbling_window(duration_ms=a.window_ms).count().final(closing_strategy="partition")
    sdf.to_topic(sink)
    if a.forever:
        app.run()
    else:
        run_and_report("quix_window_count", app, progress)


if __name__ == "__main__":
    main()
