"""How a consumer group's assignor moves partitions when members leave, join or die
(issue 42: which assignment lets the tasks that stay run on during a change).

Four member processes subscribe to two topics of 8 partitions each (a job's input and
its repartition topic: a task needs partition p of both). Then: one member closes
(SIGTERM, a graceful leave), a new one joins, one is killed (kill -9). After each step,
once the assignment is stable for a second: which partitions each member holds, whether
every member holds the same partition numbers of both topics (co-partitioned), how many
of its partitions each survivor kept, which partitions were revoked from members that
stayed, and when the last change of the step came. Without kstream: plain
confluent-kafka consumers on a local broker.

    python -m benchmarks.assignor_probe --protocol classic --assignor range
    python -m benchmarks.assignor_probe --protocol consumer --assignor range
    python -m benchmarks.assignor_probe --protocol consumer --assignor uniform --topics 1

``--protocol consumer`` is KIP-848's (the broker assigns; ``--assignor`` is then
``group.remote.assignor``), with the broker's heartbeat interval at 500 ms and session
timeout at 10 s (its defaults, 5 s and 45 s, would make every step slower); ``classic``
is the protocol kstream's workers use today (``partition.assignment.strategy``,
session 10 s, heartbeat 1 s). Results: benchmarks/ELASTIC.md.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import click

TOPICS = ("probe.A", "probe.B")
PARTITIONS = 8
#: The broker's KIP-848 settings for the probe (see the module).
CONSUMER_PROTOCOL_BROKER = {
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "500",
    "group.consumer.min.session.timeout.ms": "6000",
    "group.consumer.session.timeout.ms": "10000",
}


def holdings(events: Iterable[dict[str, Any]]) -> dict[str, set[str]]:
    """Member -> partitions it holds (``A3``: topic A's partition 3), from its assign,
    revoke and close events in order (incremental: each names what changed)."""
    held: dict[str, set[str]] = {}
    for e in events:
        mine = held.setdefault(e["m"], set())
        if e["ev"] == "assign":
            mine.update(e["p"])
        elif e["ev"] == "revoke":
            mine.difference_update(e["p"])
        elif e["ev"] == "closed":
            held.pop(e["m"])
    return held


def describe(held: dict[str, set[str]], before: dict[str, set[str]] | None) -> list[str]:
    """One line per member: its partitions of each topic, whether they are the same
    numbers (co-partitioned), and how many of those it held before it kept."""
    lines = []
    for member in sorted(held):
        parts = held[member]
        by_topic = [sorted(int(p[1:]) for p in parts if p[0] == t) for t in "AB"]
        co = "" if not by_topic[1] else f", co-partitioned {by_topic[0] == by_topic[1]}"
        kept = ""
        if before is not None and member in before:
            kept = f", kept {len(before[member] & parts)}/{len(before[member])}"
        lines.append(f"  {member}: A {by_topic[0]} B {by_topic[1]}{co}{kept}")
    return lines


def _member(
    bootstrap: str, group: str, name: str, protocol: str, assignor: str, topics: str
) -> None:
    """One group member: prints its assign/revoke events as JSON lines until SIGTERM."""
    from confluent_kafka import Consumer

    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "client.id": name,
        "enable.auto.commit": False,
    }
    if protocol == "consumer":
        conf |= {"group.protocol": "consumer", "group.remote.assignor": assignor}
    else:
        conf |= {
            "partition.assignment.strategy": assignor,
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 1000,
        }
    consumer = Consumer(conf)

    def say(ev: str, parts: list[Any]) -> None:
        names = sorted(p.topic[-1] + str(p.partition) for p in parts)
        print(json.dumps({"t": time.time(), "m": name, "ev": ev, "p": names}), flush=True)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    consumer.subscribe(
        topics.split(","),
        on_assign=lambda _c, p: say("assign", p),
        on_revoke=lambda _c, p: say("revoke", p),
        on_lost=lambda _c, p: say("revoke", p),
    )
    while not stop.is_set():
        consumer.poll(0.1)
    consumer.close()
    say("closed", [])


class _Group:
    """The member processes and what they reported."""

    def __init__(self, bootstrap: str, protocol: str, assignor: str, topics: list[str]):
        self.args = [bootstrap, f"probe-{time.time_ns()}", protocol, assignor, ",".join(topics)]
        self.total = PARTITIONS * len(topics)
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.procs: dict[str, subprocess.Popen[str]] = {}

    def start(self, name: str) -> None:
        b, g, proto, assignor, topics = self.args
        cmd = [sys.executable, "-m", "benchmarks.assignor_probe", "--member"]
        cmd += [b, g, name, proto, assignor, topics]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        self.procs[name] = p
        threading.Thread(target=self._read, args=(p,), daemon=True).start()

    def _read(self, p: subprocess.Popen[str]) -> None:
        assert p.stdout is not None
        for line in p.stdout:
            with self.lock:
                self.events.append(json.loads(line))

    def gone(self, name: str) -> None:
        """``name`` was killed: it holds nothing any more."""
        with self.lock:
            self.events.append({"t": time.time(), "m": name, "ev": "closed", "p": []})

    def settle(self, members: int, since: float, timeout: float = 90.0) -> tuple[Any, float]:
        """Wait until ``members`` members hold every partition, unchanged for 1 s (polled
        every 50 ms, with a deadline): the holdings, and when the last change came."""
        deadline = time.time() + timeout
        stable: tuple[str, float] | None = None
        while time.time() < deadline:
            with self.lock:
                held, n = holdings(self.events), len(self.events)
                last = max((e["t"] for e in self.events if e["ev"] != "closed"), default=since)
            whole = len(held) == members and sum(map(len, held.values())) == self.total
            key = json.dumps({m: sorted(p) for m, p in held.items()}) + str(n)
            if whole and stable is not None and stable[0] == key and time.time() - stable[1] >= 1:
                return held, last - since
            if stable is None or stable[0] != key:
                stable = (key, time.time())
            time.sleep(0.05)
        raise click.ClickException(f"no stable assignment within {timeout:.0f} s: {held}")

    def revoked_from(self, stayers: set[str], since: float) -> list[str]:
        with self.lock:
            return [
                f"{e['m']}: {','.join(e['p'])}"
                for e in self.events
                if e["ev"] == "revoke" and e["t"] >= since and e["m"] in stayers
            ]

    def stop_all(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            p.wait(30)


@click.command()
@click.option("--protocol", type=click.Choice(["classic", "consumer"]), default="consumer")
@click.option("--assignor", default="range", help="range | uniform (consumer); range | ...")
@click.option("--topics", type=click.IntRange(1, 2), default=2, help="Topics subscribed.")
def main(protocol: str, assignor: str, topics: int) -> None:
    """Partitions moved by a leave, a join and a kill -9 (see the module doc)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from kstream.dev.localbroker import LocalBroker

    overrides = CONSUMER_PROTOCOL_BROKER if protocol == "consumer" else {}
    with tempfile.TemporaryDirectory() as d, LocalBroker(Path(d) / "k", overrides=overrides) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        for f in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in TOPICS]).values():
            f.result()
        group = _Group(b.bootstrap, protocol, assignor, list(TOPICS[:topics]))
        try:
            _steps(group, click.echo)
        finally:
            group.stop_all()


def _steps(group: _Group, say: Callable[[str], None]) -> None:
    for i in range(4):
        group.start(f"m{i}")
    held, _ = group.settle(4, time.time())
    say("4 members:")
    for line in describe(held, None):
        say(line)
    steps: list[tuple[str, Callable[[], None], int]] = [
        ("m3 leaves (SIGTERM, close)", lambda: _term(group, "m3"), 3),
        ("m4 joins", lambda: group.start("m4"), 4),
        ("m1 killed (kill -9)", lambda: _kill(group, "m1"), 3),
    ]
    for name, act, members in steps:
        t0 = time.time()
        act()
        after, last = group.settle(members, t0)
        say(f"{name}: last change {last:.2f} s after it")
        for line in describe(after, held):
            say(line)
        stayers = set(after) & set(held)
        say(f"  revoked from members that stayed: {group.revoked_from(stayers, t0) or 'none'}")
        held = after


def _term(group: _Group, name: str) -> None:
    group.procs[name].send_signal(signal.SIGTERM)
    group.procs[name].wait(30)


def _kill(group: _Group, name: str) -> None:
    group.procs[name].kill()
    group.procs[name].wait(30)
    group.gone(name)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--member"]:  # a member process (_Group.start)
        _member(*sys.argv[2:8])
    else:
        main()
