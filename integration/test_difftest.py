"""Differential test on a real broker: generated topologies (``tests/difftopo``) run by
real workers (`kstream run --bounded`) write, per sink, exactly the multiset of
``(key, value)`` that ``kstream.testing.run_topology`` computes for them.

To keep it fast, ``GRAPHS`` topologies from fixed seeds run ``BATCH`` at a time as
independent sub-graphs of ONE topology (disjoint topics ``<prefix>g<i>_...``). Tables are loaded
by a first bounded run, the streams by a second that continues from its state (so
every table lookup sees the tables, as ``run_topology`` feeds tables first). Bad
records (not JSON) go to the dead-letter topic, and nothing else does.

A failure prints each disagreeing topology as DSL code with its inputs; reproduce it
with ``tests.difftopo.generate.from_seed(seed)``. ``KSTREAM_DIFFTEST_GRAPHS`` sets the
number of topologies (``make difftest`` runs more).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from integration.cli_job import CLI
from integration.e2e.harness import REPO
from integration.edge_tools import read_all
from kstream.kafka.clients import (
    TopicPartition,
    TopicSpec,
    ensure_topics,
    make_admin,
    make_consumer,
    make_producer,
    watermark_offsets,
)
from kstream.names import dlq_topic
from kstream.testing import Raw
from tests.difftopo.compare import canonical, describe, plan_problem, run_harness
from tests.difftopo.generate import Inputs, bad_count, from_seed
from tests.difftopo.grammar import Graph

GRAPHS = int(os.environ.get("KSTREAM_DIFFTEST_GRAPHS", "20"))
BATCH = int(os.environ.get("KSTREAM_DIFFTEST_BATCH", "20"))
FIRST_SEED = int(os.environ.get("KSTREAM_DIFFTEST_SEED", "1000"))


def _cases(count: int, first_seed: int) -> list[tuple[int, Graph, Inputs]]:
    """``count`` plannable generated topologies from consecutive seeds."""
    out: list[tuple[int, Graph, Inputs]] = []
    seed = first_seed
    while len(out) < count:
        g, ins = from_seed(seed)
        if plan_problem(g) is None:
            out.append((seed, g, ins))
        seed += 1
    return out


def _produce(bootstrap: str, batches: list[tuple[str, list[tuple[object, object, int, int]]]]
             ) -> None:  # fmt: skip
    p = make_producer(bootstrap)
    for topic, records in batches:
        for key, value, ts, part in records:
            data = value.data if isinstance(value, Raw) else json.dumps(value).encode()
            k = None if key is None else str(key).encode()
            p.produce(topic, data, k, partition=part, timestamp=ts)
    assert p.flush(30) == 0


def _read_committed(bootstrap: str, topics: list[str]) -> dict[str, list[tuple[object, object]]]:
    """Every committed ``(key, value)`` of ``topics`` (one consumer for all: per topic,
    ``read_all`` would open two)."""
    hw = make_consumer(bootstrap, f"difftest-hw-{uuid.uuid4().hex[:8]}", read_committed=False)
    try:
        md = hw.list_topics(timeout=30)
        tps = [(t, p) for t in topics for p in sorted(md.topics[t].partitions)]
        ends = {(t, p): watermark_offsets(hw, t, p, 30)[1] for t, p in tps}
    finally:
        hw.close()
    out: dict[str, list[tuple[object, object]]] = {t: [] for t in topics}
    c = make_consumer(bootstrap, f"difftest-{uuid.uuid4().hex[:8]}", read_committed=True)
    try:
        c.assign([TopicPartition(t, p, 0) for t, p in tps if ends[(t, p)] > 0])
        todo = {tp for tp in tps if ends[tp] > 0}
        deadline = time.monotonic() + 60
        while todo:
            assert time.monotonic() < deadline, f"not read to the end: {sorted(todo)[:5]}"
            for m in c.consume(500, 0.2):
                assert m.error() is None, m.error()
                key, value = m.key(), m.value()
                out[str(m.topic())].append((None if key is None else key.decode(),
                               None if value is None else json.loads(value)))  # fmt: skip
            for x in c.position([TopicPartition(t, p) for t, p in todo]):
                if x.offset >= ends[(x.topic, x.partition)]:
                    todo.discard((x.topic, x.partition))
    finally:
        c.close()
    return out


def _run_bounded(topology: Path, bootstrap: str, app: str, tmp: Path) -> None:
    done = subprocess.run(
        [*CLI, "run", str(topology), "--bootstrap", bootstrap, "--app-id", app, "--bounded",
         "--store", f"file://{tmp}/store", "--state-dir", str(tmp / "state")],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]


def test_generated_topologies_give_the_harness_results_on_real_workers(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    cases = _cases(GRAPHS, FIRST_SEED)
    failures: list[str] = []
    for b in range(0, len(cases), BATCH):
        t0 = time.monotonic()
        batch = cases[b : b + BATCH]
        failures += _run_batch(batch, kafka_bootstrap, unique_name, tmp_path / f"batch{b}")
        print(f"[difftest] seeds {batch[0][0]}..{batch[-1][0]}: {len(batch)} topologies "
              f"in {time.monotonic() - t0:.1f}s", flush=True)  # fmt: skip
    assert not failures, "\n\n".join(failures)


def _run_batch(
    batch: list[tuple[int, Graph, Inputs]],
    bootstrap: str,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> list[str]:
    """One job of independent sub-graphs; a description of each that disagrees."""
    tmp_path.mkdir()
    base = unique_name("dt").replace("-", "_")
    cases = [(f"{base}g{i}_", seed, g, ins) for i, (seed, g, ins) in enumerate(batch)]
    spec = tmp_path / "graphs.json"
    spec.write_text(json.dumps([[prefix, g.to_json()] for prefix, _, g, _ in cases]))
    topology = tmp_path / "difftest_topology.py"
    topology.write_text(
        "import json, pathlib\n"
        "from tests.difftopo.compare import topology_of\n"
        "from tests.difftopo.grammar import Graph\n"
        f"_SPEC = json.loads(pathlib.Path({str(spec)!r}).read_text())\n"
        "topology = topology_of([(p, Graph.from_json(g)) for p, g in _SPEC], 'difftest')\n"
    )
    topics = [TopicSpec(g.source_topic(prefix, i), s.partitions)
              for prefix, _, g, _ in cases for i, s in enumerate(g.sources)]  # fmt: skip
    topics += [TopicSpec(t, 2) for prefix, _, g, _ in cases for t in g.sink_topics(prefix)]
    ensure_topics(make_admin(bootstrap), topics)
    app = unique_name("app")

    for table_phase in (True, False):
        t0 = time.monotonic()
        _produce(bootstrap, [(g.source_topic(prefix, i), ins[i])
                             for prefix, _, g, ins in cases
                             for i, s in enumerate(g.sources) if s.table == table_phase])  # fmt: skip
        _run_bounded(topology, bootstrap, app, tmp_path)
        print(f"[difftest] {'tables' if table_phase else 'streams'}: produced and ran in "
              f"{time.monotonic() - t0:.1f}s", flush=True)  # fmt: skip

    sinks = _read_committed(bootstrap, [t for p, _, g, _ in cases for t in g.sink_topics(p)])
    failures = []
    for prefix, seed, g, ins in cases:
        expected = canonical(run_harness(g, ins, prefix).outputs)
        written = canonical({t: [(k, v, 0) for k, v in sinks[t]] for t in g.sink_topics(prefix)})
        if written != expected:
            diff = {t: {"harness": expected[t], "workers": written[t]}
                    for t in expected if expected[t] != written[t]}  # fmt: skip
            failures.append(f"seed {seed}:\n{describe(g, ins, prefix)}\n# differs: {diff}")
    bad = sum(bad_count(ins) for *_, ins in cases)
    dead = read_all(bootstrap, dlq_topic(app)) if bad else []
    if len(dead) != bad:
        failures.append(f"seeds {batch[0][0]}..{batch[-1][0]}: {len(dead)} dead letters, "
                        f"{bad} bad records")  # fmt: skip
    return failures
