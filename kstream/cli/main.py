"""The ``kstream`` command: its options and its subcommands (one module each).

Exit codes: 0 done, 1 job failed, 2 usage or configuration error.
"""

from __future__ import annotations

import logging

import click

from kstream import __version__
from kstream.cli.checkpoints import checkpoints
from kstream.cli.coordinator import coordinator
from kstream.cli.dev import dev
from kstream.cli.run import run
from kstream.cli.worker import worker


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="kstream")
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
def main(verbose: int) -> None:
    """kstream: stateful, exactly-once stream processing on Kafka consumer-group workers.

    Write a topology in Python (see topologies/), then run it with `kstream run`,
    or deploy `kstream coordinator` plus any number of `kstream worker` processes.
    """
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


# Each subcommand module adds one line here.
main.add_command(run)
main.add_command(worker)
main.add_command(dev)
main.add_command(coordinator)
main.add_command(checkpoints)
