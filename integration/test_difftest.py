"""Differential test on a real broker: generated topologies (``tests/difftopo``) run by
real workers (`kstream run --bounded`) write, per sink, exactly the multiset of
``(key, value)`` that ``kstream.testing.run_topology`` computes for them.

To keep it to one job, ``GRAPHS`` topologies from fixed seeds run as independent
sub-graphs of ONE topology (disjoint topics ``<prefix>g<i>_...``). Tables are loaded
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
from collections.abc import Callable
from pathlib import Path

from integration.cli_job import CLI
from integration.e2e.harness import REPO
from integration.edge_tools import read_all
from kstream.kafka.clients import TopicSpec, ensure_topics, make_admin, make_producer
from kstream.names import dlq_topic
from kstream.testing import Raw
from tests.difftopo.compare import canonical, describe, plan_problem, run_harness
from tests.difftopo.generate import Inputs, bad_count, from_seed
from tests.difftopo.grammar import Graph

GRAPHS = int(os.environ.get("KSTREAM_DIFFTEST_GRAPHS", "30"))
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


def _produce(bootstrap: str, topic: str, records: list[tuple[object, object, int, int]]) -> None:
    p = make_producer(bootstrap)
    for key, value, ts, part in records:
        data = value.data if isinstance(value, Raw) else json.dumps(value).encode()
        k = None if key is None else str(key).encode()
        p.produce(topic, data, k, partition=part, timestamp=ts)
    assert p.flush(30) == 0


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
    base = unique_name("dt").replace("-", "_")
    cases = [(f"{base}g{i}_", seed, g, ins)
             for i, (seed, g, ins) in enumerate(_cases(GRAPHS, FIRST_SEED))]  # fmt: skip
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
    ensure_topics(make_admin(kafka_bootstrap), topics)
    app = unique_name("app")

    for table_phase in (True, False):
        for prefix, _, g, ins in cases:
            for i, s in enumerate(g.sources):
                if s.table == table_phase and ins[i]:
                    _produce(kafka_bootstrap, g.source_topic(prefix, i), ins[i])
        _run_bounded(topology, kafka_bootstrap, app, tmp_path)

    failures = []
    for prefix, seed, g, ins in cases:
        expected = canonical(run_harness(g, ins, prefix).outputs)
        written = canonical({
            t: [(None if r.key is None else r.key.decode(),
                 None if r.value is None else json.loads(r.value), 0)
                for r in read_all(kafka_bootstrap, t)]
            for t in g.sink_topics(prefix)
        })  # fmt: skip
        if written != expected:
            diff = {t: {"harness": expected[t], "workers": written[t]}
                    for t in expected if expected[t] != written[t]}  # fmt: skip
            failures.append(f"seed {seed}:\n{describe(g, ins, prefix)}\n# differs: {diff}")
    assert not failures, "\n\n".join(failures)
    dead = read_all(kafka_bootstrap, dlq_topic(app))
    assert len(dead) == sum(bad_count(ins) for *_, ins in cases)
