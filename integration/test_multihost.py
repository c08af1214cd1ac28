"""Many hosts, simulated for real: each worker in its own Linux network namespace.

The broker and the S3 server (S3Proxy) run on the host side, listening only on a
bridge the test creates; each worker runs in a namespace joined to that bridge by
a veth pair, with its own state directory. Workers share nothing but Kafka and the
object store, and elect the coordinator among themselves (no coordinator process).
One exactly-once word-count job runs through three disruptions while its input
flows, and its ``read_committed`` output must then equal the plain-Python expected
output exactly (0 lost, 0 duplicated):

1. kill -9 of the worker hosting the coordinator, restarted in a *different*
   namespace with an empty state directory: it restores from the store (downloads),
   and another worker takes over the coordinator;
2. the link of the worker that is the active coordinator and holds sink tasks cut
   for 30 s: the others fail over and carry on (a new coordinator, a Resume
   without it), nothing it still tries changes the committed state (the exact
   output), and when the link is back it rejoins (owns tasks again);
3. the S3 server stopped for 60 s: checkpoints fail and are counted
   (``CheckpointAborted``), processing goes on (no restore, no worker dies), and
   checkpoints complete again once it is back.

Under ``CI=true`` a machine without network namespaces fails the test with the
reason; elsewhere it is skipped. Everything created is removed, also on failure.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from integration.ci import unavailable
from integration.e2e.crash import _wait_drained
from integration.e2e.generator import Generator
from integration.e2e.harness import (
    Comparison,
    ControlWatcher,
    JobSettings,
    JobUnderTest,
    Proc,
    create_topics,
    read_sink,
    source_ends,
    wait_until,
    write_renamed_topology,
)
from integration.e2e.scenarios import wordcount
from integration.netns import Host, NetLab, missing_capability
from integration.s3server import S3Server
from kstream.checkpointstorage.base import StoreError
from kstream.checkpointstorage.metadata import known_completed
from kstream.dev.localbroker import LocalBroker, LocalBrokerError
from kstream.protocol.messages import (
    CheckpointAborted,
    CheckpointCompleted,
    Restore,
    Resume,
    TriggerCheckpoint,
)

pytestmark = pytest.mark.integration

CUT_SECONDS = 30.0
OUTAGE_SECONDS = 60.0


@dataclass
class Lab:
    net: NetLab
    hosts: list[Host]
    bootstrap: str
    s3: S3Server


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """Bridge + 4 namespaces, a broker and S3Proxy on the bridge address; all removed after."""
    reason = missing_capability()
    if reason is not None:
        unavailable("multi-host test needs network namespaces", reason)
    net = NetLab()
    broker: LocalBroker | None = None
    s3: S3Server | None = None
    try:
        net.start()
        hosts = [net.add_host() for _ in range(4)]
        broker = LocalBroker(tmp_path_factory.mktemp("mh-kafka"), host=net.bridge_address)
        try:
            broker.start()
        except LocalBrokerError as e:
            pytest.fail(f"broker on the lab bridge could not start: {e}", pytrace=False)
        s3 = S3Server(tmp_path_factory.mktemp("mh-s3"), host=net.bridge_address).start()
        yield Lab(net, hosts, broker.bootstrap, s3)
    finally:
        if s3 is not None:
            s3.stop()
        if broker is not None:
            broker.stop()
        errors = net.teardown()
        assert not errors, f"lab teardown left something behind: {errors}"


class NamespacedJob(JobUnderTest):
    """A job whose workers run inside the lab's namespaces (``slot -> host``)."""

    def place(self, slot: int, host: Host) -> None:
        self.prefix[f"worker-{slot}"] = host.prefix()


def _host_of(job: JobUnderTest) -> str | None:
    return job.coordinator_host()


def _after(messages: Sequence[tuple[float, object]], t: float, kind: type) -> list[object]:
    return [m for ts, m in messages if ts >= t and isinstance(m, kind)]


def test_workers_on_separate_hosts_survive_kill_cut_link_and_store_outage(
    lab: Lab, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed = random.SystemRandom().randrange(1_000_000)
    scenario = wordcount(random.Random(seed))
    app = f"mh-{uuid.uuid4().hex[:8]}"
    renames = {"lines": f"{app}.in.lines", scenario.sink: f"{app}.out.{scenario.sink}"}
    create_topics(lab.bootstrap, {renames["lines"]: 3, renames[scenario.sink]: 3})
    topo = write_renamed_topology(scenario.topology_file, renames, tmp_path / "topology.py")
    settings = JobSettings(
        coordinator="auto",
        # A 60 s store outage fails a checkpoint every interval (0.7 s): tolerate them all.
        tolerable_failures=1000,
        store_url=lab.s3.fresh_url("mh"),
        # Bounded retries: an upload during the outage declines its checkpoint quickly.
        store_options=lab.s3.options(max_retries="2", retry_timeout="4", init_backoff="0.1"),
    )
    job = NamespacedJob(lab.bootstrap, app, topo, tmp_path, settings)
    place = {0: lab.hosts[0], 1: lab.hosts[1], 2: lab.hosts[2]}
    spare = lab.hosts[3]
    watcher: ControlWatcher | None = None
    gen: Generator | None = None
    sink_topic = renames[scenario.sink]
    notes: list[str] = []
    try:
        for slot, host in place.items():
            job.place(slot, host)
            job.start_worker(slot)

        def first_completion() -> bool:
            job.assert_alive()
            try:
                return bool(known_completed(job.store(), app))
            except StoreError:
                return False

        wait_until(
            "a first completed checkpoint",
            first_completion,
            90.0,
            lambda: job.current["worker-0"].text()[-800:],
        )
        watcher = ControlWatcher(lab.bootstrap, app)
        watcher.start()
        control = watcher.log
        gen = Generator(
            lab.bootstrap,
            scenario.renamed(renames),
            rate=9.0,  # the input flows through all three disruptions (~170 s)
            late_gate=lambda: _sink_has_output(lab.bootstrap, sink_topic),
        )
        gen.start()

        # 1. kill -9 of the coordinator's host, restarted elsewhere with no local state.
        wait_until(
            "a worker hosts the coordinator",
            lambda: _host_of(job) is not None,
            60.0,
            lambda: f"live: {sorted(job.current)}",
        )
        victim = _host_of(job)
        assert victim is not None
        slot = int(victim.removeprefix("worker-"))
        job.kill(victim, "the coordinator's host (phase 1)")
        place[slot] = spare
        job.place(slot, spare)
        fresh_state = tmp_path / f"state-{slot}-moved"
        moved: Proc = job.start_worker(slot, state=fresh_state)
        wait_until(
            "the moved worker restored its tasks from the store and runs them",
            lambda: (
                bool(moved.lines_with("downloading"))
                and bool(moved.lines_with("resumed: running ['"))
            ),
            120.0,
            lambda: moved.text()[-800:],
        )
        new_host = _host_of(job)
        notes.append(f"phase 1: killed {victim}, moved to {spare.name}; coordinator on {new_host}")

        # 2. cut the active coordinator's link for 30 s while it holds sink tasks.
        wait_until(
            "a worker hosts the coordinator",
            lambda: _host_of(job) is not None,
            60.0,
            lambda: f"live: {sorted(job.current)}",
        )
        cut_role = _host_of(job)
        assert cut_role is not None
        cut_slot = int(cut_role.removeprefix("worker-"))
        cut_proc = job.current[cut_role]
        assignment = [ln for ln in cut_proc.text().splitlines() if "assignment changed" in ln]
        assert assignment and ".repartition" in assignment[-1], (
            f"{cut_role} holds no sink task: {assignment[-1:] or 'no assignment'}"
        )
        t_cut = time.time()
        lab.net.cut(place[cut_slot])
        try:
            wait_until(
                "another worker coordinates and the job resumes without the cut one",
                lambda: (
                    any(
                        "elected (" in ln
                        for role, p in job.current.items()
                        if role != cut_role
                        for ln in p.lines_with("coordinator election:")
                        if _stamp(ln) > t_cut
                    )
                    and bool(_after(control.messages, t_cut, Resume))
                ),
                CUT_SECONDS,
                lambda: f"messages since the cut: {len(_after(control.messages, t_cut, object))}",
            )
            remaining = CUT_SECONDS - (time.time() - t_cut)
            time.sleep(max(0.0, remaining))  # the cut lasts 30 s: a duration, not a wait
        finally:
            lab.net.mend(place[cut_slot])
        t_mend = time.time()
        wait_until(
            "the cut worker rejoins and is resumed as an owner again",
            lambda: (
                cut_proc.alive()
                and any(_stamp(ln) > t_mend for ln in cut_proc.lines_with("assignment changed"))
                and any(
                    isinstance(m, Resume) and ts > t_mend and len(set(m.owners.values())) == 3
                    for ts, m in control.messages
                )
            ),
            120.0,
            lambda: cut_proc.text()[-1500:],
        )
        stopped = [
            ln
            for ln in cut_proc.lines_with("coordinator")
            if _stamp(ln) > t_cut
            and ("session lost" in ln or "no longer elected" in ln or "took over" in ln)
        ]
        assert stopped, "the cut coordinator must have stopped coordinating"
        wait_until(
            "a checkpoint completes with the cut worker back",
            lambda: bool(_after(control.messages, t_mend, CheckpointCompleted)),
            60.0,
            lambda: f"aborted since: {len(_after(control.messages, t_mend, CheckpointAborted))}",
        )
        notes.append(f"phase 2: cut {cut_role} for {CUT_SECONDS:.0f}s: {stopped[0].strip()}")

        # 3. the S3 server stopped for 60 s.
        restores_before = len(control.of(Restore))
        live = dict(job.current)
        t_down = time.time()
        lab.s3.stop()
        t_stopped = time.time()
        try:
            wait_until(
                "a checkpoint fails while the store is down",
                lambda: bool(_after(control.messages, t_down, CheckpointAborted)),
                OUTAGE_SECONDS,
                lambda: f"{len(control.messages)} control messages",
            )
            time.sleep(max(0.0, OUTAGE_SECONDS - (time.time() - t_down)))  # the outage
            job.assert_alive()
        finally:
            lab.s3.restart()
        t_up = time.time()
        aborted = _after(control.messages, t_down, CheckpointAborted)
        during = [m for ts, m in control.messages if t_down <= ts < t_up]
        assert len(control.of(Restore)) == restores_before, "the outage caused a restore"
        # A checkpoint triggered before the server stopped may still complete (its
        # uploads and metadata written already: its completion can be read after
        # t_down); none triggered after it (the trigger's own wall-clock time) can.
        triggered_during = {
            m.checkpoint_id
            for m in during
            if isinstance(m, TriggerCheckpoint) and m.timestamp / 1000 >= t_stopped
        }
        assert triggered_during, "checkpoints are triggered during the outage"
        assert not [
            m
            for m in during
            if isinstance(m, CheckpointCompleted) and m.checkpoint_id in triggered_during
        ]
        assert {r: p.popen.pid for r, p in job.current.items()} == {
            r: p.popen.pid for r, p in live.items()
        }, "a worker died during the outage"
        wait_until(
            "checkpoints complete again after the store returned",
            lambda: bool(_after(control.messages, t_up, CheckpointCompleted)),
            60.0,
            lambda: f"aborted since: {len(_after(control.messages, t_up, CheckpointAborted))}",
        )
        notes.append(f"phase 3: {len(aborted)} checkpoints aborted during the outage")

        # The whole input, then the exact output.
        wait_until(
            "the generator wrote the whole input",
            lambda: gen is not None and (gen.finished_at is not None or gen.error is not None),
            240.0,
            lambda: f"{gen.produced if gen else 0} of {len(scenario.records)}",
        )
        if gen.error is not None:
            raise gen.error
        ends = source_ends(lab.bootstrap, {renames["lines"]: 3})
        _wait_drained(job, control, lab.bootstrap, sink_topic, ends, 120.0)
        sink = read_sink(lab.bootstrap, sink_topic)
        codes = job.stop_all()
        cmp = Comparison.of(scenario.expected, scenario.actual([r.value for r in sink]))
        with capsys.disabled():
            print(f"\n[multihost] seed {seed}, app {app}, bridge {lab.net.bridge_address}")
            for line in notes:
                print(f"[multihost] {line}")
            print(f"[multihost] exit codes {codes}; output: {cmp.describe()}")
        assert cmp.expected > 50
        assert (
            sum(cmp.lost.values()),
            sum(cmp.duplicated.values()),
            sum(cmp.unexpected.values()),
        ) == (0, 0, 0), cmp.describe()
        assert set(codes.values()) == {0}, codes
        # Three coordinators at least (the first, after the kill, after the cut), and
        # checkpoint ids never reused across them.
        hosts = {p.log for p in job.procs if p.lines_with("coordinator election: elected")}
        assert len(hosts) >= 2, hosts
        triggers = [m.checkpoint_id for _t, m in control.of(TriggerCheckpoint)]
        assert triggers == sorted(set(triggers)), "checkpoint ids are never reused"
    finally:
        if gen is not None:
            gen.halt()
        if watcher is not None:
            watcher.stop()
        job.kill_everything()


_last_sink_read = [0.0]


def _sink_has_output(bootstrap: str, topic: str) -> bool:
    """At most one read of the sink per second (the generator asks in a loop)."""
    if time.monotonic() - _last_sink_read[0] < 1.0:
        return False
    _last_sink_read[0] = time.monotonic()
    return len(read_sink(bootstrap, topic)) > 0


def _stamp(line: str) -> float:
    """The wall time of a log line (``2026-11-30 15:01:12,561 ...``), 0 if none."""
    try:
        return time.mktime(time.strptime(line[:19], "%Y-%m-%d %H:%M:%S")) + float(
            "0." + line[20:23]
        )
    except ValueError:
        return 0.0
