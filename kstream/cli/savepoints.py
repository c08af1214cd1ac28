"""`kstream savepoint APP [--stop]` and `kstream savepoints list|delete`.

A savepoint is a checkpoint kept outside retention (:mod:`kstream.checkpointstorage.savepoints`),
made by the job's coordinator on request (``SavepointRequest`` on the control
topic). ``--stop`` stops every worker gracefully first, so the savepoint is the
job's last checkpoint: everything read is in it and its exactly-once output is
published; the job's next version starts from it with ``--from-savepoint PATH``.
"""

from __future__ import annotations

import os
import socket
import sys
import time

import click

from kstream.checkpointstorage.layout import savepoint_metadata_path, savepoint_path
from kstream.checkpointstorage.metadata import MetadataError
from kstream.checkpointstorage.objectstore import parse_store_options
from kstream.checkpointstorage.savepoints import delete_savepoint, list_savepoints, read_savepoint
from kstream.checkpointstorage.urls import open_store
from kstream.cli.common import (
    app_argument,
    app_id_of,
    app_id_option,
    bootstrap_option,
    resolve_bootstrap,
    store_options,
)
from kstream.kafka.control import ControlClient, ControlError
from kstream.kafka.controltopic import control_topic_exists
from kstream.monitor.history import when
from kstream.names import control_topic
from kstream.protocol.messages import Heartbeat, SavepointRequest

QUIET_S = 3.0  # no heartbeat for this long: every worker has stopped (they beat every second)


@click.command()
@app_argument
@app_id_option()
@bootstrap_option()
@store_options
@click.option("--name", default=None, help="Savepoint name (default: sp-<UTC time>).")
@click.option(
    "--stop",
    is_flag=True,
    help="Stop every worker gracefully first: the savepoint is the job's last checkpoint and "
    "its exactly-once output is published; the coordinator exits 0 after it.",
)
@click.option("--timeout", type=float, default=120.0, show_default=True, help="Seconds to wait.")
def savepoint(
    app: str | None,
    app_id: str | None,
    bootstrap: str | None,
    store_url: str,
    store_options: tuple[str, ...],
    name: str | None,
    stop: bool,
    timeout: float,
) -> None:
    """Make a savepoint of the running job; prints its path (for --from-savepoint)."""
    app_id = app_id_of(app_id, app)
    bootstrap = resolve_bootstrap(bootstrap)
    store = open_store(store_url, parse_store_options(store_options))
    name = name or time.strftime("sp-%Y%m%d-%H%M%S", time.gmtime())
    path = savepoint_path(app_id, name)
    if store.exists(savepoint_metadata_path(path)):
        raise click.ClickException(f"savepoint {path} exists already: choose another --name")
    deadline = time.monotonic() + timeout
    requester = f"kstream-savepoint@{socket.gethostname()}/{os.getpid()}"
    if not control_topic_exists(bootstrap, app_id):
        raise click.ClickException(
            f"no control topic {control_topic(app_id)}: is the job {app_id!r} running?"
        )
    client = ControlClient(bootstrap, app_id, from_beginning=False)
    try:
        client.send(SavepointRequest(name, stop, requester))
        # 1. The coordinator makes the savepoint of the next checkpoint that completes.
        while not store.exists(savepoint_metadata_path(path)):
            if time.monotonic() > deadline:
                raise click.ClickException(
                    f"no savepoint {path} within {timeout:g}s: is the job running with a "
                    f"coordinator? (its log says why it refused or failed)"
                )
            client.poll(0.2)
        meta = read_savepoint(store, path)
        click.echo(f"savepoint of checkpoint {meta.checkpoint_id}: {path}", err=True)
        # 2. With --stop: each worker exits once that checkpoint's output is published;
        #    wait until no worker heartbeats any more.
        if stop:
            last_beat = time.monotonic()
            while time.monotonic() - last_beat < QUIET_S:
                if time.monotonic() > deadline:
                    raise click.ClickException(
                        f"savepoint {path} made, but workers still heartbeat after {timeout:g}s"
                    )
                if any(isinstance(m, Heartbeat) for m in client.poll(0.2)):
                    last_beat = time.monotonic()
            click.echo("every worker stopped", err=True)
    except ControlError as e:
        raise click.ClickException(str(e)) from e
    finally:
        client.close()
    click.echo(path)


@click.group()
def savepoints() -> None:
    """List or delete the savepoints of a job."""


@savepoints.command("list")
@app_argument
@app_id_option()
@store_options
def list_(
    app: str | None, app_id: str | None, store_url: str, store_options: tuple[str, ...]
) -> None:
    """One line per savepoint: path, checkpoint, when it was taken, size, origin."""
    app_id = app_id_of(app_id, app)
    rows = list_savepoints(open_store(store_url, parse_store_options(store_options)), app_id)
    if not rows:
        click.echo(f"no savepoints of {app_id}", err=True)
        return
    for sp in rows:
        m = sp.metadata
        origin = f"  (from {m.origin})" if m.origin else ""
        click.echo(
            f"{sp.path}  checkpoint {m.checkpoint_id}  {when(m.complete_time)}  "
            f"{m.state_size} bytes  {len(m.tasks)} tasks{origin}"
        )


@savepoints.command("delete")
@click.argument("path")
@store_options
def delete(path: str, store_url: str, store_options: tuple[str, ...]) -> None:
    """Delete the savepoint at PATH (APP/savepoints/NAME); the job's next retention pass
    deletes the state files only it needed."""
    try:
        n = delete_savepoint(open_store(store_url, parse_store_options(store_options)), path)
    except MetadataError as e:
        click.echo(f"kstream: {e}", err=True)
        sys.exit(2)
    click.echo(f"deleted {path} ({n} files)", err=True)
