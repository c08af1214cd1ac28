"""The elastic benchmark's job and its surroundings (``benchmarks/elastic.py`` runs the
scenarios): the topology file the workers run, the live producer, the read_committed
watcher noting when each stage-2 task's output advances, and the worker processes
(``kstream worker``, JSON logs, each an incarnation ``w<slot>.<n>``)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
import uuid
from collections import defaultdict
from datetime import datetime
from pathlib import Path

from benchmarks.elastic_measure import (
    Exactness,
    WindowKey,
    check_exact,
    owners_at,
    running_events,
)
from benchmarks.generate import KEEP_FOREVER
from benchmarks.procstats import Child
from kstream.kafka.clients import (
    TopicPartition,
    TopicSpec,
    ensure_topics,
    make_consumer,
    make_producer,
)
from kstream.operators.core import partition_for_key

REPO_DIR = Path(__file__).resolve().parent.parent
PARTITIONS = 8  # input, repartition and output: 8 tasks per stage, 16 in all
KEYS = 96
WINDOW_MS = 1000
INTERVAL_S = 2.0

_TOPOLOGY = """\
import os
import time
from kstream.api import Topology, Tumbling

_fds = {{}}


def _seen(stage):
    def log(v):
        fd = _fds.get(stage)
        if fd is None:
            path = os.path.join({seen_dir!r}, f"{{stage}}-{{os.getpid()}}.log")
            fd = _fds[stage] = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(fd, b"%d %.3f\\n" % (v["n"], time.time()))
    return log


topology = Topology({app!r})
(
    topology.source({topic!r}, key_serde="str", value_serde="json"{keyed})
    .peek(_seen("s1"))
    {shuffle}
    .window(Tumbling({window_ms}))
    .aggregate(
        lambda: {{"c": 0, "s": 0, "m": 0}},
        lambda a, v: {{"c": a["c"] + 1, "s": a["s"] + v["n"], "m": max(a["m"], v["ts"])}},
    )
    .map(lambda r: {{"start": r.start, "c": r.value["c"], "s": r.value["s"], "m": r.value["m"]}})
    .to({output!r}, key_serde="str", value_serde="json")
)
"""


#: The job's two shapes: ``keyed`` repartitions by ``key_by`` (2 stages, 16 tasks);
#: ``local`` reads a source already partitioned by the key (``keyed=True``: no shuffle,
#: one stage of 8 tasks), the job of issue 42's kill -9 target.
_SHAPES = {
    "keyed": ("", '.key_by(lambda v: "k%d" % v["k"], key_serde="str")\n    .peek(_seen("s2"))'),
    "local": (", keyed=True", ""),
}
JOBS = tuple(_SHAPES)


def task_of_key(key: str) -> int:
    """The stage-2 task (repartition partition) of output key ``key``: key_by writes the
    key with its serde (str: UTF-8) to kstream's ``partition_for_key`` of its bytes."""
    return partition_for_key(key.encode(), PARTITIONS)


class Run:
    """One scenario: broker topics, producer, output watcher and worker processes."""

    def __init__(
        self,
        bootstrap: str,
        workdir: Path,
        rate: int,
        timeout: float,
        job: str = "keyed",
        *,
        cooperative: bool = False,
    ) -> None:
        rid = uuid.uuid4().hex[:8]
        # (given to every worker, and so to the coordinator they elect: §6.8)
        self.group = (
            ["-X", "partition.assignment.strategy=cooperative-sticky"] if cooperative else []
        )
        self.bootstrap, self.rate, self.timeout = bootstrap, rate, timeout
        self.shuffled = job == "keyed"
        # The stage whose output the watcher follows, and every task of the job.
        self.last_stage = 1 if self.shuffled else 0
        self.tasks = {
            f"stage{i}-{p}" for i in range(self.last_stage + 1) for p in range(PARTITIONS)
        }
        self.stages = ("s1", "s2") if self.shuffled else ("s1",)
        self.app = f"elastic-{rid}"
        self.topic, self.output = f"elastic.in.{rid}", f"elastic.out.{rid}"
        self.dir = workdir / self.app
        self.seen_dir = self.dir / "seen"
        self.seen_dir.mkdir(parents=True)
        self.topo = self.dir / "job.py"
        self.topo.write_text(
            _TOPOLOGY.format(
                app=self.app, topic=self.topic, output=self.output, window_ms=WINDOW_MS,
                seen_dir=str(self.seen_dir), keyed=_SHAPES[job][0], shuffle=_SHAPES[job][1],
            )
        )  # fmt: skip
        from kstream.kafka.clients import make_admin

        ensure_topics(
            make_admin(bootstrap),
            [TopicSpec(t, PARTITIONS, KEEP_FOREVER) for t in (self.topic, self.output)],
        )
        self.produced: list[tuple[int, int, int]] = []  # (n, k, ts ms)
        self.advances: dict[int, list[float]] = defaultdict(list)  # task -> wall times
        self.windows: list[tuple[WindowKey, int, int]] = []
        self.stop_flag = threading.Event()
        self.stop_producing = threading.Event()
        self.workers: dict[str, Child] = {}  # incarnation name -> process
        self.slots: dict[int, str] = {}  # worker slot -> its current incarnation
        self.threads = [
            threading.Thread(target=self._produce, daemon=True),
            threading.Thread(target=self._watch, daemon=True),
        ]
        for t in self.threads:
            t.start()

    # -------------------------------------------------------------- input and output
    def _produce(self) -> None:
        producer = make_producer(self.bootstrap, extra={"linger.ms": 5})
        n, tick = 0, 0.05
        t0 = time.monotonic()
        while not self.stop_producing.is_set():
            due = t0 + n / self.rate
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(min(delay, tick))  # pacing the producer (not synchronisation)
                continue
            now = int(time.time() * 1000)
            k = n % KEYS
            value = json.dumps({"n": n, "k": k, "ts": now}).encode()
            # (keyed: round-robin, the key_by partitions; local: partitioned by the key)
            key, part = (str(k), n % PARTITIONS) if self.shuffled else self._keyed(k)
            producer.produce(self.topic, value, key.encode(), partition=part, timestamp=now)
            self.produced.append((n, k, now))
            n += 1
            if n % 50 == 0:
                producer.poll(0)
        if producer.flush(30.0):
            raise RuntimeError("input not delivered")

    @staticmethod
    def _keyed(k: int) -> tuple[str, int]:
        key = f"k{k}"
        return key, task_of_key(key)

    def output_task(self, partition: int) -> str:
        """The task whose output is output ``partition`` (the output key's task)."""
        return f"stage{self.last_stage}-{partition}"

    def task_of_record(self, stage: str, n: int) -> str:
        """The task that processes record ``n`` in ``stage`` ("s1" or "s2")."""
        if stage == "s1" and self.shuffled:
            return f"stage0-{n % PARTITIONS}"  # the producer's partition
        return self.output_task(task_of_key(f"k{n % KEYS}"))

    def _watch(self) -> None:
        consumer = make_consumer(self.bootstrap, f"{self.app}-watch", read_committed=True)
        consumer.assign([TopicPartition(self.output, p, 0) for p in range(PARTITIONS)])
        try:
            while not self.stop_flag.is_set():
                msgs = consumer.consume(num_messages=5000, timeout=0.05)
                now = time.time()
                for m in msgs:
                    if m.error() is not None:
                        continue
                    key = (m.key() or b"").decode()
                    v = json.loads(m.value() or b"{}")
                    self.windows.append(((key, int(v["start"])), int(v["c"]), int(v["s"])))
                    task = task_of_key(key)
                    adv = self.advances[task]
                    if not adv or adv[-1] != now:
                        adv.append(now)
        finally:
            consumer.close()

    # -------------------------------------------------------------- workers
    def start(self, slot: int) -> None:
        name = f"w{slot}.{sum(1 for w in self.workers if w.startswith(f'w{slot}.'))}"
        kstream = str(Path(sys.executable).with_name("kstream"))
        self.workers[name] = Child(
            [kstream, "worker", str(self.topo), "-b", self.bootstrap,
             "--store", f"file://{self.dir / 'store'}", "--state-dir", str(self.dir / f"state-{slot}"),
             "--interval", str(INTERVAL_S), "--guarantee", "exactly_once", "--coordinator", "auto",
             *self.group],
            cwd=REPO_DIR, log_dir=self.dir, name=name,
            env={**os.environ, "KSTREAM_LOG_FORMAT": "json"},
        )  # fmt: skip
        self.slots[slot] = name

    def stop(self, slot: int, sig: signal.Signals = signal.SIGTERM) -> None:
        """Signal a worker and wait until it exited (SIGKILL after 60 s)."""
        w = self.workers[self.slots.pop(slot)]
        w.kill(sig)
        deadline = time.monotonic() + 60
        while w.running and time.monotonic() < deadline:
            time.sleep(0.1)  # polling the process for its exit, with a deadline
        if w.running:
            w.stop(grace=0)

    def settle(self, since: float, advances: int = 2) -> None:
        """Wait until the job runs again after a change at ``since`` (unix time): a task
        assignment claimed after it covers every task, by live workers only, each of
        them running some; and every stage-2 task's output advanced ``advances`` times
        after that assignment."""
        deadline = time.monotonic() + self.timeout
        while True:
            events = self.ownership()
            live = set(self.slots.values())
            last = max((e[0] for e in events), default=0.0)
            owners = owners_at(events, time.time())
            if last > since and len(owners) == len(self.tasks) and set(owners.values()) == live:
                after = [
                    [t for t in self.advances.get(p, []) if t > last] for p in range(PARTITIONS)
                ]
                if all(len(a) >= advances for a in after):
                    return
            for name in live:
                if not self.workers[name].running:
                    raise RuntimeError(f"{name} exited:\n{self.workers[name].result().stderr_tail}")
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the job did not run every task again within {self.timeout} s "
                    f"(owners: {owners}; live workers: {sorted(live)})"
                )
            time.sleep(0.3)  # polling the logs and the watcher for a condition, with a deadline

    def wait_stable(self) -> None:
        """Wait until the workers' last task assignment is 3 intervals old and covers
        every task (joins at start roll the job back a few times)."""
        deadline = time.monotonic() + self.timeout
        while True:
            events = self.ownership()
            now = time.time()
            if events and now - max(e[0] for e in events) > 3 * INTERVAL_S:
                owners = owners_at(events, now)
                if len(owners) == len(self.tasks) and set(owners.values()) <= set(
                    self.slots.values()
                ):
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the job did not settle within {self.timeout} s")
            time.sleep(0.5)  # polling the logs for a condition, with a deadline

    def seen(self) -> dict[str, list[tuple[int, float]]]:
        """Every ``(record id, time)`` each stage's peek logged so far."""
        out: dict[str, list[tuple[int, float]]] = {}
        for stage in self.stages:
            words = [w for f in self.seen_dir.glob(f"{stage}-*.log") for w in f.read_text().split()]
            out[stage] = [(int(n), float(t)) for n, t in zip(words[::2], words[1::2], strict=True)]
        return out

    def log_count(self, text: str, t0: float, t1: float) -> int:
        """The workers' log lines holding ``text`` logged from ``t0`` to ``t1`` (unix time)."""
        n = 0
        for name in self.workers:
            for line in (self.dir / f"{name}.err").read_text(errors="replace").splitlines():
                if text in line:
                    with contextlib.suppress(ValueError, KeyError):
                        when = datetime.fromisoformat(json.loads(line)["time"]).timestamp()
                        n += t0 <= when <= t1
        return n

    def finish(self) -> Exactness:
        """Stop input; wait until every window ending 2 s before the last input is out;
        stop the workers; check the output's exactness."""
        self.stop_producing.set()
        self.threads[0].join(60)
        last_ts = self.produced[-1][2]
        cut = last_ts - last_ts % WINDOW_MS - 2 * WINDOW_MS
        reference: dict[WindowKey, tuple[int, int]] = {}
        for n, k, ts in self.produced:
            wk = (f"k{k}", ts - ts % WINDOW_MS)
            c, s = reference.get(wk, (0, 0))
            reference[wk] = (c + 1, s + n)
        want = {wk for wk in reference if wk[1] + WINDOW_MS <= cut}
        deadline = time.monotonic() + self.timeout
        while not want <= {wk for wk, _, _ in list(self.windows)}:
            if time.monotonic() > deadline:
                break  # counted as lost below
            time.sleep(0.2)  # polling the watcher's record for a condition, with a deadline
        time.sleep(2 * INTERVAL_S)  # let a duplicate, if any, become visible too
        for slot in list(self.slots):
            self.stop(slot)
        self.stop_flag.set()
        self.threads[1].join(30)
        return check_exact(reference, list(self.windows), cut, WINDOW_MS)

    def coordinator_slot(self) -> int | None:
        """The slot of the live worker that last started the coordinator (elected, or
        acting: taken over from a silent host; an elected one that defers starts none)."""
        last: tuple[float, int] | None = None
        for slot, name in self.slots.items():
            for line in (self.dir / f"{name}.err").read_text(errors="replace").splitlines():
                if "; starting the coordinator" in line:
                    with contextlib.suppress(ValueError, KeyError):
                        when = datetime.fromisoformat(json.loads(line)["time"]).timestamp()
                        last = max(last or (when, slot), (when, slot))
        return None if last is None else last[1]

    def ownership(self) -> list[tuple[float, str, list[str]]]:
        events = []
        for name in self.workers:
            lines = (self.dir / f"{name}.err").read_text(errors="replace").splitlines()
            events += running_events(name, lines)
        return events

    def close(self) -> None:
        self.stop_producing.set()
        self.stop_flag.set()
        for w in self.workers.values():
            w.stop(grace=10)
