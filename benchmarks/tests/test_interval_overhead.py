"""The interval driver's arithmetic and its contenders (no broker)."""

from __future__ import annotations

import pytest

from benchmarks.interval_overhead import (
    KS_NO_COMMIT_S,
    KS_OFF,
    OFF,
    contenders,
    kafka_streams_contenders,
    summarize,
    table,
    w4_workload,
)


def test_overheads_are_against_off_both_of_the_medians_and_round_by_round() -> None:
    rates = {"1 s": [80.0, 90.0, 120.0], OFF: [100.0, 100.0, 150.0]}
    cpu = {"1 s": [9.0, 10.0, 11.0], OFF: [7.0, 8.0, 9.0]}
    one, off = summarize(rates, cpu)
    assert (one.median, one.low, one.high, one.cpu_s) == (90.0, 80.0, 120.0, 10.0)
    assert one.overhead == pytest.approx(0.1)  # 1 - 90 / 100
    assert one.paired == pytest.approx(0.2)  # the median of 20 %, 10 %, 20 %
    assert (off.overhead, off.paired) == (0.0, 0.0)
    text = table([one, off])
    assert "| 1 s | 0.1 k (0.1-0.1) | 10.0% | 20.0% | 10.00 |" in text
    assert "| off | 0.1 k (0.1-0.1) | - | - | 8.00 |" in text


def test_the_checkpointed_contender_runs_at_each_interval_and_off_is_w4s_own() -> None:
    runs = contenders(w4_workload(), [1, 5])
    assert list(runs) == ["1 s", "5 s", OFF]
    for name, s in (("1 s", "1"), ("5 s", "5")):
        args = runs[name].args
        assert args[args.index("--commit-interval") + 1] == s
        assert args[args.index("--checkpointing") + 1] == "on"
        assert args[args.index("--guarantee") + 1] == "exactly-once"
    assert runs[OFF].args[runs[OFF].args.index("--checkpointing") + 1] == "off"
    assert runs["5 s"].name == "kstream_ckpt_5s"


def test_kafka_streams_runs_exactly_once_at_each_interval_against_itself_committing_at_close() -> (
    None
):
    runs = kafka_streams_contenders([1, 5])
    assert list(runs) == ["Kafka Streams, 1 s", "Kafka Streams, 5 s", KS_OFF]
    for name, s, guarantee in (
        ("Kafka Streams, 1 s", "1", "exactly-once"),
        ("Kafka Streams, 5 s", "5", "exactly-once"),
        (KS_OFF, str(KS_NO_COMMIT_S), "at-least-once"),
    ):
        c = runs[name]
        assert c.module == "kafkastreams"
        assert c.args[c.args.index("--commit-interval") + 1] == s
        assert c.args[c.args.index("--guarantee") + 1] == guarantee
        assert c.args[c.args.index("--job") + 1] == "window"
    assert len({c.name for c in runs.values()}) == 3  # each run its own group and topics


def test_kafka_streams_rows_are_against_its_own_baseline() -> None:
    rates = {"Kafka Streams, 1 s": [40.0, 45.0], KS_OFF: [50.0, 50.0]}
    cpu = {"Kafka Streams, 1 s": [20.0, 22.0], KS_OFF: [18.0, 18.0]}
    one, off = summarize(rates, cpu, baseline=KS_OFF)
    assert one.overhead == pytest.approx(0.15)  # 1 - 42.5 / 50
    assert "| Kafka Streams, commit at close | 0.1 k (0.1-0.1) | - | - | 18.00 |" in table(
        [one, off]
    )
