"""`kstream checkpoints list|show`: the completed checkpoints in the store."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime

import click

from kstream.store.metadata import MetadataError, list_checkpoints, read_metadata
from kstream.store.urls import open_store


def _when(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds")


@click.group()
def checkpoints() -> None:
    """Inspect the completed checkpoints of a job."""


_store = click.option(
    "--store", "store_url", default="file://./.kstream/checkpoints", show_default=True
)
_app = click.option("--app-id", envvar="KSTREAM_APP_ID", required=True)


@checkpoints.command("list")
@_store
@_app
def list_(store_url: str, app_id: str) -> None:
    """One line per completed checkpoint: id, time, size, tasks, duration."""
    rows = list_checkpoints(open_store(store_url), app_id)
    if not rows:
        click.echo(f"no completed checkpoint for {app_id!r} in {store_url}")
        return
    click.echo(
        f"{'id':>6}  {'completed (UTC)':<29} {'attempt':>7} {'size':>12} {'tasks':>5} {'duration':>10}"
    )
    for m in rows:
        click.echo(
            f"{m.checkpoint_id:>6}  {_when(m.complete_time):<29} {m.attempt:>7} "
            f"{m.state_size:>12} {len(m.tasks):>5} {m.duration_ms:>8.0f}ms"
        )


@checkpoints.command("show")
@click.argument("checkpoint_id", type=int)
@_store
@_app
@click.option("--json", "as_json", is_flag=True, help="Print the metadata file as stored.")
def show(checkpoint_id: int, store_url: str, app_id: str, as_json: bool) -> None:
    """Everything about one checkpoint: per task handle, offsets, sizes and times."""
    try:
        m = read_metadata(open_store(store_url), app_id, checkpoint_id)
    except MetadataError as e:
        click.echo(f"kstream: {e}", err=True)
        sys.exit(1)
    if as_json:
        click.echo(m.to_json().decode())
        return
    click.echo(f"checkpoint {m.checkpoint_id} (attempt {m.attempt})")
    click.echo(f"  triggered  {_when(m.trigger_time)}")
    click.echo(f"  completed  {_when(m.complete_time)}  ({m.duration_ms:.0f} ms)")
    click.echo(f"  size       {m.state_size} bytes ({m.uploaded_size} uploaded)")
    click.echo(f"  tasks      {len(m.tasks)}")
    for name, t in sorted(m.tasks.items()):
        click.echo(f"  - {name} on {t.member or '?'}: {t.handle}")
        click.echo(
            f"      size {t.state_size} (+{t.uploaded_size}), alignment {t.alignment_ms:.1f} ms, "
            f"sync {t.sync_ms:.1f} ms, async {t.async_ms:.1f} ms, acked after {t.ack_delay_ms:.0f} ms"
        )
        click.echo(f"      offsets {json.dumps(t.offsets, sort_keys=True)}")
