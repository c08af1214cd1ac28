"""One point of the partitions x workers curves (``benchmarks/scale_curves.py`` runs
them; the figures are read by ``benchmarks/scale_measure.py``).

W ``kstream worker`` processes (electing their coordinator, as deployed) run a 2-stage
keyed window job over an input of P partitions: ``key_by`` the user into a repartition
topic of P partitions, a 1-hour tumbling-window count, the exactly-once sink into an
output topic of P partitions; checkpoints every 5 s. Every input record falls in one
window W0, so nothing is output until a probe closes it:

1. start the workers on the loaded input; until the latest completed checkpoint covers
   the input and 3 checkpoints completed (or the point's budget ran out): poll each
   worker's Prometheus endpoint for the records its source tasks read, its ``/proc``
   for threads, open files and RSS; tail the control topic and a few partitions of the
   repartition topic (the topics are purged and compacted as the job runs: read live);
2. kill -9 one worker (the first started: usually the coordinator's host) and start it
   again at once (as a deployment restarts its pod), append one probe per input
   partition past W0's end; kill -9 → the first output a read_committed reader sees;
   then every key's W0 count, whose sum must be the input's records (exact).

A point that does not get there within its budget returns with ``failure`` saying what
happened, and the figures it got so far.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer as ConfluentProducer

from benchmarks import generate
from benchmarks.generate import KEEP_FOREVER, InputSpec
from benchmarks.procstats import Child
from benchmarks.recovery import RECOVERY_EVENT_RATE, probe_key, window_bounds
from benchmarks.scale_measure import (
    ControlRecord,
    Point,
    ProcSample,
    barriers_per_checkpoint,
    control_stats,
    peak,
    proc_sample,
    read_rate,
    records_in,
)
from benchmarks.scaling_runs import _covered
from kstream.checkpointstorage.metadata import latest_completed
from kstream.checkpointstorage.urls import open_store
from kstream.kafka.clients import (
    TopicPartition,
    TopicSpec,
    ensure_topics,
    make_admin,
    make_consumer,
)
from kstream.names import control_topic, repartition_topic

REPO_DIR = Path(__file__).resolve().parent.parent
INTERVAL_S = 5.0
CHECKPOINTS = 3  # completed checkpoints a point waits for (durations, records per checkpoint)
SAMPLED_PARTITIONS = 8  # repartition partitions tailed for barriers
RSS_CAP_GB = 8.0  # the workers' RSS together past which a point gives up (a shared machine)

_TOPOLOGY = """\
from kstream.api import Topology, Tumbling, WatermarkStrategy

topology = Topology({app!r})
(
    topology.source({topic!r}, key_serde="bytes", value_serde="json",
                    watermark=WatermarkStrategy(max_out_of_orderness_ms=0))
    .key_by(lambda e: e["user"], key_serde="str", partitions={partitions})
    .window(Tumbling(3_600_000))
    .count()
    .map(lambda r: {{"start": r.start, "value": r.value}})
    .to({output!r}, key_serde="str", value_serde="json")
)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Tail:
    """A thread reading ``partitions`` of ``topic`` from offset 0 as they are written
    (read_uncommitted: what was written), once the job created the topic; ``keep``
    turns a message into what to keep, or None."""

    def __init__(
        self, bootstrap: str, topic: str, partitions: Callable[[int], list[int]],
        keep: Callable[[Any], Any | None],
    ) -> None:  # fmt: skip
        self.got: list[Any] = []
        self._stop = threading.Event()
        self._args = (bootstrap, topic, partitions, keep)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        bootstrap, topic, partitions, keep = self._args
        consumer = make_consumer(
            bootstrap, f"scale-tail-{uuid.uuid4().hex[:6]}", read_committed=False,
            extra={"allow.auto.create.topics": False},
        )  # fmt: skip
        try:
            while not self._stop.is_set():
                meta = consumer.list_topics(topic, timeout=5.0).topics.get(topic)
                if meta is not None and meta.error is None and meta.partitions:
                    break
                self._stop.wait(0.5)  # polling for the topic the job creates, until stopped
            else:
                return
            parts = partitions(len(meta.partitions))
            consumer.assign([TopicPartition(topic, p, 0) for p in parts])
            while not self._stop.is_set():
                for m in consumer.consume(num_messages=10_000, timeout=0.2):
                    if m.error() is None:
                        kept = keep(m)
                        if kept is not None:
                            self.got.append(kept)
        finally:
            consumer.close()

    def stop(self) -> list[Any]:
        self._stop.set()
        self._thread.join(30)
        return self.got


def _control(m: Any) -> ControlRecord:
    return ControlRecord.parse(m.timestamp()[1], m.value())


def _event(m: Any) -> tuple[str, bytes | None] | None:
    for k, v in m.headers() or ():
        if k == "ks.event":
            return (v or b"").decode(), m.value()
    return None


def _sampled(n: int) -> list[int]:
    if n <= SAMPLED_PARTITIONS:
        return list(range(n))
    return [i * n // SAMPLED_PARTITIONS for i in range(SAMPLED_PARTITIONS)]


class Workers:
    """The W worker processes of a point, each with its metrics port."""

    def __init__(self, argv: list[str], count: int, workdir: Path, app: str) -> None:
        self.argv, self.workdir, self.app = argv, workdir, app
        self.procs: list[Child] = []
        self.ports: list[int] = []
        for i in range(count):
            self.procs.append(self._start(i, 0))
            self.ports.append(self._port)

    def _start(self, i: int, incarnation: int) -> Child:
        self._port = _free_port()
        kstream = str(Path(sys.executable).with_name("kstream"))
        return Child(
            [kstream, "worker", *self.argv, "--state-dir", str(self.workdir / f"state-{i}"),
             "--metrics-port", str(self._port), "--metrics-host", "127.0.0.1"],
            cwd=REPO_DIR, log_dir=self.workdir, name=f"{self.app}-w{i}.{incarnation}",
        )  # fmt: skip

    def restart(self, i: int) -> None:
        self.procs[i] = self._start(i, 1)
        self.ports[i] = self._port

    def pids(self) -> list[int]:
        """The ``kstream worker`` processes (the spawners' children: benchmarks.spawn)."""
        out = []
        for c in self.procs:
            try:
                out.append(int(Path(f"/proc/{c.pid}/task/{c.pid}/children").read_text().split()[0]))
            except (OSError, IndexError, ValueError):
                continue
        return out

    def read(self, topic: str) -> int | None:
        """Records the workers' tasks read from ``topic`` so far (None: an endpoint is not up)."""
        total = 0
        for port in self.ports:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    total += records_in(r.read().decode(), topic)
            except OSError:
                return None
        return total

    def exited(self) -> str | None:
        for i, c in enumerate(self.procs):
            if not c.running:
                lines = c.result().stderr_tail.strip().splitlines()
                return f"worker {i} exited: {lines[-1] if lines else '(no output)'}"
        return None

    def stop(self) -> None:
        for c in self.procs:
            c.stop(grace=20)


def _proc(pids: list[int]) -> list[ProcSample]:
    out = []
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            fds = len(os.listdir(f"/proc/{pid}/fd"))
        except OSError:
            continue
        out.append(proc_sample(status, fds))
    return out


def measure_point(
    bootstrap: str, workdir: Path, partitions: int, workers: int, *, records: int,
    keys: int, budget: float, label: str, rss_cap_gb: float = RSS_CAP_GB,
    say: Callable[[str], None] = print,
) -> Point:  # fmt: skip
    """Run one point (module doc); its topics, store and state are removed after."""
    t_begin = time.monotonic()
    point = Point(label, partitions, workers, records, tasks=2 * partitions)
    spec = InputSpec(records, keys, partitions, event_rate=RECOVERY_EVENT_RATE)
    w0_start, w0_end = window_bounds(spec)
    generate.load(bootstrap, spec, log=False)
    rid = uuid.uuid4().hex[:8]
    app, out = f"scale-{rid}", f"scale.out.{rid}"
    pdir = workdir / app
    pdir.mkdir(parents=True)
    ensure_topics(make_admin(bootstrap), [TopicSpec(out, partitions, KEEP_FOREVER)])
    topo = pdir / "job.py"
    topo.write_text(_TOPOLOGY.format(app=app, topic=spec.topic, output=out, partitions=partitions))
    store_url = f"file://{pdir / 'store'}"
    argv = [str(topo), "-b", bootstrap, "--store", store_url, "--interval", str(INTERVAL_S),
            "--guarantee", "exactly_once", "--coordinator", "auto"]  # fmt: skip
    control = Tail(bootstrap, control_topic(app), lambda n: [0], _control)
    events = Tail(bootstrap, repartition_topic(app, "stage0"), _sampled, _event)
    t_start = time.time()
    ws = Workers(argv, workers, pdir, app)
    samples: list[tuple[float, int]] = []
    procs: list[ProcSample] = []
    t_kill: float | None = None
    try:
        point.failure = _run(
            ws, spec, store_url, app, budget, rss_cap_gb, t_start, samples, procs, point
        )
        point.rate, point.read = read_rate(samples)
        if point.read < records:  # not all read: no rate to speak of
            point.rate = 0.0
        if not point.failure:
            t_kill, point.failure = _kill_and_recover(
                ws, bootstrap, spec, out, w0_start, w0_end, budget, point
            )
    except Exception as e:  # a point that breaks is a row saying how, not a lost run
        point.failure = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    finally:
        ws.stop()
        ctl = [r for r in control.stop() if t_kill is None or r.ts_ms < t_kill * 1000]
        evs = events.stop()
        stats = control_stats(ctl)
        point.checkpoints, point.aborted = len(stats.completed), stats.aborted
        point.duration_ms = stats.durations_ms
        if stats.first_complete_ms is not None:
            point.first_checkpoint_s = stats.first_complete_ms / 1000.0 - t_start
        if stats.per_checkpoint:
            point.control_per_checkpoint = float(
                sorted(stats.per_checkpoint)[len(stats.per_checkpoint) // 2]
            )
        point.control_per_interval = stats.per_interval
        sampled = len(_sampled(partitions))
        bars = barriers_per_checkpoint(evs, stats.completed, partitions / sampled)
        if bars:
            point.barriers_per_checkpoint = float(sorted(bars)[len(bars) // 2])
        top = peak(procs)
        point.threads, point.open_files, point.rss_mb = top.threads, top.open_files, top.rss_mb
        _cleanup(bootstrap, app, pdir)
        point.seconds = time.monotonic() - t_begin
    say(f"  {point.to_json()}")
    return point


def _run(
    ws: Workers, spec: InputSpec, store_url: str, app: str, budget: float, rss_cap_gb: float,
    t_start: float,
    samples: list[tuple[float, int]], procs: list[ProcSample], point: Point,
) -> str:  # fmt: skip
    """Step 1 of the module doc; returns the failure ('' if none)."""
    total = spec.records
    store_dir = Path(store_url.removeprefix("file://"))
    deadline = time.monotonic() + budget
    seen: set[int] = set()
    covered, next_store = 0, 0.0
    reading = True
    while True:
        now = time.time()
        if reading:
            n = ws.read(spec.topic)
            if n is not None:
                samples.append((now, n))
        step = _proc(ws.pids())
        procs.extend(step)
        if time.monotonic() >= next_store and store_dir.is_dir():
            next_store = time.monotonic() + 0.5
            meta = latest_completed(open_store(store_url), app)
            if meta is not None:
                seen.add(meta.checkpoint_id)
                covered = _covered(meta, spec.topic)
                if covered >= total and not point.covered_s:
                    point.covered_s = meta.complete_time - t_start
                    reading = False
        if covered >= total and len(seen) >= CHECKPOINTS:
            end = peak(step)
            point.end_threads, point.end_open_files = end.threads, end.open_files
            point.end_rss_mb = end.rss_mb
            return ""
        gone = ws.exited()
        if gone:
            return gone
        rss = sum(s.rss_mb for s in step)
        if rss > rss_cap_gb * 1024:
            return (
                f"gave up at {rss / 1024:.1f} GB RSS, over the {rss_cap_gb:.0f} GB cap "
                f"(a shared machine); {sum(s.threads for s in step)} threads in "
                f"{len(step)} worker(s), {len(seen)} checkpoint(s) by then"
            )
        if time.monotonic() > deadline:
            threads = sum(s.threads for s in step)
            what = (
                f"no checkpoint in {budget:.0f} s"
                if not seen
                else f"input not covered in {budget:.0f} s ({covered} of {total} records, "
                f"{len(seen)} checkpoint(s))"
                if covered < total
                else f"{len(seen)} of {CHECKPOINTS} checkpoints in {budget:.0f} s"
            )
            return f"{what}; {threads} threads in {len(step)} worker(s) at give-up"
        time.sleep(0.25)  # polling endpoints, /proc and the store, with a deadline


def _kill_and_recover(
    ws: Workers, bootstrap: str, spec: InputSpec, out: str, w0_start: int, w0_end: int,
    budget: float, point: Point,
) -> tuple[float, str]:  # fmt: skip
    """Step 2 of the module doc: ``(kill time, failure or '')``."""
    watcher = make_consumer(bootstrap, f"scale-watch-{uuid.uuid4().hex[:6]}", read_committed=True)
    watcher.assign([TopicPartition(out, p, 0) for p in range(spec.partitions)])
    early = watcher.consume(num_messages=1, timeout=0.5)
    producer = ConfluentProducer({"bootstrap.servers": bootstrap, "acks": "all"})
    producer.list_topics(spec.topic, timeout=10.0)  # connected before the kill
    try:
        t_kill = time.time()
        victim = ws.procs[0]
        victim.kill()
        victim.wait(60)
        ws.restart(0)
        for p in range(spec.partitions):
            probe = {"user": "probe", "kind": "click", "amount": 1.0, "ts": w0_end + 1000}
            producer.produce(spec.topic, json.dumps(probe).encode(), probe_key(p, spec.partitions),
                             partition=p, timestamp=w0_end + 1000)  # fmt: skip
        if producer.flush(30.0):
            return t_kill, "probe records not delivered"
        deadline = time.monotonic() + budget
        counts: dict[str, int] = {}
        dup = 0
        for m in early:
            if m.error() is None:
                point.exact = "output before W0 closed"
        while sum(counts.values()) < spec.records and time.monotonic() < deadline:
            got = [
                m for m in watcher.consume(num_messages=10_000, timeout=0.2) if m.error() is None
            ]
            if got and point.kill_to_output_s is None:
                point.kill_to_output_s = time.time() - t_kill
            for m in got:
                v = json.loads(m.value() or b"{}")
                if v["start"] != w0_start:
                    continue
                key = (m.key() or b"").decode()
                dup += key in counts
                counts[key] = v["value"]
        if point.kill_to_output_s is None:
            return t_kill, f"no output {budget:.0f} s after the kill -9; " + (ws.exited() or "")
        total = sum(counts.values())
        if not point.exact:
            point.exact = (
                "yes" if total == spec.records and not dup
                else f"NO: {total} of {spec.records} counted, {dup} keys twice"
            )  # fmt: skip
        return t_kill, ""
    finally:
        watcher.close()


def _cleanup(bootstrap: str, app: str, pdir: Path) -> None:
    admin = make_admin(bootstrap)
    rid = app.removeprefix("scale-")
    mine = [t for t in admin.list_topics(timeout=10.0).topics if t.startswith(f"{app}.")]
    for t in [*mine, f"scale.out.{rid}"]:
        try:
            generate.delete_topic(bootstrap, t)
        except Exception:  # best effort: the broker is the run's own
            continue
    shutil.rmtree(pdir, ignore_errors=True)
