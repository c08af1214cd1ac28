"""`kstream status APP`: a running job at a glance, from its control topic and checkpoint store."""

from __future__ import annotations

import json
import sys
import time

import click

from kstream.checkpointstorage.base import CheckpointStore
from kstream.checkpointstorage.history import list_failures, list_restarts
from kstream.checkpointstorage.metadata import list_checkpoints
from kstream.checkpointstorage.objectstore import parse_store_options
from kstream.checkpointstorage.urls import open_store
from kstream.cli.common import (
    app_argument,
    app_id_of,
    app_id_option,
    bootstrap_option,
    resolve_bootstrap,
    store_options,
)
from kstream.kafka.clients import (
    committed_group_offsets,
    make_admin,
    make_consumer,
    partition_counts,
    watermark_offsets,
)
from kstream.kafka.control import ControlReader
from kstream.monitor.history import history_rows
from kstream.monitor.status import (
    JobStatus,
    LagRow,
    build_status,
    committed_source_positions,
    source_positions,
)
from kstream.monitor.view import ControlView
from kstream.names import control_topic, group_id, status_reader_group

CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear screen: --watch redraws in place


class StatusReader:
    """Reads the control topic incrementally (the view is kept) and the store afresh."""

    def __init__(self, bootstrap: str, app_id: str, store: CheckpointStore) -> None:
        self.app_id = app_id
        self._admin = make_admin(bootstrap)
        self.store = store
        self.view = ControlView()
        self._reader = ControlReader(bootstrap, app_id)
        self._consumer = make_consumer(bootstrap, status_reader_group(app_id))

    def read(self) -> JobStatus:
        for ts, msg in self._reader.read_to_end_timed():
            self.view.apply(ts, msg)
        completed = list_checkpoints(self.store, self.app_id)
        rows = history_rows(completed, list_failures(self.store, self.app_id))
        positions = source_positions(completed[-1] if completed else None)
        basis = "checkpoint"
        if not positions:  # checkpointing off (or not yet): the group's committed offsets
            committed = committed_group_offsets(self._admin, group_id(self.app_id))
            positions, basis = committed_source_positions(self.app_id, committed), "committed"
        lag = [
            LagRow(topic, part, pos, watermark_offsets(self._consumer, topic, part, 10.0)[1])
            for (topic, part), pos in positions.items()
        ]
        restarts = list_restarts(self.store, self.app_id)
        return build_status(
            self.app_id, self.view, rows, restarts, lag, time.time(), lag_basis=basis
        )

    def close(self) -> None:
        self._reader.close()
        self._consumer.close()


@click.command()
@app_argument
@app_id_option()
@bootstrap_option()
@store_options
@click.option("--json", "as_json", is_flag=True, help="One JSON object (for scripts).")
@click.option("--watch", is_flag=True, help="Refresh in place until Ctrl-C.")
@click.option(
    "--every", type=float, default=2.0, show_default=True, help="Seconds between refreshes."
)
def status(
    app: str | None,
    app_id: str | None,
    bootstrap: str | None,
    store_url: str,
    store_options: tuple[str, ...],
    as_json: bool,
    watch: bool,
    every: float,
) -> None:
    """The job now: running, restoring, stopped (when, why) or failed; its coordinator,
    attempt, workers (host:pid) and their tasks, the latest checkpoints, recent failures
    and restarts with their causes, and lag per source partition.

    Reads `<app>.control` from its beginning and the checkpoint store; changes nothing.
    """
    app_id = app_id_of(app_id, app)
    bootstrap = resolve_bootstrap(bootstrap)
    admin = make_admin(bootstrap)
    if not partition_counts(admin, [control_topic(app_id)]):
        click.echo(
            f"kstream: no control topic {control_topic(app_id)} on {bootstrap}: "
            f"no job with app id {app_id!r} has run there",
            err=True,
        )
        sys.exit(1)
    reader = StatusReader(
        bootstrap, app_id, open_store(store_url, parse_store_options(store_options))
    )
    try:
        while True:
            st = reader.read()
            text = (
                json.dumps(st.to_dict(), indent=None if watch else 1)
                if as_json
                else "\n".join(st.render())
            )
            if watch and not as_json:
                click.echo(CLEAR, nl=False)
            click.echo(text)
            if not watch:
                return
            time.sleep(every)
    except KeyboardInterrupt:
        pass
    finally:
        reader.close()
