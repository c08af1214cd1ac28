"""db_cost measures DBs in a child process: the column families it reports are exact."""

from __future__ import annotations

from benchmarks.db_cost import measure


def test_a_db_s_column_families_by_what_it_holds() -> None:
    rss, charged, cfs = measure(2, ["task.firing", "op.acc"], ["op.acc"])
    assert cfs == ["op.acc"]  # the task table was never written
    assert rss > 0 and charged > 160  # op.acc's memtable filter: ~166 KB
