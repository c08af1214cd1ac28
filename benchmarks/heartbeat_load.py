"""What the workers' group heartbeat costs the broker (issue 42's 300 ms at issue 41's scale).

A worker heartbeats its consumer group every 300 ms (``REBALANCE_HEARTBEAT_MS`` in
``kstream/worker/loop.py``), so that hand-overs see a change of the group sooner; it was
every second. With 1 000 workers that is about 3 300 requests a second to the group's
coordinator broker instead of 1 000. This measures what a heartbeat costs that broker:
``--members`` idle members of one consumer group (plain confluent-kafka consumers with
the worker's group settings: classic protocol, range assignor, session 10 s) in
``--processes`` processes subscribe to one topic; once every member was assigned and the
group stayed stable for a while, the broker process's CPU time (``/proc/<pid>/stat``) is
read over ``--window`` seconds. Heartbeat intervals alternate round by round, and a
round with no group gives the broker's idle CPU:

    python -m benchmarks.heartbeat_load [--members 200] [--processes 4] [--rounds 2]

A first round warms the broker's JIT up and is not counted. It prints, per interval, the
broker's CPU (% of one core; median and range of the rounds) and how much of it is
above idle, then what the faster heartbeat adds, paired round by round: per 1 000 more
heartbeats a second, and extrapolated to 1 000 workers (a group's members are idle
here: a worker's fetches and commits come on top, at either interval).
"""

from __future__ import annotations

import os
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import click

from kstream.dev.localbroker import LocalBroker
from kstream.kafka.clients import TopicSpec, ensure_topics, make_admin

INTERVALS_MS = (300, 1000)
STABLE_S = 5.0  # no assignment anywhere for this long: the group is stable
TICK = os.sysconf("SC_CLK_TCK")


def broker_cpu_s(pid: int) -> float:
    """User and system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def member_main(bootstrap: str, group: str, topic: str, count: int, heartbeat_ms: int) -> None:
    """``count`` members of ``group`` in this process: print "assigned" at each member's
    assignment (the first, and any later rebalance), poll until stdin closes."""
    from confluent_kafka import Consumer

    consumers = []
    for _ in range(count):
        c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "session.timeout.ms": 10_000,
                "heartbeat.interval.ms": heartbeat_ms,
                "partition.assignment.strategy": "range",
                "enable.auto.commit": False,
                "log_level": 3,
            }
        )
        c.subscribe([topic], on_assign=lambda _c, _p: print("assigned", flush=True))
        consumers.append(c)
    while not select.select([sys.stdin], [], [], 0)[0]:
        for c in consumers:
            c.poll(0)
        time.sleep(0.2)
    for c in consumers:
        c.close()


def measure(
    broker: LocalBroker, members: int, processes: int, heartbeat_ms: int | None, window: float
) -> tuple[float, int]:
    """Broker CPU % of one core over ``window`` s with ``members`` heartbeating every
    ``heartbeat_ms`` (None: no group); how many assignments the members reported in the
    window (a rebalance gives one per member: 0 when the group stayed stable)."""
    procs: list[subprocess.Popen[bytes]] = []
    if heartbeat_ms is not None:
        group, topic = f"hb-{uuid.uuid4().hex[:8]}", "hb.topic"
        for i in range(processes):
            n = members // processes + (1 if i < members % processes else 0)
            args = [sys.executable, "-m", "benchmarks.heartbeat_load", "--member",
                    f"{broker.bootstrap},{group},{topic},{n},{heartbeat_ms}"]  # fmt: skip
            procs.append(
                subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
            )
    outs = [p.stdout.fileno() for p in procs if p.stdout is not None]
    try:
        seen = 0
        last = time.monotonic()
        deadline = last + 300
        while procs and (seen < members or time.monotonic() - last < STABLE_S):
            if time.monotonic() > deadline:
                raise SystemExit(f"the group of {members} did not settle within 300 s")
            got = _assignments(outs)
            if got:
                seen, last = seen + got, time.monotonic()
        before = broker_cpu_s(broker.pid or 0)
        t0 = time.monotonic()
        assignments = 0
        while time.monotonic() - t0 < window:
            if not outs:
                time.sleep(0.5)  # (no group: the broker idle)
                continue
            assignments += _assignments(outs)
        cpu = broker_cpu_s(broker.pid or 0) - before
        return 100 * cpu / (time.monotonic() - t0), assignments
    finally:
        for p in procs:
            assert p.stdin is not None
            p.stdin.close()
        for p in procs:
            p.wait(timeout=60)


def _assignments(fds: list[int]) -> int:
    """How many assignments the member processes reported within 0.5 s."""
    got = 0
    for fd in select.select(fds, [], [], 0.5)[0]:
        data = os.read(fd, 65536)
        if not data:
            raise SystemExit("a member process exited")
        got += data.count(b"assigned")
    return got


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def _rounds(
    root: Path, members: int, processes: int, rounds: int, window: float
) -> dict[int | None, list[float]]:
    """Broker CPU % per round, by heartbeat interval (None: no group), interleaved."""
    with LocalBroker(root / "kafka") as broker:
        ensure_topics(make_admin(broker.bootstrap), [TopicSpec("hb.topic", 8)])
        cpu: dict[int | None, list[float]] = {None: [], **{ms: [] for ms in INTERVALS_MS}}
        for r in range(-1, rounds):  # round 0: the broker's JIT warms up, not counted
            for ms in (None, *INTERVALS_MS):
                pct, assignments = measure(broker, members, processes, ms, window)
                if r >= 0:
                    cpu[ms].append(pct)
                name = "no group" if ms is None else f"{ms} ms"
                click.echo(f"round {r + 1}{' (warm-up)' if r < 0 else ''}, {name}: broker {pct:.2f} % of a core"
                           f"{f', {assignments} assignments in the window' if assignments else ''}")  # fmt: skip
    return cpu


@click.command()
@click.option("--members", default=200, show_default=True)
@click.option("--processes", default=4, show_default=True)
@click.option("--rounds", default=2, show_default=True)
@click.option("--window", default=20.0, show_default=True, help="Seconds measured per round.")
@click.option("--member", default=None, hidden=True)
def main(members: int, processes: int, rounds: int, window: float, member: str | None) -> None:
    if member is not None:
        bootstrap, group, topic, count, hb = member.split(",")
        member_main(bootstrap, group, topic, int(count), int(hb))
        return
    root = Path(tempfile.mkdtemp(prefix="kstream-heartbeat-load-"))
    try:
        cpu = _rounds(root, members, processes, rounds, window)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    idle = statistics.median(cpu[None])
    click.echo(f"\n{members} members in {processes} processes, {rounds} rounds of {window:g} s:")
    click.echo(f"  no group: broker {spread(cpu[None])} % of a core")
    for ms in INTERVALS_MS:
        rate = members * 1000 / ms
        above = statistics.median(cpu[ms]) - idle
        click.echo(
            f"  heartbeat {ms} ms ({rate:.0f}/s): broker {spread(cpu[ms])} %, {above:.2f} above idle"
        )
    fast, slow = INTERVALS_MS
    extra = statistics.median(a - b for a, b in zip(cpu[fast], cpu[slow], strict=True))
    per_k = extra / (members * 1000 / fast - members * 1000 / slow) * 1000
    at_scale = per_k * (1000 * 1000 / fast - 1000 * 1000 / slow) / 1000
    click.echo(
        f"  {fast} ms against {slow} ms, paired by round: {extra:.2f} % of a core more, "
        f"{per_k:.2f} % per 1 000 more heartbeats/s; 1 000 workers: {at_scale:.1f} % more"
    )


if __name__ == "__main__":
    main()
