"""The broker's own performance tools as ceiling rows of workload 1: ``--tool producer`` runs
``org.apache.kafka.tools.ProducerPerformance`` (``kafka-producer-perf-test``), ``--tool
consumer`` runs ``org.apache.kafka.tools.ConsumerPerformance``
(``kafka-consumer-perf-test``), both from kafka-tools of the broker's version
(``benchmarks/jvm.py``), on the same broker.

- producer: sends as many records as the input holds to ``--output``; the values are
  sampled from the input topic (its first ``SAMPLE`` values, written to a payload file;
  the tool picks one at random per record), no keys; ``acks=all``, ``linger.ms=5``
  and ``batch.size=1000000`` (as the raw pipe's librdkafka producer).
- consumer: reads the input topic from the start until it has every record, in its own
  group; the rate is its ``fetch.nMsg.sec``, which excludes the group join (as t_first
  excludes it for every contender).

The report's ``t_first``/``t_end`` span the input at the rate the tool printed
(``t_end = t_first + records / rate``): the tools time themselves.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.jvm import broker_tools_app
from benchmarks.workloads import EndOffsets, Report, contender_parser
from kstream.kafka.clients import TopicPartition, make_consumer

PRODUCER = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER = "org.apache.kafka.tools.ConsumerPerformance"
SAMPLE = 10_000
JVM_OPTS = ("-Xms512m", "-Xmx1g")

_SENT = re.compile(r"(\d+) records sent, ([0-9.]+) records/sec")


def producer_rate(stdout: str) -> tuple[int, float]:
    """``(records, records/s)`` from ProducerPerformance's final summary line."""
    found = _SENT.findall(stdout)
    if not found:
        raise ValueError(
            f"no 'records sent' summary in ProducerPerformance's output: {stdout[-500:]!r}"
        )
    n, rate = found[-1]
    return int(n), float(rate)


def consumer_rate(stdout: str) -> tuple[int, float]:
    """``(records, records/s)`` from ConsumerPerformance's CSV: ``data.consumed.in.nMsg`` and
    ``fetch.nMsg.sec`` (the rate without the group join)."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    for i, line in enumerate(lines[:-1]):
        header = [h.strip() for h in line.split(",")]
        if "fetch.nMsg.sec" in header and "data.consumed.in.nMsg" in header:
            values = [v.strip() for v in lines[i + 1].split(",")]
            row = dict(zip(header, values, strict=False))
            return int(float(row["data.consumed.in.nMsg"])), float(row["fetch.nMsg.sec"])
    raise ValueError(f"no CSV summary in ConsumerPerformance's output: {stdout[-500:]!r}")


def sample_values(bootstrap: str, topic: str, ends: EndOffsets, limit: int) -> list[bytes]:
    """Up to ``limit`` values from the start of ``topic``, spread over its partitions."""
    consumer = make_consumer(bootstrap, f"bench-perf-sample-{time.time_ns()}", read_committed=False)
    want = {p: min(o, limit // max(len(ends.ends), 1)) for p, o in ends.ends.items()}
    consumer.assign([TopicPartition(topic, p, 0) for p in sorted(want) if want[p] > 0])
    got: dict[int, int] = dict.fromkeys(want, 0)
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while any(got[p] < want[p] for p in want) and time.monotonic() < deadline:
            for m in consumer.consume(num_messages=1000, timeout=0.5):
                p = m.partition() or 0
                if m.error() is None and got[p] < want[p]:
                    got[p] += 1
                    values.append(m.value() or b"")
    finally:
        consumer.close()
    if not values:
        raise RuntimeError(f"no values read from {topic} to sample")
    return values


def run_tool(argv: list[str]) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    sys.stderr.write(proc.stderr[-4000:])
    if proc.returncode != 0:
        raise SystemExit(f"{argv[argv.index('-cp') + 2]} exited {proc.returncode}")
    return proc.stdout


def main() -> None:
    p = contender_parser(__doc__ or "")
    p.add_argument("--tool", choices=("producer", "consumer"), required=True)
    a = p.parse_args()
    ends: EndOffsets = a.end_offsets
    total = sum(ends.ends.values())
    app = broker_tools_app()
    if a.tool == "producer":
        with tempfile.TemporaryDirectory(prefix="bench-perf-") as d:
            payloads = Path(d) / "payloads"
            payloads.write_bytes(b"\n".join(sample_values(a.bootstrap, a.input, ends, SAMPLE)))
            t0 = time.time()
            out = run_tool(app.argv(PRODUCER, [
                "--topic", a.output, "--num-records", str(total), "--payload-file", str(payloads),
                "--throughput", "-1", "--producer-props", f"bootstrap.servers={a.bootstrap}",
                "acks=all", "linger.ms=5", "batch.size=1000000",
            ], JVM_OPTS))  # fmt: skip
        n, rate = producer_rate(out)
        Report("broker_producer_perf", n, n, t0, t0 + n / rate).emit()
    else:
        t0 = time.time()
        out = run_tool(app.argv(CONSUMER, [
            "--bootstrap-server", a.bootstrap, "--topic", a.input, "--messages", str(total),
            "--group", a.group, "--timeout", "120000",
        ], JVM_OPTS))  # fmt: skip
        n, rate = consumer_rate(out)
        Report("broker_consumer_perf", n, 0, t0, t0 + n / rate).emit()


if __name__ == "__main__":
    main()
