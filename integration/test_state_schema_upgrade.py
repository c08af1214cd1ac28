"""An Avro-typed state's schema evolving across a savepoint, on a real broker: v1 of a
job keeps a per-user tally as Avro — a process function's ``ValueState(schema=V1)``,
or a window's accumulator (``window(...).aggregate(init, add, schema=V1)``) —,
`kstream savepoint --stop` takes its last checkpoint and stops it; v2 (a field added
with a default, an int promoted to long) starts from the savepoint and reads every
tally v1 wrote (exact output); v3 (a field added without a default) starting from the
same savepoint is refused before it starts (exit 2), naming the operator, the state
and the field."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from integration.cli_job import CLI
from integration.e2e.harness import REPO
from integration.edge_tools import read_all
from kstream.kafka.clients import TopicSpec, ensure_topics, make_admin, make_producer

PROCESS = """
from kstream.api import Topology, ValueState

SCHEMA = {schema!r}

def tally(key, user, ts, state, out):
    t = state["tally"].get() or {start!r}
    t["count"] += 1
    {bump}
    state["tally"].set(t)
    out({{"user": key, **t}})

topology = Topology("tallies")
(
    topology.source({src!r}, value_serde="str")
    .key_by(lambda user: user, key_serde="str")
    .process(tally, state={{"tally": ValueState(schema=SCHEMA)}}, name="tallies")
    .to({dst!r}, key_serde="str", value_serde="json")
)
"""
WINDOW = """
from kstream.api import Topology, Tumbling

SCHEMA = {schema!r}

def add(t, user):
    t = dict(t)
    t["count"] += 1
    {bump}
    return t

topology = Topology("tallies")
(
    topology.source({src!r}, value_serde="str")
    .key_by(lambda user: user, key_serde="str")
    .window(Tumbling(3_600_000), emit="update", name="tallies")
    .aggregate(lambda: {start!r}, add, schema=SCHEMA)
    .map(lambda r: {{"user": r.key, **r.value}})
    .to({dst!r}, key_serde="str", value_serde="json")
)
"""
TOPOLOGIES = {"process": (PROCESS, "tally"), "window": (WINDOW, "accumulator")}
BASE_TS = 1_700_000_000_000  # every record in one window of the hour
V1 = {"type": "record", "name": "Tally", "fields": [{"name": "count", "type": "int"}]}
V2 = {
    "type": "record",
    "name": "Tally",
    "fields": [
        {"name": "count", "type": "long"},
        {"name": "seen", "type": "int", "default": 0},
    ],
}
V3 = {
    "type": "record",
    "name": "Tally",
    "fields": [{"name": "count", "type": "long"}, {"name": "region", "type": "string"}],
}
USERS = ("ann", "bob", "cyd")


@pytest.mark.parametrize("kind", sorted(TOPOLOGIES))
def test_state_schema_evolves_across_a_savepoint(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path, kind: str
) -> None:
    template, state = TOPOLOGIES[kind]
    src, dst, app = unique_name("users"), unique_name("tallies"), unique_name("app")
    ensure_topics(make_admin(kafka_bootstrap), [TopicSpec(src, 1), TopicSpec(dst, 1)])
    versions: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
        "v1": (V1, {"count": 0}, ""),
        "v2": (V2, {"count": 0, "seen": 0}, 't["seen"] += 1'),
        "v3": (V3, {"count": 0, "region": "eu"}, ""),
    }
    for name, (schema, initial, bump) in versions.items():
        (tmp_path / f"{name}.py").write_text(
            template.format(schema=schema, start=initial, bump=bump, src=src, dst=dst)
        )
    store_url = f"file://{tmp_path}/store"
    common = ["--bootstrap", kafka_bootstrap, "--store", store_url, "--interval", "1"]

    def produce(n: int, offset: int) -> list[str]:
        p = make_producer(kafka_bootstrap)
        users = [USERS[(offset + i) % 3] for i in range(n)]
        for i, u in enumerate(users):
            p.produce(src, u.encode(), timestamp=BASE_TS + offset + i)
        assert p.flush(30) == 0
        return users

    def start(name: str, *extra: str) -> tuple[subprocess.Popen[bytes], Path]:
        log = tmp_path / f"{name}.log"
        proc = subprocess.Popen(
            [*CLI, "-v", "run", str(tmp_path / f"{name}.py"), *common, "--state-dir",
             str(tmp_path / name), "--app-id", app, *extra],
            stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=REPO,
        )  # fmt: skip
        return proc, log

    first = produce(8, 0)
    v1, log1 = start("v1")
    deadline = time.monotonic() + 120
    while len(read_all(kafka_bootstrap, dst)) < len(first):
        assert v1.poll() is None, log1.read_text()[-4000:]
        assert time.monotonic() < deadline, "v1 committed its output in 120 s"
        time.sleep(0.5)
    sp = subprocess.run(
        [*CLI, "savepoint", app, "--bootstrap", kafka_bootstrap, "--store", store_url,
         "--name", "v1", "--stop", "--timeout", "90"],
        capture_output=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert sp.returncode == 0, sp.stderr.decode()[-4000:]
    path = sp.stdout.decode().strip()
    assert v1.wait(timeout=60) == 0, log1.read_text()[-4000:]

    # v3 first: refused before it starts (the state cannot be read), nothing processed.
    v3, log3 = start("v3", "--from-savepoint", path)
    assert v3.wait(timeout=120) == 2, log3.read_text()[-4000:]
    text = log3.read_text()
    assert f"operator 'tallies', state {state!r}: the checkpoint holds values" in text, text[-4000:]
    assert "field 'region' (string) is new and has no default" in text
    assert len(read_all(kafka_bootstrap, dst)) == len(first)

    second = produce(7, 8)
    v2, log2 = start("v2", "--from-savepoint", path, "--stop-when-idle", "4")
    assert v2.wait(timeout=180) == 0, log2.read_text()[-4000:]

    rows: list[dict[str, Any]] = [
        json.loads(r.value) for r in read_all(kafka_bootstrap, dst) if r.value
    ]
    expected: list[dict[str, Any]] = []
    count: dict[str, int] = {}
    seen: dict[str, int] = {}
    for i, u in enumerate(first + second):
        count[u] = count.get(u, 0) + 1
        if i < len(first):
            expected.append({"user": u, "count": count[u]})
        else:
            seen[u] = seen.get(u, 0) + 1
            expected.append({"user": u, "count": count[u], "seen": seen[u]})
    assert rows == expected  # v2 continued every v1 tally (count), "seen" from its default
