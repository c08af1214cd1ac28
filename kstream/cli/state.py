"""`kstream state dump`: a stateful operator's keyed state, read straight from the store;
`kstream state rescale`: a savepoint's state redistributed to new partition counts
(:mod:`kstream.rescale`), written as a new savepoint.

Read-only and offline: no job needs to run. The chosen checkpoint (the latest
completed one by default) or savepoint names each task's snapshot; every task of
the operator's stage is restored into a temporary directory (nothing is written
to the store) and the operator's tables (``<operator id>.*``,
:mod:`kstream.plan.operators`) are printed as JSON lines
``{"task", "table", "key", "value"}``, in key order per task and table.
"""

from __future__ import annotations

import base64
import json
import sys
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

import click

from kstream.checkpointstorage.base import CheckpointStore
from kstream.checkpointstorage.metadata import (
    CheckpointMetadata,
    MetadataError,
    latest_completed,
    read_metadata,
)
from kstream.checkpointstorage.objectstore import parse_store_options
from kstream.checkpointstorage.savepoints import read_savepoint
from kstream.checkpointstorage.urls import open_store
from kstream.cli.common import (
    app_argument,
    app_id_of,
    app_id_option,
    bootstrap_option,
    resolve_bootstrap,
    store_options,
)
from kstream.config import ConfigError, parse_instant
from kstream.kafka.timeoffsets import at_time
from kstream.query.operators import SOURCE_PARTITIONERS
from kstream.query.read import Tables
from kstream.rescale.layout import RescaleError
from kstream.rescale.savepoint import rescale_savepoint
from kstream.snapshots.restore import restore_backend
from kstream.state.base import TableSpec


def _json(value: Any) -> Any:
    """A key component or value as JSON (bytes as ``{"base64": ...}``)."""
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode()}
    if isinstance(value, tuple | list):
        return [_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json(v) for k, v in value.items()}
    return value


def _matches(key: tuple[Any, ...], wanted: str) -> bool:
    """Whether a state key has ``wanted`` as a component (the record key, as text)."""
    for part in key:
        if isinstance(part, bytes):
            part = part.decode(errors="replace")
        if str(part) == wanted:
            return True
    return False


def _choose(
    store: CheckpointStore, app_id: str, checkpoint: int | None, savepoint: str | None
) -> tuple[str, CheckpointMetadata]:
    if savepoint is not None:
        return f"savepoint {savepoint}", read_savepoint(store, savepoint)
    if checkpoint is not None:
        return f"checkpoint {checkpoint}", read_metadata(store, app_id, checkpoint)
    meta = latest_completed(store, app_id)
    if meta is None:
        raise MetadataError(f"{app_id!r} has no completed checkpoint in {store.url}")
    return f"checkpoint {meta.checkpoint_id}", meta


def dump_state(
    store: CheckpointStore,
    meta: CheckpointMetadata,
    operator: str,
    key: str | None,
    workdir: Path,
) -> list[dict[str, Any]]:
    """The rows of ``operator``'s state in ``meta`` (module doc); ValueError naming the known
    operators if there is no such operator."""
    known = (meta.description or {}).get("operators") or {}
    if operator not in known:
        raise ValueError(
            f"no stateful operator {operator!r} in this checkpoint (operators: "
            f"{', '.join(sorted(known)) or 'none recorded'})"
        )
    stage = known[operator].get("stage", "")
    rows: list[dict[str, Any]] = []
    prefix = f"{operator}."
    for task_id, snap in sorted(meta.tasks.items()):
        if not snap.handle or not task_id.startswith(f"{stage}-"):
            continue
        backend, _manifest = restore_backend(store, snap.handle, workdir / task_id)
        try:
            names = [n for n in backend.stored_tables() if n.startswith(prefix)]
            # Avro-typed state is decoded (kstream.query.read.Tables), the rest as stored.
            tables = Tables.of(operator, {n: partial(backend.table, TableSpec(n)) for n in names})
            for suffix in tables.names():
                table = tables(suffix)
                assert table is not None
                for k, v in table.scan():
                    if key is None or _matches(k, key):
                        rows.append(
                            {"task": task_id, "table": suffix, "key": _json(k), "value": _json(v)}
                        )
        finally:
            backend.close()
    return rows


@click.group()
def state() -> None:
    """Inspect a job's state in the checkpoint store (read-only, no job running)."""


@state.command("dump")
@app_argument
@app_id_option()
@store_options
@click.option("--checkpoint", type=int, default=None, help="Checkpoint id (default: the latest).")
@click.option("--savepoint", default=None, metavar="PATH", help="A savepoint instead.")
@click.option("--operator", required=True, help="The stateful operator's id (its name=...).")
@click.option("--key", default=None, help="Only entries of this record key.")
def dump(
    app: str | None,
    app_id: str | None,
    store_url: str,
    store_options: tuple[str, ...],
    checkpoint: int | None,
    savepoint: str | None,
    operator: str,
    key: str | None,
) -> None:
    """JSON lines of OPERATOR's keyed state: {"task", "table", "key", "value"}."""
    app_id = app_id_of(app_id, app)
    store = open_store(store_url, parse_store_options(store_options))
    try:
        label, meta = _choose(store, app_id, checkpoint, savepoint)
        with tempfile.TemporaryDirectory(prefix="kstream-dump-") as tmp:
            rows = dump_state(store, meta, operator, key, Path(tmp))
    except (MetadataError, ValueError) as e:
        click.echo(f"kstream: {e}", err=True)
        sys.exit(2)
    for row in rows:
        click.echo(json.dumps(row, sort_keys=True))
    click.echo(f"{len(rows)} entries of {operator} in {label}", err=True)


def _partitions(values: tuple[str, ...]) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        stage, _, n = v.partition("=")
        if not stage or not n.isdigit():
            raise click.BadParameter(f"{v!r}: give STAGE=N (e.g. stage1=16)")
        out[stage] = int(n)
    return out


@state.command("rescale")
@click.argument("source", metavar="SRC_SAVEPOINT")
@click.argument("destination", metavar="DST")
@store_options
@click.option(
    "--partitions",
    "partitions",
    multiple=True,
    required=True,
    metavar="STAGE=N",
    help="A stage's new partition count (repeatable).",
)
@click.option(
    "--source-partitioner",
    type=click.Choice(SOURCE_PARTITIONERS),
    default="murmur2",
    show_default=True,
    help="How the producers of the source topics spread keys.",
)
@click.option(
    "--new-partitions-from",
    default=None,
    metavar="TIME",
    help="Partitions a source topic gained start at the first record at or after TIME "
    "(epoch ms or ISO 8601, UTC by default; the records' Kafka timestamps; asked of the "
    "brokers: grow the topic first) instead of the beginning.",
)
@bootstrap_option(" (with --new-partitions-from)")
def rescale(
    source: str,
    destination: str,
    store_url: str,
    store_options: tuple[str, ...],
    partitions: tuple[str, ...],
    source_partitioner: str,
    new_partitions_from: str | None,
    bootstrap: str | None,
) -> None:
    """Write savepoint DST: SRC_SAVEPOINT's keyed state redistributed to new partition
    counts (DST: <app>/savepoints/<name>, or a name in SRC's app)."""
    store = open_store(store_url, parse_store_options(store_options))
    wanted = _partitions(partitions)
    new_positions = None
    if new_partitions_from is not None:
        try:
            at = parse_instant(new_partitions_from)
        except ConfigError as e:
            raise click.BadParameter(str(e), param_hint="--new-partitions-from") from None
        new_positions = at_time(resolve_bootstrap(bootstrap), None, at)
    try:
        with tempfile.TemporaryDirectory(prefix="kstream-rescale-") as tmp:
            path, meta = rescale_savepoint(
                store,
                source,
                destination,
                wanted,
                workdir=Path(tmp),
                source_partitioner=source_partitioner,
                new_positions=new_positions,
            )
    except (MetadataError, RescaleError) as e:
        click.echo(f"kstream: {e}", err=True)
        sys.exit(2)
    stages = (meta.description or {}).get("stages") or {}
    click.echo(path)
    click.echo(
        "rescaled "
        + ", ".join(f"{s} to {n} tasks" for s, n in sorted(wanted.items()))
        + f" (stages now: {', '.join(f'{s}={n}' for s, n in sorted(stages.items()))})",
        err=True,
    )
