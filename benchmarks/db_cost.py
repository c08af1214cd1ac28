"""RSS of one idle task's RocksDB by what it holds (issue 41 item 6), in-process.

Each row opens N DBs (``RocksDBBackend``, one worker's shared resources) in a fresh
process, each with the row's tables, and reports the RSS they added per DB and the
memtable memory they charged to the worker's budget per DB. A data table (an
operator's) comes with its memtable's Bloom filter; the task's own tables
(``task.*``) have none and a column family only once written.

    python -m benchmarks.db_cost [--dbs 64]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import click

#: (row, tables opened, tables written): the benchmark job's tasks
#: (benchmarks/procs_per_task.py) and their parts.
ROWS: list[tuple[str, list[str], list[str]]] = [
    ("no table", [], []),
    (
        "task.firing, task.watermarks opened, not written (every task)",
        ["task.firing", "task.watermarks"],
        [],
    ),
    ("task.firing written", ["task.firing"], ["task.firing"]),
    ("one data table written", ["op.acc"], ["op.acc"]),
    (
        "a window task's: those two, and op.acc and op.meta written",
        ["task.firing", "task.watermarks", "op.acc", "op.meta"],
        ["op.acc", "op.meta"],
    ),
]

_CHILD = """
import json, sys, tempfile
from pathlib import Path
from kstream.state.base import TableSpec
from kstream.state.rocksdb import RocksDBBackend
from kstream.state.rocksdb_resources import StateResources

def rss_kb():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])

n, opened, written = json.loads(sys.argv[1])
resources = StateResources()
root = Path(tempfile.mkdtemp())
def fill(db):
    for name in opened:
        table = db.table(TableSpec(name))
        if name in written:
            for i in range(20):
                table.put(("k", i), i)
    db.flush()
fill(RocksDBBackend(root / "warm", resources=resources))  # libraries, first allocations
rss, charged = rss_kb(), resources.write_buffers.get_usage()
dbs = [RocksDBBackend(root / str(i), resources=resources) for i in range(n)]
for db in dbs:
    fill(db)
print(json.dumps([(rss_kb() - rss) / n, (resources.write_buffers.get_usage() - charged) / n / 1024,
                  sorted(dbs[0].stored_tables())]))
"""


def measure(n: int, opened: list[str], written: list[str]) -> tuple[float, float, list[str]]:
    """(RSS KB per DB, memtable KB charged per DB, column families of a DB)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, json.dumps([n, opened, written])],
            check=True,
            capture_output=True,
            text=True,
            cwd=Path(__file__).resolve().parent.parent,
            env={**os.environ, "TMPDIR": tmp},
        ).stdout
    rss, charged, cfs = json.loads(out)
    return rss, charged, cfs


@click.command()
@click.option("--dbs", type=int, default=64, show_default=True, help="DBs per row.")
def main(dbs: int) -> None:
    """RSS per idle task's DB by the tables it holds."""
    click.echo("| DB holds | RSS KB per DB | memtables charged KB per DB | column families |")
    click.echo("|---|---|---|---|")
    for name, opened, written in ROWS:
        rss, charged, cfs = measure(dbs, opened, written)
        click.echo(f"| {name} | {rss:.0f} | {charged:.0f} | {', '.join(cfs) or '-'} |")


if __name__ == "__main__":
    main()
