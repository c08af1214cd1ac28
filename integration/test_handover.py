"""Hand-over checkpoints on a real broker (docs/design.md §6.6): workers that join a
running job or leave it on SIGTERM change the group at a checkpoint after which no task
did anything, so the restore that follows re-processes no record.

The job and the measurements are the elastic benchmark's (``benchmarks/elastic.py``):
``kstream worker`` processes electing their coordinator, a 2-stage keyed window job
with exactly-once output, checkpoints every 2 s, input produced live at 200 records/s;
each stage logs every record id it processes. Scale out 2 -> 4 (two workers started
together), then in 4 -> 2 (two SIGTERMs together): the output must be exact and no
record id processed twice by either stage, and the tasks that stay on their worker
carry on without a restore. Before hand-overs the same steps re-processed 100-400
records per stage (benchmarks/ELASTIC.md).
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.elastic import run_scenario


def test_scaling_out_and_in_re_processes_nothing_and_stays_exact(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    said: list[str] = []
    o = run_scenario("scale", kafka_bootstrap, tmp_path, 200, 120.0, say=said.append)
    assert o.exact.exact, o.exact
    assert o.exact.windows_checked > 1000  # (the check saw the run)
    assert (o.reprocessed_s1, o.reprocessed_s2) == (0, 0), said
    logs = "".join(p.read_text() for p in tmp_path.rglob("w*.err"))
    # Both joiners handed over (the second of the first two workers may have too, when
    # it started after the first had resumed the job), or joined during the restore
    # of another's hand-over, the Resume waiting for them.
    joins = logs.count("completed: joining the group") + logs.count(
        "joining during the restore of attempt"
    )
    assert logs.count("holds every task: a hand-over") >= 2, said
    assert logs.count("restart (attempt") >= 2 and "hand-over at checkpoint" in logs
    assert joins >= 2, said
    assert "of them carried on where they held" in logs  # the tasks that stayed
