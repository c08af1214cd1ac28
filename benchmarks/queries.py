"""Queryable state under load: point lookups against a worker running w2 at full speed.

    python -m benchmarks.queries                      # a local broker started for the run
    python -m benchmarks.queries --rounds 3 --rates 0,250,500,1000,2000 --plot q.png
    python -m benchmarks.queries --rates 0,1000 --consistency latest,checkpointed

Loads w2's input once (keyed tumbling-window count, RocksDB, exactly-once), then runs
its job round by round at each query rate, interleaved (``Harness.run_once``: a fresh
output topic, group and state per run, output verified). While a job runs, an
open-loop client in a process of its own asks its query endpoint (``KSTREAM_QUERY_PORT``) for
random keys' window at a random time of the input (``windows?key=u123&at=T``: one
point lookup) at the given rate, over keep-alive connections, each query's latency
measured from the moment it was due (a late send counts against the latency; how late
the client itself sent a lookup due while its connection was idle is reported too: on
a loaded machine the client waits for a CPU as well).
``--consistency`` asks ``latest`` (the default: the worker's running state) or
``checkpointed`` lookups (the newest completed checkpoint: the worker's query sidecar
answers them, docs/queries.md), several of them interleaved in each round. Prints
per consistency and rate the job's records/s, its loss against rate 0 in the same round, and the
lookups' p50/p99/max and answers, p99 also from 1 s after the first answered lookup on
(the job's start and first checkpoint left out: a short run is mostly start); with
``--plot`` (the ``bench`` extra) the latency against the query rate.
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path

import click

from benchmarks import generate
from benchmarks.broker import bootstrap_option, kafka
from benchmarks.generate import START_TS_MS, InputSpec
from benchmarks.harness import Expected, Harness
from benchmarks.lineup import workloads
from benchmarks.verify import expected_stateless, expected_windows

PORTS = (47500, 47520)
WINDOW_MS = 60_000
CLIENTS = 4  # connections, each asking rate / CLIENTS per second


@dataclass
class Load:
    """An open-loop query load on the endpoint at ``port`` while ``stop`` is not set."""

    rate: float
    keys: int
    span_ms: int
    consistency: str = "latest"
    ports: tuple[int, int] = PORTS  # the range the worker's endpoint takes a port of
    stop: threading.Event = field(default_factory=threading.Event)
    latencies_ms: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # (due s, status, ms, ms of it before the request was sent when the connection was
    # idle at the due time: the client's own delay, waking; NaN: it was not)
    trace: list[tuple[float, int, float, float]] = field(default_factory=list)
    late_ms: list[float] = field(default_factory=list)  # of the answered lookups (idle)
    t0: float = field(default_factory=time.perf_counter)

    def __getstate__(self) -> dict[str, object]:  # to the client's process: no lock, no event
        return {k: v for k, v in self.__dict__.items() if k not in ("stop", "lock")}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state, stop=threading.Event(), lock=threading.Lock())

    def run(self, client: int) -> None:
        rng = random.Random(client)
        every = CLIENTS / self.rate
        conn: http.client.HTTPConnection | None = None
        port = self.ports[0]
        due = time.perf_counter()
        ask = "" if self.consistency == "latest" else f"&consistency={self.consistency}"
        while not self.stop.is_set():
            now = time.perf_counter()
            idle = now < due  # (else: behind, waiting for an answer past its due time)
            if idle:
                time.sleep(due - now)
            key = f"u{rng.randrange(self.keys)}"
            at = START_TS_MS + rng.randrange(self.span_ms)
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                sent = time.perf_counter()
                conn.request("GET", f"/state/stage0.window0/windows?key={key}&at={at}{ask}")
                resp = conn.getresponse()
                resp.read()
                status = resp.status
            except (OSError, http.client.HTTPException):  # not serving yet, or gone
                if conn is not None:
                    conn.close()
                conn = None
                # The worker takes the first free port of the range, and the first may
                # be another connection's (the range is within the ephemeral ports):
                # asking only it, no lookup of a run would be answered. The next one.
                port = port + 1 if port < self.ports[1] else self.ports[0]
                due = time.perf_counter() + 0.05
                continue
            took = (time.perf_counter() - due) * 1000
            late = (sent - due) * 1000 if idle else float("nan")
            with self.lock:
                self.trace.append((due - self.t0, status, took, late))
                self.statuses[status] = self.statuses.get(status, 0) + 1
                if status == 200:
                    self.latencies_ms.append(took)
                    if idle:
                        self.late_ms.append(late)
            due += every
            if time.perf_counter() - due > 1.0:  # a stall: do not fire a burst after it
                due = time.perf_counter()


def _client_process(load: Load, parent: Connection) -> None:
    """The query client's own process: ``CLIENTS`` threads asking until ``parent`` says
    stop, then the lookups sent back. Apart from the harness's process, an answer waits
    for none of its threads (starting the job, polling, reading the output), and a short
    switch interval lets the thread it is for run soon."""
    sys.setswitchinterval(0.0005)
    threads = [threading.Thread(target=load.run, args=(c,), daemon=True) for c in range(CLIENTS)]
    for t in threads:
        t.start()
    parent.recv()
    load.stop.set()
    for t in threads:
        t.join(10)
    parent.send((load.trace, load.statuses, load.latencies_ms, load.late_ms))


class Client:
    """A :class:`Load` asked from a process of its own (:func:`_client_process`)."""

    def __init__(self, load: Load) -> None:
        self.load = load
        ctx = multiprocessing.get_context("spawn")
        self._conn, theirs = ctx.Pipe()
        self._process = ctx.Process(target=_client_process, args=(load, theirs))
        self._process.start()
        theirs.close()

    def stop(self) -> Load:
        """Stop asking; the load with the lookups the process made."""
        self._conn.send("stop")
        got = self._conn.recv()
        self._process.join(10)
        self.load.trace, self.load.statuses, self.load.latencies_ms, self.load.late_ms = got
        return self.load


def steady(load: Load, after_s: float = 1.0) -> list[float]:
    """The latencies of lookups due from ``after_s`` after the first answered one on:
    the job's start and its first checkpoint (the first snapshots opened) left out."""
    answered = [(due, ms) for due, status, ms, _ in load.trace if status == 200]
    if not answered:
        return []
    start = min(due for due, _ in answered) + after_s
    return [ms for due, ms in answered if due >= start]


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


@dataclass
class Row:
    rate: int
    consistency: str = "latest"
    records_s: list[float] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)
    late_ms: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    p99s: list[float] = field(default_factory=list)  # of each round
    steady_p99s: list[float] = field(default_factory=list)  # of each round (``steady``)


def measure(
    bootstrap: str,
    rounds: int,
    rates: list[int],
    spec: InputSpec,
    consistencies: list[str],
    trace_dir: Path | None = None,
) -> list[Row]:
    w2 = next(wl for wl in workloads(WINDOW_MS) if wl.key == "w2")
    job = next(c for c in w2.contenders if c.name == "kstream")
    ends = generate.load(bootstrap, spec)
    exp = Expected(expected_stateless(spec), expected_windows(spec, WINDOW_MS))
    runs = [(0, "latest")] + [(r, c) for r in rates if r for c in consistencies]
    rows = {(r, c): Row(r, c) for r, c in runs}
    os.environ["KSTREAM_QUERY_PORT"] = f"{PORTS[0]}-{PORTS[1]}"
    os.environ["KSTREAM_QUERY_SOURCE_PARTITIONER"] = "crc32"  # the generator's
    if "checkpointed" in consistencies:  # answered by the query sidecar (opt-in)
        os.environ["KSTREAM_QUERY_SIDECAR"] = "1"
    with tempfile.TemporaryDirectory(prefix="kstream-queries-") as wd:
        h = Harness(bootstrap, spec.partitions, Path(wd), 600)
        for i in range(rounds):
            base = None
            for rate, consistency in runs:
                load = Load(rate, spec.keys, spec.event_span_ms, consistency) if rate else None
                client = Client(load) if load is not None else None
                try:
                    x = h.run_once(w2, job, spec, ends, exp)
                finally:
                    if client is not None:
                        load = client.stop()
                if not x.valid:
                    raise click.ClickException(f"rate {rate}: wrong output: {x.note}")
                row = rows[rate, consistency]
                row.records_s.append(x.rate)
                base = x.rate if rate == 0 else base
                if base is not None:
                    row.loss.append(1 - x.rate / base)
                if load is not None:
                    row.latencies_ms += load.latencies_ms
                    row.late_ms += load.late_ms
                    row.p99s.append(percentile(load.latencies_ms, 0.99))
                    row.steady_p99s.append(percentile(steady(load), 0.99))
                    for s, n in load.statuses.items():
                        row.statuses[s] = row.statuses.get(s, 0) + n
                lat = load.latencies_ms if load else []
                if load is not None and trace_dir is not None:
                    name = f"round{i + 1}-{rate}-{consistency}.json"
                    (trace_dir / name).write_text(json.dumps(load.trace))
                click.echo(
                    f"round {i + 1}/{rounds} rate {rate}/s {consistency}: "
                    f"{x.rate / 1e3:.1f} k records/s, "
                    f"{len(lat)} lookups, p50 {percentile(lat, 0.5):.2f} ms, "
                    f"p99 {percentile(lat, 0.99):.2f} ms (from 1 s after the first answer: "
                    f"{percentile(steady(load), 0.99) if load else float('nan'):.2f} ms; "
                    f"the client late to send, idle: p99 "
                    f"{percentile(load.late_ms if load else [], 0.99):.2f} ms), "
                    f"answers {load.statuses if load else {}}"
                )
    return [rows[k] for k in runs]


def table(rows: list[Row]) -> str:
    lines = [
        "| queries/s | consistency | records/s, median | loss vs 0 q/s, median (min-max) of rounds "
        "| lookups answered | p50 ms | p99 ms | p99 of rounds, median (min-max) "
        "| p99 from 1 s after the first answer, rounds | client late to send when idle, p99 ms "
        "| max ms | answers |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lat = r.latencies_ms
        loss = p99s = steady_p99s = "-"
        if r.p99s:
            p99s = f"{statistics.median(r.p99s):.2f} ({min(r.p99s):.2f}-{max(r.p99s):.2f})"
            s = r.steady_p99s
            steady_p99s = f"{statistics.median(s):.2f} ({min(s):.2f}-{max(s):.2f})"
        if r.rate and r.loss:
            loss = f"{statistics.median(r.loss):.1%} ({min(r.loss):.1%} to {max(r.loss):.1%})"
        lines.append(
            f"| {r.rate} | {r.consistency if r.rate else '-'} "
            f"| {statistics.median(r.records_s) / 1e3:.1f} k | {loss} | {len(lat)} "
            f"| {percentile(lat, 0.5):.2f} | {percentile(lat, 0.99):.2f} | {p99s} | {steady_p99s} "
            f"| {percentile(r.late_ms, 0.99):.2f} "
            f"| {max(lat, default=float('nan')):.2f} | {dict(sorted(r.statuses.items()))} |"
        )
    return "\n".join(lines)


def plot(rows: list[Row], path: Path) -> None:
    import matplotlib  # the bench extra

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for c in sorted({r.consistency for r in rows if r.rate}):
        loaded = [r for r in rows if r.rate and r.consistency == c]
        for q, label in ((0.5, "p50"), (0.99, "p99")):
            ax.plot([r.rate for r in loaded], [percentile(r.latencies_ms, q) for r in loaded],
                    marker="o", label=f"{c} {label}")  # fmt: skip
    ax.axhline(5, color="grey", linestyle="--", label="5 ms target (p99 at 1000/s)")
    ax.set_xlabel("point lookups per second")
    ax.set_ylabel("latency, ms")
    ax.set_title("kstream queries against w2 at full speed")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


@click.command()
@bootstrap_option
@click.option("--rounds", default=3, show_default=True)
@click.option("--rates", default="0,250,500,1000,2000", show_default=True)
@click.option("--records", default=1_000_000, show_default=True)
@click.option("--keys", default=100_000, show_default=True)
@click.option("--plot", "plot_path", type=click.Path(path_type=Path), default=None)
@click.option(
    "--trace", "trace_dir", type=click.Path(path_type=Path), default=None,
    help="Write each loaded run's lookups (due s, status, latency ms) as JSON here.",
)  # fmt: skip
@click.option(
    "--consistency", default="latest", show_default=True,
    help="latest, checkpointed, or both (comma-separated: interleaved in each round).",
)  # fmt: skip
def main(
    bootstrap: str | None, rounds: int, rates: str, records: int, keys: int,
    plot_path: Path | None, consistency: str, trace_dir: Path | None,
) -> None:  # fmt: skip
    """Print the query latency and the job's throughput loss at each query rate."""
    spec = InputSpec(records, keys, 4, event_rate=5_000, fmt="json")
    every = [int(s) for s in rates.split(",")]
    if every[0] != 0:
        every = [0, *every]
    with kafka(bootstrap) as (bootstrap_, _):
        if trace_dir is not None:
            trace_dir.mkdir(parents=True, exist_ok=True)
        rows = measure(bootstrap_, rounds, every, spec, consistency.split(","), trace_dir)
    click.echo(table(rows))
    if plot_path is not None:
        plot(rows, plot_path)
        click.echo(f"plot: {plot_path}")


if __name__ == "__main__":
    main()
