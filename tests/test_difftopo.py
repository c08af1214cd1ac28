"""Generated topologies (``tests/difftopo``) against the harness's own invariants.

Sources keyed or not with 1-4 partitions, map/filter/flat_map/peek, key_bys, fan-out
of any stream (also after a key_by, a window, a join, a table), windows of every kind,
rolling counts, inner/left/outer windowed joins, table joins, a process function with
state and event-time timers, several sinks; inputs in event-time order with a few
records that are not JSON. For each:

- ``run_topology`` raises nothing, dead-letters exactly the bad records and drops
  nothing as late (no input record is late);
- its output (per sink, the multiset of ``(key, value)``) is the same with every
  source topic on one partition, and when every task runs at once, fed random
  chunks of its inputs in a random order (the batching and interleaving a worker
  on a broker may see);
- independent topologies batched into one (as the broker test runs them) give each
  the output it gives alone.

CI runs ``KSTREAM_DIFFTEST_EXAMPLES`` (default 300) examples derandomized, so a
failure reproduces; ``make difftest`` runs many more with random seeds. A failure
prints the shrunk topology as DSL code with its inputs.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, assume, given, note, settings

from kstream.testing import run_topology
from tests.difftopo.compare import (
    canonical,
    describe,
    partition_counts,
    plan_problem,
    run_harness,
    run_interleaved,
    topic_inputs,
    topology_of,
)
from tests.difftopo.generate import Inputs, bad_count, from_seed, graphs_and_inputs
from tests.difftopo.grammar import Graph

EXAMPLES = int(os.environ.get("KSTREAM_DIFFTEST_EXAMPLES", "300"))
DERANDOMIZE = os.environ.get("KSTREAM_DIFFTEST_RANDOM", "") == ""


@settings(
    max_examples=EXAMPLES,
    derandomize=DERANDOMIZE,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    print_blob=True,
)
@given(graphs_and_inputs())
def test_generated_topologies_keep_the_harness_invariants(case: tuple[Graph, Inputs]) -> None:
    g, ins = case
    assume(plan_problem(g) is None)
    note(describe(g, ins))
    run = run_harness(g, ins)
    assert len(run.dead_letters) == bad_count(ins)
    assert run.metrics.get("late_dropped", 0) == 0
    assert run.metrics.get("late_side_output", 0) == 0
    expected = canonical(run.outputs)
    assert set(expected) == set(g.sink_topics(""))
    if plan_problem(g, all_one=True) is None:
        assert canonical(run_harness(g, ins, all_one=True).outputs) == expected
    for seed in (1, 2):
        interleaved, dead = run_interleaved(g, ins, seed)
        assert interleaved == expected, f"interleaving seed {seed}"
        assert len(dead) == bad_count(ins)


def test_topologies_batched_into_one_job_give_each_its_own_output() -> None:
    cases: list[tuple[str, Graph, Inputs]] = []
    seed = 0
    while len(cases) < 12:
        g, ins = from_seed(seed)
        if plan_problem(g) is None:
            cases.append((f"g{len(cases)}_", g, ins))
        seed += 1
    topology = topology_of([(prefix, g) for prefix, g, _ in cases])
    inputs, counts = {}, {}
    for prefix, g, ins in cases:
        inputs.update(topic_inputs(g, ins, prefix))
        counts.update(partition_counts(g, prefix))
    together = canonical(run_topology(topology, inputs, partitions=counts).outputs)
    for prefix, g, ins in cases:
        alone = canonical(run_harness(g, ins, prefix).outputs)
        assert {t: together[t] for t in alone} == alone, describe(g, ins, prefix)


def test_a_graph_prints_as_dsl_code_and_survives_json() -> None:
    g, ins = from_seed(7)
    assert Graph.from_json(g.to_json()) == g
    text = describe(g, ins)
    assert text.startswith('topology = Topology("difftest")\ns0 = topology.source("src0"')
    assert "# inputs (key, value, ts, partition):" in text


def test_the_ci_seeds_cover_every_operator_kind() -> None:
    kinds = set()
    for seed in range(1000, 1040):
        g, _ = from_seed(seed)
        if plan_problem(g) is None:
            kinds |= {op.kind for op in g.ops}
            kinds |= {op.arg.split(":")[0] for op in g.ops if op.kind in ("window", "join")}
    assert kinds >= {"map", "filter", "flat_map", "peek", "key_by", "rolling", "process",
                     "join", "join_table", "sink", "tumbling", "hopping", "sliding", "session",
                     "inner", "left", "outer"}  # fmt: skip
