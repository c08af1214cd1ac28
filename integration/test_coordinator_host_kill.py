"""kill -9 of the worker that hosts the elected coordinator, in a cooperative job without a
shuffle, on a real broker (docs/design.md §6.8).

Three ``kstream worker`` processes elect their coordinator among themselves and run a job
whose tasks exchange no records, with ``partition.assignment.strategy=cooperative-sticky``,
fed 150 records a second. The host is killed: its coordinator dies with its worker.

- A survivor finds the host's ``CoordinatorPulse`` silent and takes the coordinator over
  ("taking over", then "acting"), before the election group's session (6 s) would elect
  the next one. Every coordinator that starts after the kill is such a take-over: the
  one the group elects later, if another, defers to it ("hosts it still"), and a fenced
  one stands by instead of restarting. (That is one start; on a machine busy enough to
  starve a live host's pulses for 1.5 s, a false alarm adds a take-over.)
- That coordinator never heard the dead worker; it counts every owner as having pulsed at
  its start, so the dead one is carried a second later (``silent for``) and checkpoints
  complete without it — before, they waited until the workers' group gave its partitions
  away (``never heard by this coordinator``).
- The survivors adopt its tasks once the group does; no task restores, and the output is
  exact.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from integration.carryjob import PARTITIONS, RATE, TOPOLOGY, assert_exact
from integration.cli_job import CLI, CliJob
from integration.steadyfeed import SteadyFeed
from kstream.kafka.clients import TopicSpec, ensure_topics, make_admin

SESSION = 20  # the workers' group: the dead worker's partitions move only after it


def hosting(log: str) -> bool:
    """Whether a worker's log says it hosts the coordinator now."""
    ended = max(log.rfind("no longer elected"), log.rfind("our coordinator ended"))
    return log.rfind("; starting the coordinator") > ended


def test_a_killed_coordinator_hosts_tasks_are_carried_by_the_next_coordinator_at_once(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    src, dst, app = unique_name("in"), unique_name("out"), unique_name("app")
    ensure_topics(
        make_admin(kafka_bootstrap), [TopicSpec(src, PARTITIONS), TopicSpec(dst, PARTITIONS)]
    )
    seen = tmp_path / "seen"
    seen.mkdir()
    topology = tmp_path / "carry.py"
    topology.write_text(TOPOLOGY.format(seen=str(seen), src=src, dst=dst))
    args = [*CLI, "-v", "worker", str(topology), "--bootstrap", kafka_bootstrap,
            "--app-id", app, "--store", f"file://{tmp_path}/store", "--interval", "1",
            "-X", "partition.assignment.strategy=cooperative-sticky",
            "--coordinator", "auto", "--session-timeout", str(SESSION),
            "--heartbeat-timeout", str(SESSION)]  # fmt: skip
    workers = [
        CliJob([*args, "--state-dir", str(tmp_path / f"state-{i}")], tmp_path / f"w{i}.log")
        for i in range(3)
    ]
    checkpoints = tmp_path / "store" / app / "checkpoints"

    def latest() -> int:
        return max((int(p.stem.split("-")[1]) for p in checkpoints.glob("chk-*.json")), default=0)

    feed = SteadyFeed(kafka_bootstrap, src, lambda i: (i % PARTITIONS, f"r{i}"), RATE // 10)
    feeding = False
    try:
        for w in workers:
            w.wait_for(r"(resumed|the other tasks ran on): running \['", 120)
        feed.__enter__()
        feeding = True
        first = latest()
        workers[0].wait_until(lambda: latest() >= first + 3, "three more checkpoints", 60)
        hosts: list[CliJob] = []

        def one_host() -> bool:
            """Started it last, not stepped down nor fenced since: the one hosting it now
            (on a busy machine a false alarm at the start moves it once or twice more:
            the fenced one says so a moment later)."""
            hosts[:] = [w for w in workers if hosting(w.log())]
            return len(hosts) == 1

        workers[0].wait_until(one_host, "one coordinator host", 30)
        host = hosts[0]
        survivors = [w for w in workers if w is not host]
        restores = [w.log().count("restore: attempt") for w in survivors]
        marks = [len(w.log()) for w in survivors]
        host.kill()

        def started() -> list[CliJob]:
            return [w for w, m in zip(survivors, marks, strict=True)
                    if "; starting the coordinator" in w.log()[m:]]  # fmt: skip

        survivors[0].wait_until(lambda: bool(started()), "the next coordinator", 60)
        opener = started()[0]
        since_kill = opener.log()[marks[survivors.index(opener)] :]
        silent = since_kill.find("is silent; taking over")
        assert 0 <= silent < since_kill.find("coordinator election: acting ("), opener.tail()
        carry = r"worker \S+ silent for [\d.]+s: its tasks ([^\n]*) are carried at checkpoint"

        def carrier() -> tuple[CliJob, re.Match[str]] | None:
            for w, m in zip(survivors, marks, strict=True):
                found = re.search(carry, w.log()[m:])
                if found is not None:
                    return w, found
            return None

        # (the coordinator that carries it: the first take-over's, or on a machine busy
        # enough for two candidates to take over at once, the one that fenced it)
        survivors[0].wait_until(lambda: carrier() is not None, "the dead worker carried", 60)
        found = carrier()
        assert found is not None
        new, carried = found
        at = marks[survivors.index(new)]
        tasks = set(carried.group(1).split(", "))
        assert tasks, new.tail()
        assert "never heard by this coordinator" not in new.log()[at:], new.tail()
        # Checkpoints complete without the dead worker, long before its group session
        # ends (SESSION): then its tasks are adopted.
        done = latest()
        new.wait_until(lambda: latest() >= done + 2, "two checkpoints with it carried", 30)
        adopted: set[str] = set()

        def all_adopted() -> bool:  # (by whichever coordinator runs by then)
            for w, m in zip(survivors, marks, strict=True):
                log = w.log()[m:]
                for a in re.finditer(r"worker \S+ adopts ([^\n]*) from checkpoint", log):
                    adopted.update(a.group(1).split(", "))
            return adopted >= tasks

        new.wait_until(all_adopted, f"{sorted(tasks)} adopted", 60)
        feed.__exit__(None, None, None)
        feeding = False
        assert_exact(kafka_bootstrap, dst, feed.produced, new)
        logs = [w.log()[m:] for w, m in zip(survivors, marks, strict=True)]
        for log in logs:
            assert "failover (attempt" not in log and "restart (attempt" not in log, log[-3000:]
        starts = sum(log.count("; starting the coordinator") for log in logs)
        take_overs = sum(log.count("is silent; taking over") for log in logs)
        assert starts == take_overs, [w.tail() for w in survivors]
        assert [w.log().count("restore: attempt") for w in survivors] == restores
    finally:
        if feeding:
            feed.__exit__(None, None, None)
        for w in workers:
            w.kill()
