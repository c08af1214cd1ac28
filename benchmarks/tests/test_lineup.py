"""What runs, how a run's output is judged, --quick, the perf tools' output (no broker)."""

from __future__ import annotations

import pytest

from benchmarks.contenders.broker_perf import consumer_rate, producer_rate
from benchmarks.generate import InputSpec, events
from benchmarks.harness import Expected, check, decode_for
from benchmarks.lineup import PERF_CONSUMER, PERF_PRODUCER, recovery_contenders, workloads
from benchmarks.run import QUICK, apply_quick
from benchmarks.verify import OutputStats, expected_windows, window_digest
from benchmarks.workloads import Report


def test_kafka_streams_and_the_ceilings_run_where_the_issue_puts_them() -> None:
    by = {wl.key: [c.name for c in wl.contenders] for wl in workloads(60_000)}
    assert by["w1"] == [
        "raw_pipe", "raw_stateless", "kstream", "quix", "kafka_streams", PERF_PRODUCER, PERF_CONSUMER,
    ]  # fmt: skip
    assert by["w2"] == by["w3"] == ["kstream", "quix", "kafka_streams"]
    assert "kafka_streams" not in by["w5"]
    w2 = next(wl for wl in workloads(60_000) if wl.key == "w2")
    ks = next(c for c in w2.contenders if c.name == "kafka_streams")
    assert ks.args[ks.args.index("--guarantee") + 1] == "exactly-once"
    assert [c.name for c in recovery_contenders()] == ["kstream", "quix", "kafka_streams"]


def test_quick_fills_in_only_what_was_not_given() -> None:
    params = {"records": 1_000_000, "runs": 3, "keys": 100_000, "quick": True}
    got = apply_quick(params, explicit={"runs", "quick"})
    assert got["records"] == QUICK["records"] and got["keys"] == QUICK["keys"]
    assert got["runs"] == 3
    assert apply_quick({**params, "quick": False}, set()) == {**params, "quick": False}


def test_expected_windows_are_the_closed_windows_of_each_partition() -> None:
    spec = InputSpec(400, keys=20, partitions=3, event_rate=100)  # 10 ms apart: 4 s of event time
    window = 1000
    recs = list(events(spec))
    top = {p: max(ts for q, _, _, ts in recs if q == p) for p in range(3)}
    want: dict[tuple[bytes, int], int] = {}
    for p, key, _, ts in recs:
        start = ts // window * window
        if start + window <= top[p]:
            want[(key, start)] = want.get((key, start), 0) + 1
    got = expected_windows(spec, window)
    assert got.records == len(want) > 0
    assert (
        got.digest == sum(window_digest(k, s, s + window, n) for (k, s), n in want.items()) % 2**64
    )
    # one count off, or one result missing, changes the digest
    (k, s), n = next(iter(want.items()))
    assert (
        got.digest
        != (
            sum(window_digest(k2, s2, s2 + window, n2) for (k2, s2), n2 in want.items())
            - window_digest(k, s, s + window, n)
            + window_digest(k, s, s + window, n + 1)
        )
        % 2**64
    )


def test_runs_are_judged_by_their_exact_output() -> None:
    spec = InputSpec(100)
    wls = {wl.key: wl for wl in workloads(60_000)}
    c = {x.name: x for x in wls["w1"].contenders}
    w2k = next(x for x in wls["w2"].contenders if x.name == "kafka_streams")
    exp = Expected(OutputStats(60, 1234), OutputStats(5, None, 99))
    rep = Report("x", 100, -1, 0.0, 1.0)
    assert decode_for(wls["w1"], c["kafka_streams"]) == "json"
    assert decode_for(wls["w2"], w2k) == "windows"
    assert decode_for(wls["w1"], c[PERF_PRODUCER]) is None
    assert check(wls["w1"], c["kafka_streams"], spec, rep, OutputStats(60, 1234), exp) == ""
    assert "!= expected" in check(wls["w1"], c["kafka_streams"], spec, rep, OutputStats(60, 1), exp)
    assert check(wls["w2"], w2k, spec, rep, OutputStats(5, None, 99), exp) == ""
    assert "!= expected" in check(wls["w2"], w2k, spec, rep, OutputStats(5, None, 98), exp)
    assert check(wls["w1"], c["raw_pipe"], spec, rep, OutputStats(100), exp) == ""
    assert check(wls["w1"], c["raw_pipe"], spec, rep, OutputStats(99), exp) != ""
    assert check(wls["w1"], c[PERF_PRODUCER], spec, rep, OutputStats(100), exp) == ""
    assert check(wls["w1"], c[PERF_CONSUMER], spec, rep, OutputStats(0), exp) == ""
    assert check(wls["w1"], c[PERF_CONSUMER], spec, rep, OutputStats(3), exp) != ""
    short = Report("x", 99, -1, 0.0, 1.0)
    assert "processed 99 of 100" in check(
        wls["w1"], c[PERF_CONSUMER], spec, short, OutputStats(0), exp
    )


def test_perf_tool_summaries_are_parsed() -> None:
    out = (
        "499877 records sent, 99955.4 records/sec (6.67 MB/sec), 3.1 ms avg latency.\n"
        "1000000 records sent, 356506.238859 records/sec (23.80 MB/sec), 41.67 ms avg latency, "
        "312.00 ms max latency, 20 ms 50th, 163 ms 95th, 280 ms 99th, 303 ms 99.9th.\n"
    )
    assert producer_rate(out) == (1_000_000, 356506.238859)
    csv = (
        "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
        "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec\n"
        "2026-11-30 20:00:00:000, 2026-11-30 20:00:04:000, 66.7, 16.7, 1000000, 250000.0, "
        "3000, 1000, 66.7, 1000000.0\n"
    )
    assert consumer_rate(csv) == (1_000_000, 1_000_000.0)
    with pytest.raises(ValueError, match="no CSV summary"):
        consumer_rate("WARN something\n")
    with pytest.raises(ValueError, match="records sent"):
        producer_rate("")


def test_w5r_frames_the_input_with_the_registry_id_and_runs_both_paths_interleaved() -> None:
    """w5r: one workload (so its runs are interleaved round-robin), the fixed-schema and
    the registry path on the same registry-framed input; its output is w5's."""
    import io

    import fastavro

    from benchmarks.generate import EVENT_SCHEMA_FILE, Encoder
    from benchmarks.workloads import load_schema

    w5r = next(wl for wl in workloads(60_000) if wl.key == "w5r")
    assert [(c.name, c.args[-1]) for c in w5r.contenders] == [
        ("kstream", "fixed"),
        ("kstream_registry", "registry"),
    ]
    assert decode_for(w5r, w5r.contenders[1]) == "avro"
    spec = InputSpec(10, fmt="avro-sr", schema_id=7)
    assert spec.topic.startswith("bench.in.avro-sr7.n10.")  # another registry's id: another topic
    _p, _k, event, _t = next(events(spec))
    value = Encoder("avro-sr", 7)(event)
    assert value[:5] == b"\x00\x00\x00\x00\x07"
    schema = fastavro.parse_schema(load_schema(EVENT_SCHEMA_FILE))
    assert fastavro.schemaless_reader(io.BytesIO(value[5:]), schema, None) == event


def test_the_reproducing_command_keeps_a_default_given_with_quick() -> None:
    """``--quick --records 1000000``: the records are not --quick's, so the command that
    repeats the run must say so although 1000000 is the option's default."""
    import click

    from benchmarks.run import main, reproducing_command

    seen: list[str] = []

    @click.command(params=main.params)
    @click.pass_context
    def probe(ctx: click.Context, **_: object) -> None:
        seen.append(reproducing_command(ctx))

    probe.main(["--quick", "--records", "1000000", "--runs", "5"], standalone_mode=False)
    assert seen == ["python -m benchmarks.run --records 1000000 --runs 5 --quick"]
