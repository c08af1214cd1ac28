"""The ``kstream`` command: its options and its subcommands (one module each).

A subcommand's module is imported when that subcommand runs, so `kstream checkpoints
list` does not load the Kafka clients, RocksDB and the worker (start-up time).

Exit codes: 0 done, 1 job failed, 2 usage or configuration error.
"""

from __future__ import annotations

import importlib
import logging

import click

from kstream import __version__
from kstream.logs import configure_logging

# Each subcommand adds one line here: name -> "module:attribute".
SUBCOMMANDS = {
    "run": "kstream.cli.run:run",
    "worker": "kstream.cli.worker:worker",
    "dev": "kstream.cli.dev:dev",
    "coordinator": "kstream.cli.coordinator:coordinator",
    "checkpoints": "kstream.cli.checkpoints:checkpoints",
    "status": "kstream.cli.status:status",
    "savepoint": "kstream.cli.savepoints:savepoint",
    "savepoints": "kstream.cli.savepoints:savepoints",
    "state": "kstream.cli.state:state",
    "query": "kstream.cli.query:query",
}


class _LazyGroup(click.Group):
    """A group whose subcommands are imported on first use (click's lazy-loading pattern)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = SUBCOMMANDS.get(cmd_name)
        if target is None:
            return None
        module, attr = target.split(":")
        command = getattr(importlib.import_module(module), attr)
        assert isinstance(command, click.Command)
        return command


@click.group(
    cls=_LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, prog_name="kstream")
@click.option(
    "-v",
    "--verbose",
    count=True,
    help="More log output (-v info, -vv debug). worker, coordinator and run log at info "
    "by default.",
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    envvar="KSTREAM_LOG_FORMAT",
    default="text",
    show_default=True,
    help="text for people, json (one object per line) for log shippers.",
)
def main(verbose: int, log_format: str) -> None:
    """kstream: stateful, exactly-once stream processing on Kafka consumer-group workers.

    Write a topology in Python (see topologies/ and docs/first-job.md), then run it with
    `kstream run`, or deploy any number of identical `kstream worker` processes: they
    elect the one that hosts the job's coordinator (a separate `kstream coordinator`
    is optional: `kstream worker --coordinator external`).

    Every command takes the job as --app-id APP and the cluster as --bootstrap/-b
    HOST:PORT (env KSTREAM_APP_ID, KSTREAM_BOOTSTRAP; without either, the local broker
    of `kstream dev kafka start`).
    """
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    configure_logging(level, log_format)
