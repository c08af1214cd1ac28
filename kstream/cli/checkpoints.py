"""`kstream checkpoints list|show`: the checkpoint history in the store, like Flink's checkpoint tab.

Completed checkpoints come from their metadata (``<app>/checkpoints/``), failed and
aborted ones from the history the coordinator keeps (``<app>/history/``, see
:mod:`kstream.checkpointstorage.history`).
"""

from __future__ import annotations

import json
import sys

import click

from kstream.checkpointstorage.base import CheckpointStore
from kstream.checkpointstorage.history import CheckpointFailure, failure_of, list_failures
from kstream.checkpointstorage.metadata import (
    MetadataError,
    completed_ids,
    list_checkpoints,
    read_metadata,
)
from kstream.checkpointstorage.objectstore import parse_store_options
from kstream.checkpointstorage.urls import open_store
from kstream.cli.common import app_id_of, app_id_option, store_options
from kstream.monitor.history import (
    HistoryRow,
    history_rows,
    human_bytes,
    render_list,
    render_tasks,
    when,
)


@click.group()
def checkpoints() -> None:
    """Inspect the checkpoints of a job: completed, failed and aborted."""


_app = app_id_option()


@checkpoints.command("list")
@_app
@store_options
@click.option("--json", "as_json", is_flag=True, help="One JSON object per checkpoint.")
@click.option("--completed-only", is_flag=True, help="Leave out failed and aborted checkpoints.")
def list_(
    app_id: str | None,
    store_url: str,
    store_options: tuple[str, ...],
    as_json: bool,
    completed_only: bool,
) -> None:
    """One line per checkpoint: status, time, duration, sizes, alignment, slowest task or reason.

    Failed checkpoints count towards --tolerable-failures (timeouts, declines); aborted
    ones do not (subsumed by a newer completion, cancelled by a failover).
    """
    app_id = app_id_of(app_id, None)
    store = open_store(store_url, parse_store_options(store_options))
    ended = [] if completed_only else list_failures(store, app_id)
    rows = history_rows(list_checkpoints(store, app_id), ended)
    if as_json:
        click.echo(json.dumps([r.to_dict() for r in rows], indent=1))
        return
    if not rows:
        click.echo(f"no checkpoint of {app_id!r} in {store_url}")
        return
    for line in render_list(rows):
        click.echo(line)


@checkpoints.command("show")
@click.argument("checkpoint_id", type=int)
@_app
@store_options
@click.option("--json", "as_json", is_flag=True, help="Print the stored record as it is.")
@click.option("--tasks", "per_task", is_flag=True, help="A table of per-task statistics.")
def show(
    checkpoint_id: int,
    app_id: str | None,
    store_url: str,
    store_options: tuple[str, ...],
    as_json: bool,
    per_task: bool,
) -> None:
    """Everything about one checkpoint: per task handle, offsets, sizes and times."""
    app_id = app_id_of(app_id, None)
    store = open_store(store_url, parse_store_options(store_options))
    try:
        m = read_metadata(store, app_id, checkpoint_id)
    except MetadataError as e:
        failure = failure_of(store, app_id, checkpoint_id)
        if failure is None:
            click.echo(f"kstream: {_not_retained(store, app_id, checkpoint_id, e)}", err=True)
            sys.exit(1)
        _show_ended(failure, as_json, per_task)
        return
    if as_json:
        click.echo(m.to_json().decode())
        return
    row = HistoryRow.completed(m)
    click.echo(f"checkpoint {m.checkpoint_id} completed (attempt {m.attempt})")
    click.echo(f"  triggered  {when(m.trigger_time)}")
    click.echo(f"  completed  {when(m.complete_time)}  ({m.duration_ms:.0f} ms)")
    click.echo(
        f"  size       {human_bytes(m.state_size)} ({human_bytes(m.uploaded_size)} uploaded)"
    )
    click.echo(f"  tasks      {len(m.tasks)}")
    if per_task:
        for line in render_tasks(row):
            click.echo(line)
        return
    for name, t in sorted(m.tasks.items()):
        click.echo(f"  - {name} on {t.member or '?'}: {t.handle}")
        click.echo(
            f"      size {t.state_size} (+{t.uploaded_size}), alignment {t.alignment_ms:.1f} ms, "
            f"sync {t.sync_ms:.1f} ms, async {t.async_ms:.1f} ms, acked after {t.ack_delay_ms:.0f} ms"
        )
        click.echo(f"      offsets {json.dumps(t.offsets, sort_keys=True)}")


def _not_retained(store: CheckpointStore, app_id: str, n: int, error: MetadataError) -> str:
    """Why checkpoint ``n`` cannot be shown: which completed checkpoints the store keeps."""
    ids = completed_ids(store, app_id)
    if n in ids:
        return str(error)  # it is there but unreadable: the error says why
    if not ids:
        return f"no checkpoint {n} of {app_id!r}: the store holds no completed checkpoint of it"
    kept = ", ".join(str(i) for i in ids)
    older = " (older ones were deleted by retention, --retained)" if n < ids[0] else ""
    return f"no checkpoint {n} of {app_id!r}: the retained checkpoints are {kept}{older}"


def _show_ended(f: CheckpointFailure, as_json: bool, per_task: bool) -> None:
    if as_json:
        click.echo(f.to_json().decode())
        return
    click.echo(f"checkpoint {f.checkpoint_id} {f.status} (attempt {f.attempt})")
    click.echo(f"  triggered  {when(f.trigger_time)}")
    click.echo(f"  ended      {when(f.end_time)}  ({f.duration_ms:.0f} ms)")
    click.echo(f"  reason     {f.reason}")
    click.echo(f"  acknowledged by {len(f.tasks)} task(s); missing: {', '.join(f.missing) or '-'}")
    if per_task:
        for line in render_tasks(HistoryRow.ended(f)):
            click.echo(line)
