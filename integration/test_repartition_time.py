"""A record's event time survives a repartition topic, event time 0 included.

librdkafka writes a record timestamp of 0 as "now", so a record at event time 0 that
crossed a ``key_by`` used to arrive downstream with the wall-clock time: counted in
a window of today instead of ``[0, 1000)``. The worker now writes such a record's
event time in a ``ks.time`` header, and the reading task takes it from there.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from integration.cli_job import keyed_count_job, run_args, run_to_end
from integration.edge_tools import read_all
from kstream.kafka.clients import make_producer

pytestmark = pytest.mark.integration


def test_event_time_zero_keeps_its_window_across_a_repartition(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    src, out, app, topology = keyed_count_job(kafka_bootstrap, unique_name, tmp_path)
    producer = make_producer(kafka_bootstrap)
    events = [("ann", 0), ("bob", 0), ("ann", 400), ("ann", 1500), ("bob", 2000)]
    for i, (user, t) in enumerate(events):
        value = json.dumps({"user": user, "t": t}).encode()
        producer.produce(src, value, None, partition=i % 2)
    assert producer.flush(30) == 0

    code, log = run_to_end(run_args(topology, kafka_bootstrap, app, tmp_path, "--bounded"), 180)
    assert code == 0, log[-3000:]
    counts = sorted(json.loads(r.value) for r in read_all(kafka_bootstrap, out) if r.value)
    assert counts == [["ann", 0, 2], ["ann", 1000, 1], ["bob", 0, 1], ["bob", 2000, 1]]
